"""The fused ops' OpSchemas: registered on import, idempotent, as docs/ops.md states, with shape inference."""

from __future__ import annotations

import importlib

import onnx
import pytest
from onnx import TensorProto as T
from onnx import defs, helper, shape_inference

import onnxfuse.ops as ops


def test_registered_on_import_and_idempotent():
    ops.register()
    importlib.reload(ops)  # importing again re-runs register()
    for op_type in ops.OP_TYPES:
        s = defs.get_schema(op_type, ops.VERSION, ops.DOMAIN)
        assert (s.domain, s.since_version) == ("onnxfuse", 1)


@pytest.mark.parametrize("op_type,inputs,required_attrs", [
    ("DequantMatMul", ["A", "W", "scale", "zero_point", "global_scale", "bias"],
     {"K", "N", "block_size", "weight_format", "scale_format"}),
    ("DequantGather", ["table", "scale", "zero_point", "global_scale", "indices"],
     {"D", "block_size", "weight_format", "scale_format", "output_dtype"}),
    ("Dequantize", ["X", "scale", "zero_point", "global_scale"],
     {"shape", "axis", "block_size", "weight_format", "scale_format", "output_dtype"}),
    ("QuantizeDequantize", ["X", "scale", "zero_point", "global_scale"], {"element_format", "axis", "block_size"}),
])
def test_schema_matches_docs(op_type, inputs, required_attrs):
    s = ops.schema(op_type)
    assert [i.name for i in s.inputs] == inputs
    assert {n for n, a in s.attributes.items() if a.required} == required_attrs
    constraints = {c.type_param_str: set(c.allowed_type_strs) for c in s.type_constraints}
    assert constraints["Q"] == {"tensor(uint8)"}
    if "S" in constraints:
        assert constraints["S"] == {"tensor(float)", "tensor(float16)", "tensor(uint16)", "tensor(uint8)"}


def test_quantize_dequantize_defaults():
    attrs = ops.schema("QuantizeDequantize").attributes
    defaults = {n: helper.get_attribute_value(attrs[n].default_value) for n in ("mode", "scale_rule", "rounding_mode", "saturate")}
    assert defaults == {"mode": b"static", "scale_rule": b"mx", "rounding_mode": b"even", "saturate": 1}


def _model(node, inputs, output=None):
    graph = helper.make_graph([node], "g", inputs, [output or helper.make_empty_tensor_value_info("Y")])
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                                  helper.make_opsetid(ops.DOMAIN, ops.VERSION)])


def _inferred(model):
    out = shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    t = out.graph.output[0].type.tensor_type
    return t.elem_type, [d.dim_value or d.dim_param for d in t.shape.dim]


vi = helper.make_tensor_value_info


def test_shape_inference_dequant_matmul():
    node = helper.make_node("DequantMatMul", ["A", "W", "S"], ["Y"], domain="onnxfuse", K=64, N=10, block_size=32,
                            weight_format="int4", scale_format="float16")
    m = _model(node, [vi("A", T.FLOAT16, ["batch", 7, 64]), vi("W", T.UINT8, [10, 32]), vi("S", T.FLOAT16, [10, 2])])
    assert _inferred(m) == (T.FLOAT16, ["batch", 7, 10])


def test_shape_inference_dequant_gather():
    node = helper.make_node("DequantGather", ["T", "S", "", "", "I"], ["Y"], domain="onnxfuse", D=48, block_size=16,
                            weight_format="float4e2m1", scale_format="float8e4m3fn", output_dtype=T.BFLOAT16)
    m = _model(node, [vi("T", T.UINT8, [100, 24]), vi("S", T.UINT8, [100, 3]), vi("I", T.INT64, ["b", "s"])])
    assert _inferred(m) == (T.BFLOAT16, ["b", "s", 48])


def test_shape_inference_dequantize_and_qdq():
    node = helper.make_node("Dequantize", ["X", "S"], ["Y"], domain="onnxfuse", shape=[4, 6, 5], axis=1, block_size=4,
                            weight_format="uint8", scale_format="bfloat16", output_dtype=T.FLOAT)
    m = _model(node, [vi("X", T.UINT8, [20, 6]), vi("S", T.UINT16, [20, 2])])
    assert _inferred(m) == (T.FLOAT, [4, 6, 5])
    node = helper.make_node("QuantizeDequantize", ["X"], ["Y"], domain="onnxfuse", element_format="float4e2m1",
                            axis=-1, block_size=32, mode="dynamic")
    assert _inferred(_model(node, [vi("X", T.FLOAT, [2, "n", 64])])) == (T.FLOAT, [2, "n", 64])


def test_checker_rejects_what_the_schema_forbids():
    good = dict(K=64, N=10, block_size=32, weight_format="int4", scale_format="float16")
    inputs = [vi("A", T.FLOAT, [1, 64]), vi("W", T.UINT8, [10, 32]), vi("S", T.FLOAT16, [10, 2])]
    y = vi("Y", T.FLOAT, [1, 10])
    onnx.checker.check_model(_model(helper.make_node("DequantMatMul", ["A", "W", "S"], ["Y"], domain="onnxfuse", **good),
                                    inputs, y), full_check=True)
    missing = {k: v for k, v in good.items() if k != "N"}
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(_model(helper.make_node("DequantMatMul", ["A", "W", "S"], ["Y"], domain="onnxfuse",
                                                         **missing), inputs, y), full_check=True)
    bad_weight = [vi("A", T.FLOAT, [1, 64]), vi("W", T.INT8, [10, 32]), vi("S", T.FLOAT16, [10, 2])]
    with pytest.raises((onnx.checker.ValidationError, shape_inference.InferenceError)):
        onnx.checker.check_model(_model(helper.make_node("DequantMatMul", ["A", "W", "S"], ["Y"], domain="onnxfuse",
                                                         **good), bad_weight, y), full_check=True)
