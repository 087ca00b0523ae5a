"""One test per diagnostic code the passes emit: the pattern stays exactly as it was on an error."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfuse
from onnxfuse.diagnostics import OnnxfuseError
from qdq_builders import count_ops, make_model

F = TensorProto.FLOAT
K, N = 64, 8


def dq_matmul(codes, scale, zp=None, *, axis=0, block_size=32, opset=21, output_dtype=None, scale_node=None,
              extra_inits=(), extra_inputs=(), act=F):
    """a[2, K] @ DQ(codes, scale[, zp]) -> y, built as given (possibly invalid on purpose)."""
    inits = [numpy_helper.from_array(codes, "w_q")]
    nodes = list(scale_node or [])
    if scale is not None:
        inits.append(numpy_helper.from_array(scale, "w_s"))
    inputs = ["w_q", "w_s"]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "w_zp"))
        inputs.append("w_zp")
    attrs = {"axis": axis, "block_size": block_size}
    if output_dtype:
        attrs["output_dtype"] = output_dtype
    nodes.append(helper.make_node("DequantizeLinear", inputs, ["w"], name="dq", **attrs))
    nodes.append(helper.make_node("MatMul", ["a", "w"], ["y"], name="mm"))
    return make_model(nodes, inits + list(extra_inits),
                      [helper.make_tensor_value_info("a", act, [2, K]), *extra_inputs],
                      [helper.make_tensor_value_info("y", act, [2, N])], opset)


def int4_codes(shape=(K, N)):
    return np.random.default_rng(40).integers(-8, 8, size=shape).astype(ml_dtypes.int4)


def scales(shape=(K // 32, N), dtype=np.float32, value=0.05):
    return np.full(shape, value, dtype=np.float32).astype(dtype)


def codes_of(report, severity=None):
    return {d.code.id for d in report.diagnostics if severity is None or d.severity.value == severity}


def assert_left_as_is(model, fused_model):
    before = model.SerializeToString()
    proto = ir.serde.serialize_model(fused_model)
    assert count_ops(proto, "DequantizeLinear") == count_ops(onnx.ModelProto.FromString(before), "DequantizeLinear")
    assert [t.SerializeToString() for t in proto.graph.initializer] == [t.SerializeToString() for t in model.graph.initializer]


def _run(model):
    fused, report = onnxfuse.optimize(model)
    return fused, report


def test_ofx201_e4m3_scale_directly_on_dq_is_illegal():
    model = dq_matmul(int4_codes(), scales(dtype=ml_dtypes.float8_e4m3fn), opset=23)
    fused, report = _run(model)
    assert "OFX201" in codes_of(report, "error")
    assert_left_as_is(model, fused)


def test_ofx202_scale_shape_mismatch():
    model = dq_matmul(int4_codes(), scales(shape=(3, N)))
    fused, report = _run(model)
    assert "OFX202" in codes_of(report, "error")
    assert_left_as_is(model, fused)


@pytest.mark.parametrize("bad", ["nan", "inf", "e8m0-ff"])
def test_ofx203_nan_inf_scales(bad):
    if bad == "e8m0-ff":
        s = np.full((K // 32, N), 127, np.uint8)
        s[1, 3] = 0xFF
        model = dq_matmul(np.zeros((K, N), ml_dtypes.float4_e2m1fn), s.view(ml_dtypes.float8_e8m0fnu), opset=24,
                          output_dtype=F)
    else:
        s = scales()
        s[0, 2] = np.nan if bad == "nan" else np.inf
        model = dq_matmul(int4_codes(), s)
    fused, report = _run(model)
    errors = [d for d in report.diagnostics if d.code.id == "OFX203"]
    assert errors and errors[0].is_error and errors[0].node == "dq"
    if bad == "e8m0-ff":
        assert "0xFF" in errors[0].message
    assert_left_as_is(model, fused)


def test_ofx204_zero_scale_is_a_warning_and_still_fuses():
    s = scales()
    s[1, 1] = 0
    fused, report = _run(dq_matmul(int4_codes(), s))
    assert "OFX204" in codes_of(report, "warning")
    assert report.counts["DequantMatMul"]


def test_ofx205_nonzero_zero_point_on_float_format():
    codes = np.zeros((K, N), np.float32).astype(ml_dtypes.float8_e4m3fn)
    zp = np.ones((K // 32, N), np.float32).astype(ml_dtypes.float8_e4m3fn)
    model = dq_matmul(codes, scales(), zp)
    fused, report = _run(model)
    assert "OFX205" in codes_of(report, "error")
    assert_left_as_is(model, fused)


def test_ofx206_zero_point_shape_mismatch():
    model = dq_matmul(int4_codes(), scales(), np.zeros((1, N), ml_dtypes.int4))
    fused, report = _run(model)
    assert "OFX206" in codes_of(report, "error")
    assert_left_as_is(model, fused)


def _two_level(outer_init=None, outer_input=None):
    bs = numpy_helper.from_array(np.full((K // 16, N), 2.0, np.float32).astype(ml_dtypes.float8_e4m3fn), "bs")
    scale_node = [helper.make_node("DequantizeLinear", ["bs", "gs"], ["w_s"], name="dq_scale")]
    codes = np.random.default_rng(41).integers(0, 16, size=(K, N)).astype(np.uint8).view(ml_dtypes.float4_e2m1fn)
    inits = [bs] + ([outer_init] if outer_init is not None else [])
    inputs = [outer_input] if outer_input is not None else []
    return dq_matmul(codes, None, block_size=16, opset=23, scale_node=scale_node, extra_inits=inits,
                     extra_inputs=inputs)


def test_ofx207_two_level_outer_scale_not_scalar():
    model = _two_level(outer_init=numpy_helper.from_array(np.full((N,), 0.5, np.float32), "gs"))
    model.graph.node[0].attribute.append(helper.make_attribute("axis", 1))
    fused, report = _run(model)
    assert "OFX207" in codes_of(report, "error")
    assert_left_as_is(model, fused)


def test_ofx208_two_level_outer_scale_not_constant():
    model = _two_level(outer_input=helper.make_tensor_value_info("gs", F, []))
    fused, report = _run(model)
    assert "OFX208" in codes_of(report, "error")
    assert report.fused == []  # the global scale is never dropped: nothing fused
    assert_left_as_is(model, fused)


def test_ofx209_e8m0_scales_beyond_fp16_with_fp16_activations():
    s = np.full((K // 32, N), 127 + 20, np.uint8).view(ml_dtypes.float8_e8m0fnu)  # 2^20 * 6 > 65504
    codes = np.zeros((K, N), np.float32).astype(ml_dtypes.float4_e2m1fn)
    model = dq_matmul(codes, s, opset=24, output_dtype=TensorProto.FLOAT16, act=TensorProto.FLOAT16)
    fused, report = _run(model)
    assert "OFX209" in codes_of(report, "warning")
    assert report.counts["DequantMatMul"]  # fused, computing in float32


def test_ofx210_unknown_element_type():
    model = dq_matmul(np.zeros((K, N), np.int32), scales())
    fused, report = _run(model)
    assert "OFX210" in codes_of(report, "error")
    assert_left_as_is(model, fused)


def test_ofx211_axis_out_of_range():
    model = dq_matmul(int4_codes(), scales(), axis=5)
    fused, report = _run(model)
    assert "OFX211" in codes_of(report, "error")
    assert_left_as_is(model, fused)


def test_ofx212_e8m0_needs_opset_24_and_fp4_needs_23():
    s = np.full((K // 32, N), 127, np.uint8).view(ml_dtypes.float8_e8m0fnu)
    model = dq_matmul(np.zeros((K, N), np.float32).astype(ml_dtypes.float4_e2m1fn), s, opset=21, output_dtype=F)
    fused, report = _run(model)
    assert codes_of(report, "error") & {"OFX212", "OFX201"}
    assert "OFX212" in codes_of(report, "error")
    assert_left_as_is(model, fused)


def test_ofx301_every_dq_left_has_a_reason():
    # A per-axis int8 DQ is left to onnxruntime: still explained.
    model = dq_matmul(np.ones((K, N), np.int8), np.full((N,), 0.1, np.float32), axis=1, block_size=0)
    fused, report = _run(model)
    assert report.skipped["dq"] and "not block-scaled" in report.skipped["dq"][0]
    assert any(d.code.id == "OFX301" and d.node == "dq" for d in report.diagnostics)


def test_ofx302_fused_is_reported():
    fused, report = _run(dq_matmul(int4_codes(), scales()))
    assert any(d.code.id == "OFX302" and d.severity.value == "info" for d in report.diagnostics)


def test_ofx303_dynamic_weight():
    model = dq_matmul(int4_codes(), scales())
    # make the codes a graph input: a run-time weight
    codes_init = model.graph.initializer[0]
    model.graph.input.append(helper.make_tensor_value_info("w_q", TensorProto.INT4, [K, N]))
    model.graph.initializer.remove(codes_init)
    fused, report = _run(model)
    assert "OFX303" in codes_of(report)
    assert report.fused == []


def test_ofx304_shared_weight():
    model = dq_matmul(int4_codes(), scales())
    model.graph.node.append(helper.make_node("Relu", ["w"], ["w_relu"], name="relu"))
    model.graph.output.append(helper.make_tensor_value_info("w_relu", F, [K, N]))
    fused, report = _run(model)
    assert "OFX304" in codes_of(report)


def test_ofx305_unknown_trt_attributes_are_reported():
    # covered for Quark in test_passes_qdq; here a trt op with an unexpected output structure
    nodes = [helper.make_node("TRT_FP4DynamicQuantize", ["x", "g"], ["xq", "sq"], name="fp4q", domain="trt",
                              axis=-1, block_size=16),
             helper.make_node("Identity", ["xq"], ["y"], name="id")]
    model = make_model(nodes, [numpy_helper.from_array(np.array(1.0, np.float32), "g")],
                       [helper.make_tensor_value_info("x", F, [2, K])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT4E2M1, [2, K])], 23, extra_opsets=[("trt", 1)])
    fused, report = _run(model)
    assert "fp4q" in report.skipped and report.fused == []


def test_strict_raises_with_the_errors_and_writes_nothing(tmp_path):
    model = dq_matmul(int4_codes(), scales(shape=(3, N)))
    out = tmp_path / "out.onnx"
    with pytest.raises(OnnxfuseError) as e:
        onnxfuse.optimize(model, out, strict=True)
    assert {d.code.id for d in e.value.diagnostics} == {"OFX202"}
    assert not out.exists()


def test_check_returns_diagnostics_and_never_modifies_its_input():
    model = ir.serde.deserialize_model(dq_matmul(int4_codes(), scales(value=np.nan)))
    before = ir.serde.serialize_model(model).SerializeToString()
    diagnostics = onnxfuse.check(model)
    assert any(d.code.id == "OFX203" and d.is_error for d in diagnostics)
    assert ir.serde.serialize_model(model).SerializeToString() == before
