"""Types for every value before matching: onnx shape inference, carried through exporters' ops.

Exports often carry no value_info, and onnx's shape inference stops at ops it has no schema
for: everything after the first `com.amd.quark` or `trt::` node stays untyped, and a fused
activation op needs its dtype. For the duration of inference only, this pass registers small
schemas for those exporter ops (output types as the exporters define them); they are removed
afterwards so onnx.checker keeps treating the original ops as unknown custom ops.
"""

from __future__ import annotations

import contextlib

import onnx_ir as ir
from onnx import TensorProto, defs, helper
from onnx.defs import OpSchema
from onnx_ir.passes import common

_AT = OpSchema.AttrType
_OPT = OpSchema.FormalParameterOption.Optional
_ANY = ["tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(uint8)", "tensor(float8e4m3fn)",
        "tensor(float8e5m2)", "tensor(float4e2m1)", "tensor(float8e8m0)"]


def _attr(ctx, name: str, default):
    a = ctx.get_attribute(name)
    return default if a is None else helper.get_attribute_value(a)


def _same_as_input(ctx) -> None:
    ctx.set_output_type(0, ctx.get_input_type(0))


def _typed_like_input(ctx, out: int, elem_type: int) -> None:
    t = helper.make_tensor_type_proto(elem_type, None)
    src = ctx.get_input_type(0)
    if src is not None and src.tensor_type.HasField("shape"):
        t.tensor_type.shape.CopyFrom(src.tensor_type.shape)
    ctx.set_output_type(out, t)


def _fp4_dynamic_quantize(ctx) -> None:  # (x, global scale) -> (fp4 codes, e4m3 block scales)
    _typed_like_input(ctx, 0, TensorProto.FLOAT4E2M1)
    ctx.set_output_type(1, helper.make_tensor_type_proto(TensorProto.FLOAT8E4M3FN, None))


def _mxfp8_dynamic_quantize(ctx) -> None:  # (x) -> (fp8 codes, E8M0 scales stored as uint8)
    _typed_like_input(ctx, 0, TensorProto.FLOAT8E4M3FN)
    ctx.set_output_type(1, helper.make_tensor_type_proto(TensorProto.UINT8, None))


def _mxfp8_dequantize(ctx) -> None:  # (fp8 codes, uint8 E8M0 scales) -> output_dtype
    _typed_like_input(ctx, 0, _attr(ctx, "output_dtype", TensorProto.FLOAT))


def _schema(domain, name, n_in, n_out, attrs, infer) -> OpSchema:
    s = OpSchema(
        name, domain, 1, f"{domain}::{name}, typed for shape inference only",
        inputs=[OpSchema.FormalParameter(f"i{i}", f"T{i}", "", param_option=_OPT) for i in range(n_in)],
        outputs=[OpSchema.FormalParameter(f"o{i}", f"U{i}", "") for i in range(n_out)],
        type_constraints=[(f"T{i}", _ANY, "") for i in range(n_in)] + [(f"U{i}", _ANY, "") for i in range(n_out)],
        attributes=[OpSchema.Attribute(a, t, "", required=False) for a, t in attrs],
    )
    s.set_type_and_shape_inference_function(infer)
    return s


def _exporter_schemas() -> list[OpSchema]:
    mx = [("axis", _AT.INT), ("block_size", _AT.INT)]
    return [
        _schema("com.amd.quark", "MXQuantizeDequantize", 1, 1,
                [("element_dtype", _AT.STRING), ("rounding_mode", _AT.INT), *mx], _same_as_input),
        _schema("trt", "TRT_FP4DynamicQuantize", 2, 2, [("scale_type", _AT.INT), *mx], _fp4_dynamic_quantize),
        _schema("trt", "TRT_MXFP8DynamicQuantize", 1, 2, [("output_dtype", _AT.INT), *mx], _mxfp8_dynamic_quantize),
        _schema("trt", "TRT_MXFP8DequantizeLinear", 2, 1, [("output_dtype", _AT.INT), *mx], _mxfp8_dequantize),
    ]


@contextlib.contextmanager
def _exporter_ops_known():
    added = []
    try:
        for s in _exporter_schemas():
            if not defs.has(s.name, s.since_version, s.domain):
                defs.register_schema(s)
                added.append(s)
        yield
    finally:
        for s in added:
            defs.deregister_schema(s.name, s.since_version, s.domain)


class InferTypesPass(ir.passes.InPlacePass):
    """Fill in value types and shapes; values that already have them keep them."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        order = list(model.graph.initializers.values())
        with _exporter_ops_known():
            # Non-strict: a node inference cannot handle is skipped, never an error.
            result = common.ShapeInferencePass(check_type=False, strict_mode=False, data_prop=False)(model)
        # onnx-ir takes the initializers out around the onnx call and puts them back in another
        # order; keep the model's own, so a model with nothing to fuse comes out as it went in.
        model.graph.initializers.clear()
        for value in order:
            model.graph.initializers.add(value)
        return ir.passes.PassResult(model, result.modified)
