"""Schemas of the fused ops (domain `onnxfuse`, version 1), registered with onnx.defs on import.

docs/ops.md is the contract these schemas state: inputs, type constraints, attributes and the
row layout of every quantized tensor. Registration is idempotent: importing this module again,
or calling `register()` when the schemas are already present, changes nothing.

Each schema carries a type and shape inference function, so onnx.shape_inference and
onnx.checker(full_check=True) type the fused nodes' outputs without inlining the model-local
function bodies (passes/functions.py) that stock onnxruntime runs.
"""

from __future__ import annotations

from onnx import TensorProto, defs, helper
from onnx.defs import OpSchema

DOMAIN = "onnxfuse"
VERSION = 1

WEIGHT_FORMATS = ("int2", "uint2", "int4", "uint4", "int8", "uint8", "float8e4m3fn", "float8e5m2",
                  "float4e2m1", "float6e2m3", "float6e3m2")
SCALE_FORMATS = ("float32", "float16", "bfloat16", "float8e8m0", "float8e4m3fn")
COMPUTE_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)
QDQ_ROUNDING_MODES = ("even", "away", "up", "floor", "ceil")

_T = ("T", ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"], "Activation / output type; accumulation is float32.")
_S = ("S", ["tensor(float)", "tensor(float16)", "tensor(uint16)", "tensor(uint8)"],
      "Scale storage: float32, float16, bfloat16 bits (uint16), float8e8m0 / float8e4m3fn codes (uint8).")
_Q = ("Q", ["tensor(uint8)"], "Row-layout packed codes, zero point codes.")
_F = ("F", ["tensor(float)"], "The float32 scalar outer (global) scale.")
_I = ("Tind", ["tensor(int32)", "tensor(int64)"], "Index type.")

_Attr = OpSchema.Attribute
_AT = OpSchema.AttrType
_P = OpSchema.FormalParameter
_OPT = OpSchema.FormalParameterOption.Optional


def _default(name: str, value, doc: str):
    return _Attr(name, helper.make_attribute(name, value), doc)


def _format_attrs(size_name: str, size_doc: str) -> list:
    return [
        _Attr(size_name, _AT.INT, size_doc),
        _Attr("block_size", _AT.INT, "Elements per scale along the blocked axis (the last block may be ragged)."),
        _Attr("weight_format", _AT.STRING, "Element format: " + " ".join(WEIGHT_FORMATS) + "."),
        _Attr("scale_format", _AT.STRING, "Scale format: " + " ".join(SCALE_FORMATS) + "."),
    ]


def _scale_inputs() -> list:
    return [
        _P("scale", "S", "Block scales [R, G], G = ceil(K / block_size), stored as scale_format says."),
        _P("zero_point", "Q", "Zero point codes [R, G], one raw element code per byte (integer formats).", param_option=_OPT),
        _P("global_scale", "F", "Outer scalar of a two-level scale (float32, shape []).", param_option=_OPT),
    ]


# --- inference -------------------------------------------------------------------------
def _attr(ctx, name: str):
    a = ctx.get_attribute(name)
    return None if a is None else helper.get_attribute_value(a)


def _tensor_type(elem_type: int, dims) -> bytes:
    """dims: a list of int (known), str (symbolic) or None (unknown); None for unknown rank."""
    t = helper.make_tensor_type_proto(elem_type, None)
    if dims is not None:
        shape = t.tensor_type.shape
        shape.SetInParent()
        for d in dims:
            dim = shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            elif isinstance(d, str):
                dim.dim_param = d
    return t


def _input_dims(ctx, idx: int):
    t = ctx.get_input_type(idx)
    if t is None or not t.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.tensor_type.shape.dim]


def _check_output_dtype(value) -> int:
    if value not in COMPUTE_TYPES:
        raise defs.SchemaError(f"output_dtype must be FLOAT, FLOAT16 or BFLOAT16, got {value}")
    return value


def _infer_dequant_matmul(ctx) -> None:
    a = ctx.get_input_type(0)
    dims = _input_dims(ctx, 0)
    n = _attr(ctx, "N")
    out_dims = None if dims is None else dims[:-1] + [n]
    ctx.set_output_type(0, _tensor_type(a.tensor_type.elem_type, out_dims))


def _infer_dequant_gather(ctx) -> None:
    dims = _input_dims(ctx, 4)
    out_dims = None if dims is None else dims + [_attr(ctx, "D")]
    ctx.set_output_type(0, _tensor_type(_check_output_dtype(_attr(ctx, "output_dtype")), out_dims))


def _infer_dequantize(ctx) -> None:
    shape = list(_attr(ctx, "shape"))
    ctx.set_output_type(0, _tensor_type(_check_output_dtype(_attr(ctx, "output_dtype")), shape))


def _infer_same_as_input(ctx) -> None:
    ctx.set_output_type(0, ctx.get_input_type(0))


# --- schemas ---------------------------------------------------------------------------
def _dequant_matmul() -> OpSchema:
    s = OpSchema(
        "DequantMatMul", DOMAIN, VERSION,
        "Y = A @ W + bias, W[k, n] = w[n, k] decoded from the row layout (docs/ops.md). Accumulates in float32.",
        inputs=[_P("A", "T", "Activations [..., K]."),
                _P("W", "Q", "Weight in row layout [N, Kb]: row n is output column n."),
                *_scale_inputs(),
                _P("bias", "T", "Bias [N].", param_option=_OPT)],
        outputs=[_P("Y", "T", "[..., N].")],
        type_constraints=[_T, _S, _Q, _F],
        attributes=[_Attr("N", _AT.INT, "Output features (rows of W)."),
                    *_format_attrs("K", "Reduction size (logical row length of W).")],
    )
    s.set_type_and_shape_inference_function(_infer_dequant_matmul)
    return s


def _dequant_gather() -> OpSchema:
    s = OpSchema(
        "DequantGather", DOMAIN, VERSION,
        "Y = dequant(table)[indices]: a quantized embedding lookup; negative indices count from the end.",
        inputs=[_P("table", "Q", "Table in row layout [V, Db], blocks along the embedding dim D."),
                *_scale_inputs(),
                _P("indices", "Tind", "Any shape.")],
        outputs=[_P("Y", "T", "indices.shape + [D], of type output_dtype.")],
        type_constraints=[_T, _S, _Q, _F, _I],
        attributes=[*_format_attrs("D", "Embedding dimension (logical row length of the table)."),
                    _Attr("output_dtype", _AT.INT, "TensorProto type of Y: FLOAT, FLOAT16 or BFLOAT16.")],
    )
    s.set_type_and_shape_inference_function(_infer_dequant_gather)
    return s


def _dequantize() -> OpSchema:
    s = OpSchema(
        "Dequantize", DOMAIN, VERSION,
        "A block DequantizeLinear whose consumer is not fused. X holds the data in row layout with the "
        "blocked axis moved last and the other axes flattened into rows, in their order.",
        inputs=[_P("X", "Q", "Row layout [R, Kb]."), *_scale_inputs()],
        outputs=[_P("Y", "T", "Of shape `shape` and type output_dtype.")],
        type_constraints=[_T, _S, _Q, _F],
        attributes=[_Attr("shape", _AT.INTS, "The original dims of the data."),
                    _Attr("axis", _AT.INT, "The blocked axis of `shape`, non-negative."),
                    _Attr("block_size", _AT.INT, "Elements per scale along `axis`."),
                    _Attr("weight_format", _AT.STRING, "Element format: " + " ".join(WEIGHT_FORMATS) + "."),
                    _Attr("scale_format", _AT.STRING, "Scale format: " + " ".join(SCALE_FORMATS) + "."),
                    _Attr("output_dtype", _AT.INT, "TensorProto type of Y: FLOAT, FLOAT16 or BFLOAT16.")],
    )
    s.set_type_and_shape_inference_function(_infer_dequantize)
    return s


def _quantize_dequantize() -> OpSchema:
    s = OpSchema(
        "QuantizeDequantize", DOMAIN, VERSION,
        "Fake quantization: quantize X to element_format in blocks along axis, then dequantize. "
        "Static mode reads the block scale; dynamic mode computes it per block by scale_rule.",
        inputs=[_P("X", "T", "Any shape."),
                _P("scale", "T2", "Static mode: the block scale in X's layout (X's rank, dim[axis] = "
                   "ceil(X.shape[axis] / block_size)). Absent in dynamic mode.", param_option=_OPT),
                _P("zero_point", "Q", "Static integer formats: zero point codes (uint8 raw codes), shape of scale.",
                   param_option=_OPT),
                _P("global_scale", "F", "Per-tensor float32 scale, shape [] (static: multiplies scale; "
                   "dynamic nvfp4: the NVFP4 tensor scale).", param_option=_OPT)],
        outputs=[_P("Y", "T", "Type and shape of X.")],
        type_constraints=[_T, ("T2", ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"], "Static scale type."),
                          _Q, _F],
        attributes=[_Attr("element_format", _AT.STRING, "Element format: " + " ".join(WEIGHT_FORMATS) + "."),
                    _Attr("axis", _AT.INT, "Blocked axis (negative counts from the end)."),
                    _Attr("block_size", _AT.INT, "Elements per block along axis (the last block may be ragged)."),
                    _default("mode", "static", "static or dynamic."),
                    _default("scale_rule", "mx", "Dynamic mode: mx (OCP E8M0 shared exponent), nvfp4, absmax."),
                    _default("rounding_mode", "even", "Element rounding: nearest with ties to even, away (from zero) or up (toward +inf); "
                             "or floor / ceil (toward -inf / +inf)."),
                    _default("saturate", 1, "float8: clamp to +-max (1) or overflow to NaN/Inf as Cast (0).")],
    )
    s.set_type_and_shape_inference_function(_infer_same_as_input)
    return s


OP_TYPES = ("DequantMatMul", "DequantGather", "Dequantize", "QuantizeDequantize")
_BUILDERS = (_dequant_matmul, _dequant_gather, _dequantize, _quantize_dequantize)


def register() -> None:
    """Register every fused op's schema with onnx.defs; a no-op for those already present."""
    for build in _BUILDERS:
        schema = build()
        if not defs.has(schema.name, VERSION, DOMAIN):
            defs.register_schema(schema)


def schema(op_type: str) -> OpSchema:
    register()
    return defs.get_schema(op_type, VERSION, DOMAIN)


register()
