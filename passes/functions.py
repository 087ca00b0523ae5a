"""Model-local functions for the fused ops: standard-op bodies that stock onnxruntime runs.

One function per op and format combination (its `overload`, from `overload_key`), never one
per node: sizes (K, N, D, block_size, shape, axis) are read from the calling node's attributes
through attribute references, while formats, optional inputs and the output type are baked
into the body. The passes add each function once: `model.functions[f.identifier()] = f`.

The body's opset import must equal the model's ai.onnx opset (onnx.checker requires every
body op to resolve to the same schema as in the model; onnxruntime resolves the inlined nodes
at the model's opset), so callers pass `opset=`. Bodies use ops whose semantics are the same
from opset 13 (19 for QuantizeDequantize) to 28; tests run them at 13 to 28.
"""

from __future__ import annotations

import onnx_ir
from onnx import TensorProto

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.formats import element_format, scale_format
from onnxfuse.ops import OP_TYPES
from onnxfuse.passes.function_builder import BodyBuilder
from onnxfuse.passes.function_decode import decode_rows
from onnxfuse.passes.function_qdq import DYNAMIC_SCALE_FORMATS, build_quantize_dequantize, check_combination

# Unsqueeze/Slice/Gather with tensor inputs: 13; QuantizeDequantize's Cast to float8 with
# `saturate` and ReduceMax with an axes input: 19 (18 for ReduceMax).
MIN_OPSET = {"DequantMatMul": 13, "DequantGather": 13, "Dequantize": 13, "QuantizeDequantize": 19}
DEFAULT_OPSET = 21
_DTYPE_KEYS = {TensorProto.FLOAT: "f32", TensorProto.FLOAT16: "f16", TensorProto.BFLOAT16: "bf16"}
_QDQ_DEFAULTS = {"mode": "static", "scale_rule": "mx", "rounding_mode": "even", "saturate": 1}

_INPUTS = {
    "DequantMatMul": ["A", "W", "scale", "zero_point", "global_scale", "bias"],
    "DequantGather": ["table", "scale", "zero_point", "global_scale", "indices"],
    "Dequantize": ["X", "scale", "zero_point", "global_scale"],
    "QuantizeDequantize": ["X", "scale", "zero_point", "global_scale"],
}
_ATTRIBUTES = {
    "DequantMatMul": ["K", "N", "block_size", "weight_format", "scale_format"],
    "DequantGather": ["D", "block_size", "weight_format", "scale_format", "output_dtype"],
    "Dequantize": ["shape", "axis", "block_size", "weight_format", "scale_format", "output_dtype"],
    "QuantizeDequantize": ["element_format", "axis", "block_size", "mode", "scale_rule", "rounding_mode", "saturate"],
}
_OUTPUTS = {"DequantMatMul": "Y", "DequantGather": "Y", "Dequantize": "Y", "QuantizeDequantize": "Y"}


def overload_key(op_type: str, *, weight_format: str, scale_format: str, has_zero_point: bool,
                 has_global_scale: bool, has_bias: bool, dtype: int, **extra) -> str:
    """A deterministic name of the format combination, e.g. "int4.float16.zp.bias.f16".

    QuantizeDequantize adds its mode, rule, rounding and saturation, e.g.
    "float4e2m1.float8e8m0.dynamic.mx.even.sat.f32". `opset` does not enter the key: a model
    has one opset, and the key must stay stable across re-optimization.
    """
    _check_op(op_type)
    if dtype not in _DTYPE_KEYS:
        raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID,
                               f"{op_type}: dtype must be FLOAT, FLOAT16 or BFLOAT16 (TensorProto enum), got {dtype}")
    parts = [_element_name(op_type, weight_format, extra), scale_format]
    if op_type == "QuantizeDequantize":
        q = _qdq_options(extra)
        parts += [q["mode"]]
        if q["mode"] == "dynamic":
            parts += [q["scale_rule"]]
        parts += [q["rounding_mode"], "sat" if q["saturate"] else "nosat"]
    parts += [flag for flag, on in (("zp", has_zero_point), ("gs", has_global_scale), ("bias", has_bias)) if on]
    parts.append(_DTYPE_KEYS[dtype])
    return ".".join(parts)


def function_for(op_type: str, *, weight_format: str, scale_format: str, has_zero_point: bool,
                 has_global_scale: bool, has_bias: bool, dtype: int, opset: int = DEFAULT_OPSET,
                 **extra) -> onnx_ir.Function:
    """The model-local function (domain onnxfuse, name op_type, overload overload_key(...)).

    dtype: TensorProto enum of T (DequantMatMul, QuantizeDequantize) or of output_dtype.
    opset: the model's ai.onnx opset (>= 21). extra (QuantizeDequantize): element_format (else
    weight_format is used), mode, scale_rule, rounding_mode, saturate.
    Raises OnnxfuseError for unknown formats and combinations the body cannot compute.
    """
    key = overload_key(op_type, weight_format=weight_format, scale_format=scale_format,
                       has_zero_point=has_zero_point, has_global_scale=has_global_scale, has_bias=has_bias,
                       dtype=dtype, **extra)
    if opset < MIN_OPSET[op_type]:
        raise OnnxfuseError.of(codes.OPSET_TOO_OLD, f"{op_type} function bodies need ai.onnx opset >= "
                               f"{MIN_OPSET[op_type]}, the model has {opset}",
                               hint="convert the model to a newer opset (onnx.version_converter)")
    element = element_format(_element_name(op_type, weight_format, extra))
    fmt = _scale_format(op_type, scale_format, extra)
    if has_zero_point and element.is_float:
        raise OnnxfuseError.of(codes.ZERO_POINT_FLOAT_FORMAT, f"{op_type}: {element.name} takes no zero point")
    b = BodyBuilder(opset)
    zp = "zero_point" if has_zero_point else None
    gs = "global_scale" if has_global_scale else None
    if op_type == "DequantMatMul":
        _dequant_matmul(b, element, fmt, zp, gs, has_bias, dtype)
    elif op_type == "DequantGather":
        _dequant_gather(b, element, fmt, zp, gs, dtype)
    elif op_type == "Dequantize":
        _dequantize(b, element, fmt, zp, gs, dtype)
    else:
        q = _qdq_options(extra)
        check_combination(element, fmt, mode=q["mode"], scale_rule=q["scale_rule"],
                          rounding_mode=q["rounding_mode"], saturate=bool(q["saturate"]),
                          has_zero_point=has_zero_point, has_global_scale=has_global_scale)
        build_quantize_dequantize(b, element=element, fmt=fmt, mode=q["mode"], scale_rule=q["scale_rule"],
                                  rounding_mode=q["rounding_mode"], saturate=bool(q["saturate"]),
                                  has_zero_point=has_zero_point, has_global_scale=has_global_scale, dtype=dtype)
    return b.function(op_type, key, _INPUTS[op_type], [_OUTPUTS[op_type]], _ATTRIBUTES[op_type])


# --- bodies ----------------------------------------------------------------------------------
def _finish(b, y: str, dtype: int) -> None:
    """Y = Cast_T(y), through an opaque op (in float32, which every CPU kernel has) so that
    onnxruntime fuses nothing of the model's across the body's output (BodyBuilder.opaque)."""
    y = b.opaque(y)
    b.identity_to(y if dtype == TensorProto.FLOAT else b.op("Cast", y, to=dtype), "Y")


def _dequant_matmul(b, element, fmt, zp, gs, has_bias, dtype) -> None:
    """Y = Cast_T(float32(A) @ w^T [+ float32(bias)]): accumulation and bias add in float32.
    A and the MatMul's result pass through opaque ops: no DequantizeLinear of the model reaches
    the MatMul (onnxruntime would requantize the folded weight) and MatMul + Add never become
    a Gemm, whose summation differs (BodyBuilder.opaque)."""
    w = decode_rows(b, "W", "scale", zp, gs, K=b.attr_int("K"), block_size=b.attr_int("block_size"),
                    element=element, fmt=fmt)
    y = b.op("MatMul", b.opaque(b.to_float("A", dtype)), b.op("Transpose", w, perm=[1, 0]))
    if has_bias:
        y = b.op("Add", b.opaque(y), b.to_float("bias", dtype))
    _finish(b, y, dtype)


def _dequant_gather(b, element, fmt, zp, gs, dtype) -> None:
    """Gather the rows first (as Gather does, negative indices included), then decode them."""
    flat = b.op("Reshape", "indices", b.ints(-1))
    rows = lambda name: b.op("Gather", name, flat, axis=0)  # noqa: E731
    D = b.attr_int("D")
    w = decode_rows(b, rows("table"), rows("scale"), rows(zp) if zp else None, gs, K=D,
                    block_size=b.attr_int("block_size"), element=element, fmt=fmt)
    out_shape = b.op("Concat", b.op("Shape", "indices"), D, axis=0)
    _finish(b, b.op("Reshape", w, out_shape, allowzero=1), dtype)


def _dequantize(b, element, fmt, zp, gs, dtype) -> None:
    """Rows [R, K] -> [P, Q, K] -> transpose -> [P, K, Q] -> `shape` (P, Q: products of the
    dims before and after `axis`), so one fixed permutation serves every rank and axis."""
    shape = b.attr_ints("shape")
    axis = b.attr_int("axis")
    after = b.op("Add", axis, b.ints(1))
    K = b.op("Slice", shape, axis, after, hint="K")
    w = decode_rows(b, "X", "scale", zp, gs, K=K, block_size=b.attr_int("block_size"), element=element, fmt=fmt)
    one = b.ints(1)
    P = b.op("ReduceProd", b.op("Concat", one, b.op("Slice", shape, b.ints(0), axis), axis=0), keepdims=1)
    Q = b.op("ReduceProd", b.op("Concat", one, b.op("Slice", shape, after, b.ints(2**62)), axis=0), keepdims=1)
    w3 = b.op("Reshape", w, b.op("Concat", P, Q, K, axis=0), allowzero=1)
    y = b.op("Reshape", b.op("Transpose", w3, perm=[0, 2, 1]), shape, allowzero=1)
    _finish(b, y, dtype)


# --- arguments -------------------------------------------------------------------------------
def _check_op(op_type: str) -> None:
    if op_type not in OP_TYPES:
        raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, f"no function body for op {op_type!r}",
                               hint="known: " + ", ".join(OP_TYPES))


def _element_name(op_type: str, weight_format: str, extra: dict) -> str:
    if op_type == "QuantizeDequantize":
        return extra.get("element_format") or weight_format
    return weight_format


def _scale_format(op_type: str, name: str, extra: dict):
    if op_type == "QuantizeDequantize" and not name:
        q = _qdq_options(extra)
        name = "float32" if q["mode"] == "static" else DYNAMIC_SCALE_FORMATS.get(q["scale_rule"], "")
    return scale_format(name)


def _qdq_options(extra: dict) -> dict:
    """The QuantizeDequantize options, schema defaults for those absent (or None)."""
    return {k: default if extra.get(k) is None else extra[k] for k, default in _QDQ_DEFAULTS.items()}

