"""Reference execution of zoo models, including exporters' custom ops that onnxruntime lacks.

onnx.reference.ReferenceEvaluator runs every standard op (it decodes float4e2m1, float8e8m0,
int2 and float6 Q/DQ that onnxruntime CPU cannot); the classes below add ModelOpt's `trt::` ops
and Quark's `com.amd.quark::MXQuantizeDequantize`, computed with the format layer's scale rules,
so a model can be evaluated before any onnxfuse pass touches it.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from onnxfuse import formats
from onnxfuse.formats import scale_rules


class TRT_MXFP8DequantizeLinear(OpRun):
    op_domain = "trt"

    def _run(self, x, scale, axis=-1, block_size=32, output_dtype=onnx.TensorProto.FLOAT):
        e8m0 = np.ascontiguousarray(scale).view(formats.scale_format("float8e8m0").np_dtype)  # uint8 raw codes
        return (formats.dequantize_linear(x, e8m0, axis=axis, block_size=block_size, output_dtype=output_dtype),)


class TRT_MXFP8DynamicQuantize(OpRun):
    op_domain = "trt"

    def _run(self, x, axis=-1, block_size=32, output_dtype=onnx.TensorProto.FLOAT8E4M3FN):
        name = {onnx.TensorProto.FLOAT8E4M3FN: "mxfp8", onnx.TensorProto.FLOAT8E5M2: "mxfp8e5m2"}[output_dtype]
        qt = formats.scheme(name).quantize(x.astype(np.float32), axis, block_size)
        return qt.data, np.ascontiguousarray(qt.scale).view(np.uint8)


class TRT_FP4DynamicQuantize(OpRun):
    """NVFP4 activations with a given (calibrated) per-tensor scale: the block half of scale_rules.nvfp4."""

    op_domain = "trt"

    def _run(self, x, global_scale, axis=-1, block_size=16, scale_type=onnx.TensorProto.FLOAT8E4M3FN):
        w = x.astype(np.float32)
        axis = formats.normalize_axis(axis, w.ndim)
        g = np.float32(global_scale)
        blocks, scale_shape = scale_rules.block_view(w, axis, block_size)
        amax = np.max(np.abs(blocks), axis=-1)
        target = np.maximum(amax / np.float32(scale_rules.NVFP4_E2M1_MAX) / g, np.float32(scale_rules.E4M3_MIN_SUBNORMAL))
        e4m3 = formats.scale_format("float8e4m3fn")
        block_scale = e4m3.encode(scale_rules.per_block(target.astype(np.float32), scale_shape, axis))
        effective = (block_scale.astype(np.float32) * g).astype(np.float32)
        data = formats.quantize_linear(w, effective, axis=axis, block_size=block_size, output_dtype=onnx.TensorProto.FLOAT4E2M1)
        return data, block_scale


QUARK_SCHEME = {"fp4_e2m1": "mxfp4", "fp6_e2m3": "mxfp6e2m3", "fp6_e3m2": "mxfp6e3m2", "fp8_e4m3": "mxfp8",
                "fp8_e5m2": "mxfp8e5m2", "int8": "mxint8"}


class MXQuantizeDequantize(OpRun):
    op_domain = "com.amd.quark"

    def _run(self, x, element_dtype="int8", axis=1, block_size=32, rounding_mode=2):
        if rounding_mode != 2:
            raise NotImplementedError("the reference implements Quark's rounding_mode 2 (half to even) only")
        qt = formats.scheme(QUARK_SCHEME[element_dtype]).quantize(x.astype(np.float32), axis, block_size)
        return (qt.dequantize().astype(x.dtype),)


CUSTOM_OPS = (TRT_MXFP8DequantizeLinear, TRT_MXFP8DynamicQuantize, TRT_FP4DynamicQuantize, MXQuantizeDequantize)


def reference_session(model) -> ReferenceEvaluator:
    """A ReferenceEvaluator for a path or ModelProto, with the exporters' custom ops."""
    return ReferenceEvaluator(model, new_ops=list(CUSTOM_OPS))


def run_reference(model, feeds: dict) -> list[np.ndarray]:
    return reference_session(model).run(None, feeds)


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
