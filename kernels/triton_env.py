"""Import triton the one way the kernels need it.

Without CUDA the kernels run in Triton's interpreter, which Triton reads from the environment
variable TRITON_INTERPRET at import time: so it must be set before the first `import triton`.
We set it only when CUDA is absent and the user has not chosen (an explicit TRITON_INTERPRET=0
is respected, and then launching fails with Triton's own "no GPU" error).

Triton 3.4-3.6's interpreter converts 1-element arrays to Python ints, which NumPy 2.4 refuses
(triton-lang/triton#9171, fixed in 3.7): every kernel's K loop would fail deep inside the
interpreter, so that combination is refused up front with the fix named.

mma_sync_dots holds the one setting of Triton's compiler the kernels change: mma.sync for the dots
of the wider swap-AB programs.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading


@functools.cache
def load():
    """Return (torch, triton, tl). Imports them on first use only."""
    import sys

    import torch

    if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
        if "triton" in sys.modules:
            # triton.language's own helpers were built for a GPU at import: the interpreter
            # would fail later with "Cannot call @triton.jit'd outside of the scope of a kernel".
            _refuse("triton was imported before onnxfuse.kernels on a machine without CUDA, so its interpreter "
                    "cannot be enabled", "set TRITON_INTERPRET=1 in the environment, or import onnxfuse.kernels first")
        os.environ["TRITON_INTERPRET"] = "1"
    import triton
    import triton.language as tl

    if _interpret_env():
        import numpy

        clash = interpreter_numpy_clash(triton.__version__, numpy.__version__)
        if clash:
            _refuse(clash, "pip install 'triton>=3.7', or pip install 'numpy<2.4'")
    return torch, triton, tl


def _refuse(message: str, hint: str):
    from onnxfuse import codes
    from onnxfuse.diagnostics import OnnxfuseError

    raise OnnxfuseError.of(codes.BACKEND_UNAVAILABLE, message, hint=hint)


def _major_minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def interpreter_numpy_clash(triton_version: str, numpy_version: str) -> str | None:
    """Why Triton's interpreter cannot run the kernels with this NumPy, or None (module docstring)."""
    if _major_minor(triton_version) < (3, 7) and _major_minor(numpy_version) >= (2, 4):
        return (f"Triton {triton_version}'s interpreter (TRITON_INTERPRET=1, used without CUDA) fails with "
                f"NumPy {numpy_version} (triton-lang/triton#9171)")
    return None


def interpreting() -> bool:
    load()
    return _interpret_env()


def _interpret_env() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


_MMA_SYNC_LOCK = threading.Lock()
_mma_sync_users = 0
_mma_sync_saved: str | None = None


@contextlib.contextmanager
def mma_sync_dots():
    """Inside, Triton compiles tl.dot for sm_90 as mma.sync, not wgmma: DISABLE_MMA_V3, which its
    dot lowering reads while compiling (the variable is one of those in Triton's cache key, so the
    two builds never share an entry). A 4- or 8-warp swap-AB program needs it: as wgmma, Triton
    sends the decoded weight through shared memory 16 bits at a time (benchmarks/kernels_sass.py).
    Nested and concurrent uses share one setting, and the caller's own value comes back at the end.
    The variable is the process's: a kernel another thread compiles meanwhile gets mma.sync too."""
    global _mma_sync_users, _mma_sync_saved
    with _MMA_SYNC_LOCK:
        if _mma_sync_users == 0:
            _mma_sync_saved = os.environ.get("DISABLE_MMA_V3")
            os.environ["DISABLE_MMA_V3"] = "1"
        _mma_sync_users += 1
    try:
        yield
    finally:
        with _MMA_SYNC_LOCK:
            _mma_sync_users -= 1
            if _mma_sync_users == 0:
                if _mma_sync_saved is None:
                    del os.environ["DISABLE_MMA_V3"]
                else:
                    os.environ["DISABLE_MMA_V3"] = _mma_sync_saved
