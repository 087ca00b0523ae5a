"""Triton kernels of the fused onnxfuse ops (installed as onnxfuse.kernels).

Importing this package imports neither torch nor triton: the public functions below load the
kernel modules on first call. Without CUDA the kernels run in Triton's interpreter
(TRITON_INTERPRET=1 is set before triton is first imported; see kernels/triton_env.py).
docs/kernels.md documents the API, the dispatch and the tuning cache.
"""

from __future__ import annotations

import importlib
import sys
import types

from onnxfuse.kernels.constant_layout import prepare_constant
from onnxfuse.kernels.support import supported

__all__ = ["dequant_matmul", "dequant_gather", "dequantize", "quantize_dequantize", "prepare_constant", "supported"]


def dequant_matmul(a, w, scale, zero_point, global_scale, bias, *, K, N, block_size, weight_format,
                   scale_format, out=None):
    """Y = A @ W + bias with W in the docs/ops.md row layout [N, Kb]. A: [..., K] fp16/bf16/fp32."""
    impl = _impl("dequant_matmul", "dequant_matmul")
    return impl(a, w, scale, zero_point, global_scale, bias, K=K, N=N, block_size=block_size,
                weight_format=weight_format, scale_format=scale_format, out=out)


def dequant_gather(table, scale, zero_point, global_scale, indices, *, D, block_size, weight_format,
                   scale_format, out_dtype):
    """dequant(table)[indices]: [*indices.shape, D] of out_dtype (a torch dtype)."""
    impl = _impl("dequant_ops", "dequant_gather")
    return impl(table, scale, zero_point, global_scale, indices, D=D, block_size=block_size,
                weight_format=weight_format, scale_format=scale_format, out_dtype=out_dtype)


def dequantize(x, scale, zero_point, global_scale, *, shape, axis, block_size, weight_format, scale_format,
               out_dtype):
    """The row-layout tensor x [R, Kb] decoded and laid out as `shape` (blocked axis `axis`)."""
    impl = _impl("dequant_ops", "dequantize")
    return impl(x, scale, zero_point, global_scale, shape=shape, axis=axis, block_size=block_size,
                weight_format=weight_format, scale_format=scale_format, out_dtype=out_dtype)


def quantize_dequantize(x, scale, zero_point, global_scale, *, element_format, axis, block_size, mode,
                        scale_rule, rounding_mode="even", saturate=True):
    """Fake quantization of x (static scale, or dynamic MX / NVFP4 / absmax block scales)."""
    impl = _impl("quantize_dequantize", "quantize_dequantize")
    return impl(x, scale, zero_point, global_scale, element_format=element_format, axis=axis,
                block_size=block_size, mode=mode, scale_rule=scale_rule, rounding_mode=rounding_mode,
                saturate=saturate)


_PUBLIC = ("dequant_matmul", "dequant_gather", "dequantize", "quantize_dequantize")


def _impl(module: str, name: str):
    return getattr(importlib.import_module(f"onnxfuse.kernels.{module}"), name)


class _Package(types.ModuleType):
    """Importing a submodule binds the package attribute of its name; dequant_matmul and
    quantize_dequantize share theirs with the public functions, which must stay callable.
    (Reach those submodules with `from onnxfuse.kernels.X import ...` or importlib.)"""

    def __setattr__(self, name, value):
        if name in _PUBLIC and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
