"""Import triton the one way the kernels need it.

Without CUDA the kernels run in Triton's interpreter, which Triton reads from the environment
variable TRITON_INTERPRET at import time: so it must be set before the first `import triton`.
We set it only when CUDA is absent and the user has not chosen (an explicit TRITON_INTERPRET=0
is respected, and then launching fails with Triton's own "no GPU" error).
"""

from __future__ import annotations

import functools
import os


@functools.cache
def load():
    """Return (torch, triton, tl). Imports them on first use only."""
    import sys

    import torch

    if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
        if "triton" in sys.modules:
            # triton.language's own helpers were built for a GPU at import: the interpreter
            # would fail later with "Cannot call @triton.jit'd outside of the scope of a kernel".
            from onnxfuse import codes
            from onnxfuse.diagnostics import OnnxfuseError

            raise OnnxfuseError.of(codes.BACKEND_UNAVAILABLE,
                                   "triton was imported before onnxfuse.kernels on a machine without CUDA, "
                                   "so its interpreter cannot be enabled",
                                   hint="set TRITON_INTERPRET=1 in the environment, or import onnxfuse.kernels first")
        os.environ["TRITON_INTERPRET"] = "1"
    import triton
    import triton.language as tl

    return torch, triton, tl


def interpreting() -> bool:
    load()
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
