"""onnxfuse: a graph compiler for block-scaled quantized ONNX models.

The optimize/check path needs only onnx, onnx-ir, numpy and ml_dtypes; the runtime's GPU path
imports torch and triton when it is first used.
"""

from __future__ import annotations

__version__ = "0.1.0"

from onnxfuse import ops as _ops  # registers the onnxfuse op schemas with onnx.defs  # noqa: E402,F401
from onnxfuse.diagnostics import Diagnostic, OnnxfuseError, Severity  # noqa: E402
from onnxfuse.model_io import load_model, save_model  # noqa: E402

# Heavier entry points load on first use, so `import onnxfuse` stays cheap.
_LAZY = {
    "optimize": ("onnxfuse.optimize_api", "optimize"),
    "check": ("onnxfuse.optimize_api", "check"),
    "Report": ("onnxfuse.optimize_api", "Report"),
    "quantize": ("onnxfuse.quantize_api", "quantize"),
    "InferenceSession": ("onnxfuse.runtime.session", "InferenceSession"),
}

__all__ = ["Diagnostic", "OnnxfuseError", "Severity", "load_model", "save_model", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'onnxfuse' has no attribute {name!r}")
