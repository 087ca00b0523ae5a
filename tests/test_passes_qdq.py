"""Activation fake quantization -> QuantizeDequantize: static Q->DQ, ModelOpt trt:: ops, AMD Quark."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfuse
from qdq_builders import block_expand, count_ops, make_model, run_ort

F = TensorProto.FLOAT
M, K, N = 4, 40, 6  # K = 40: a ragged last block for block 32 (and 16)


def _optimize(model):
    fused, report = onnxfuse.optimize(model)
    proto = ir.serde.serialize_model(fused)
    onnx.checker.check_model(proto, full_check=True)
    return proto, report


def _matmul_tail(nodes, inits, act: str):
    """act -> MatMul(act, W) -> y with a float weight, so the fake-quantized activation feeds a matmul."""
    w = np.random.default_rng(30).standard_normal((K, N)).astype(np.float32)
    inits.append(numpy_helper.from_array(w, "w"))
    nodes.append(helper.make_node("MatMul", [act, "w"], ["y"], name="matmul"))
    return w


def _blocks(x, block):
    pad = (-x.shape[-1]) % block
    xp = np.pad(x, [(0, 0), (0, pad)])
    return xp.reshape(x.shape[0], -1, block), pad


def _grid_round(v, dtype, vmax):
    """Round to the element grid: nearest, ties to even (ml_dtypes casts), saturating at +-vmax."""
    return np.clip(v, -vmax, vmax).astype(dtype).astype(np.float64)


def ref_mx(x, element_dtype, emax, vmax, block=32):
    xb, pad = _blocks(x.astype(np.float32), block)
    amax = np.abs(xb).max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.floor(np.log2(amax)) - emax, -127)
    scale = np.exp2(np.clip(e, -127, 127))
    q = _grid_round(xb / scale, element_dtype, vmax) * scale
    return q.reshape(x.shape[0], -1)[:, : x.shape[1]]


def ref_nvfp4(x, g, block=16):
    xb, _ = _blocks(x.astype(np.float32), block)
    amax = np.abs(xb).max(axis=-1, keepdims=True).astype(np.float32)
    s = np.clip(amax / np.float32(6) / np.float32(g), -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    denom = (s * np.float32(g)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(denom > 0, _grid_round(xb / denom, ml_dtypes.float4_e2m1fn, 6.0), 0.0)
    return (q * denom).reshape(x.shape[0], -1)[:, : x.shape[1]]


def _check(proto, x, xq_ref, w):
    (y,) = run_ort(proto, {"x": x})
    ref = xq_ref @ w.astype(np.float64)
    bound = (np.abs(xq_ref) @ np.abs(w.astype(np.float64))) * K * 2.0**-23 + 1e-30  # float32 accumulation
    assert (np.abs(y - ref) <= bound).all(), np.abs(y - ref).max()


@pytest.mark.parametrize("element,np_dtype,zp", [
    ("int8", np.int8, None), ("uint8", np.uint8, 128), ("int4", ml_dtypes.int4, None),
    ("float8e4m3fn", ml_dtypes.float8_e4m3fn, None),
])
def test_static_q_dq(element, np_dtype, zp):
    rng = np.random.default_rng(31)
    x = rng.standard_normal((M, K)).astype(np.float32)
    scale = rng.uniform(0.01, 0.05, size=(M, 2)).astype(np.float32)
    inits = [numpy_helper.from_array(scale, "s")]
    q_inputs = ["x", "s"]
    zp_arr = None
    if zp is not None or element != "float8e4m3fn":
        zp_arr = np.full((M, 2), zp or 0, dtype=np_dtype)
        inits.append(numpy_helper.from_array(zp_arr, "zp"))
        q_inputs.append("zp")
    q_attrs = {"output_dtype": TensorProto.FLOAT8E4M3FN} if zp_arr is None else {}  # else Q makes uint8
    nodes = [helper.make_node("QuantizeLinear", q_inputs, ["xq"], name="q", axis=1, block_size=32, **q_attrs),
             helper.make_node("DequantizeLinear", ["xq", *q_inputs[1:]], ["xdq"], name="dq", axis=1, block_size=32)]
    w = _matmul_tail(nodes, inits, "xdq")
    model = make_model(nodes, inits, [helper.make_tensor_value_info("x", F, [M, K])],
                       [helper.make_tensor_value_info("y", F, [M, N])], 21)
    proto, report = _optimize(model)
    assert count_ops(proto, "QuantizeDequantize", "onnxfuse") == 1
    assert count_ops(proto, "QuantizeLinear") == 0 and count_ops(proto, "DequantizeLinear") == 0
    s = block_expand(scale, 1, 32, K)
    z = 0.0 if zp_arr is None else float(zp or 0)
    v = (x / s.astype(np.float32)).astype(np.float32)
    if element.startswith("float8"):
        q = _grid_round(v, np_dtype, 448.0)
    else:
        info = ml_dtypes.iinfo(np_dtype)
        q = np.clip(np.round(v) + z, info.min, info.max) - z
    _check(proto, x, q * s, w)


@pytest.mark.parametrize("g", [0.02, 1.0])
def test_trt_fp4_dynamic_quantize(g):
    x = np.random.default_rng(32).standard_normal((M, K)).astype(np.float32) * 3
    inits = [numpy_helper.from_array(np.array(g, np.float32), "g"),
             numpy_helper.from_array(np.array(g, np.float32), "g2")]
    nodes = [
        helper.make_node("TRT_FP4DynamicQuantize", ["x", "g"], ["xq", "sq"], name="fp4q", domain="trt",
                         axis=-1, block_size=16, scale_type=TensorProto.FLOAT8E4M3FN),
        helper.make_node("DequantizeLinear", ["sq", "g2"], ["s"], name="dq_scale"),
        helper.make_node("DequantizeLinear", ["xq", "s"], ["xdq"], name="dq_x", axis=-1, block_size=16),
    ]
    w = _matmul_tail(nodes, inits, "xdq")
    model = make_model(nodes, inits, [helper.make_tensor_value_info("x", F, [M, K])],
                       [helper.make_tensor_value_info("y", F, [M, N])], 23, extra_opsets=[("trt", 1)])
    proto, report = _optimize(model)
    assert count_ops(proto, "QuantizeDequantize", "onnxfuse") == 1
    assert not any(n.domain == "trt" for n in proto.graph.node)
    assert "trt" not in {o.domain for o in proto.opset_import}
    _check(proto, x, ref_nvfp4(x, g), w)


def test_trt_mxfp8_dynamic_quantize():
    x = np.random.default_rng(33).standard_normal((M, K)).astype(np.float32) * 10
    nodes = [
        helper.make_node("TRT_MXFP8DynamicQuantize", ["x"], ["xq", "sq"], name="mx8q", domain="trt",
                         axis=-1, block_size=32, output_dtype=TensorProto.FLOAT8E4M3FN),
        helper.make_node("TRT_MXFP8DequantizeLinear", ["xq", "sq"], ["xdq"], name="mx8dq", domain="trt",
                         axis=-1, block_size=32),
    ]
    inits = []
    w = _matmul_tail(nodes, inits, "xdq")
    model = make_model(nodes, inits, [helper.make_tensor_value_info("x", F, [M, K])],
                       [helper.make_tensor_value_info("y", F, [M, N])], 23, extra_opsets=[("trt", 1)])
    proto, _ = _optimize(model)
    assert count_ops(proto, "QuantizeDequantize", "onnxfuse") == 1
    _check(proto, x, ref_mx(x, ml_dtypes.float8_e4m3fn, 8, 448.0), w)


@pytest.mark.parametrize("element_dtype,np_dtype,emax,vmax", [
    ("fp4_e2m1", ml_dtypes.float4_e2m1fn, 2, 6.0), ("fp8_e4m3", ml_dtypes.float8_e4m3fn, 8, 448.0),
    ("fp6_e3m2", ml_dtypes.float6_e3m2fn, 4, 28.0), ("fp6_e2m3", ml_dtypes.float6_e2m3fn, 2, 7.5),
])
def test_quark_mx_quantize_dequantize(element_dtype, np_dtype, emax, vmax):
    x = np.random.default_rng(34).standard_normal((M, K)).astype(np.float32)
    nodes = [helper.make_node("MXQuantizeDequantize", ["x"], ["xdq"], name="quark", domain="com.amd.quark",
                              element_dtype=element_dtype, axis=-1, block_size=32, rounding_mode=2)]
    inits = []
    w = _matmul_tail(nodes, inits, "xdq")
    model = make_model(nodes, inits, [helper.make_tensor_value_info("x", F, [M, K])],
                       [helper.make_tensor_value_info("y", F, [M, N])], 21, extra_opsets=[("com.amd.quark", 1)])
    proto, _ = _optimize(model)
    assert count_ops(proto, "QuantizeDequantize", "onnxfuse") == 1
    _check(proto, x, ref_mx(x, np_dtype, emax, vmax), w)


@pytest.mark.parametrize("rounding_mode, expected", [(None, "away"), (0, "away"), (1, "up"), (2, "even")])
def test_quark_integer_rounding_modes_map_to_the_fused_op(rounding_mode, expected):
    extra = {} if rounding_mode is None else {"rounding_mode": rounding_mode}
    nodes = [helper.make_node("MXQuantizeDequantize", ["x"], ["y"], name="quark", domain="com.amd.quark",
                              element_dtype="fp4_e2m1", axis=1, block_size=32, **extra)]
    model = make_model(nodes, [], [helper.make_tensor_value_info("x", F, [M, K])],
                       [helper.make_tensor_value_info("y", F, [M, K])], 21, extra_opsets=[("com.amd.quark", 1)])
    proto, _ = _optimize(model)
    (node,) = [n for n in proto.graph.node if n.op_type == "QuantizeDequantize"]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["rounding_mode"] == expected.encode()


def test_quark_string_rounding_mode_is_left_and_reported():
    nodes = [helper.make_node("MXQuantizeDequantize", ["x"], ["y"], name="quark", domain="com.amd.quark",
                              element_dtype="fp4_e2m1", axis=1, block_size=32, rounding_mode="even")]
    model = make_model(nodes, [], [helper.make_tensor_value_info("x", F, [M, K])],
                       [helper.make_tensor_value_info("y", F, [M, K])], 21, extra_opsets=[("com.amd.quark", 1)])
    _, report = onnxfuse.optimize(model)
    assert report.fused == []
    assert any(d.code.id == "OFX305" and d.node == "quark" for d in report.diagnostics)


def test_quark_unknown_element_is_left_and_reported():
    nodes = [helper.make_node("MXQuantizeDequantize", ["x"], ["y"], name="quark", domain="com.amd.quark",
                              element_dtype="fp3_e1m1", axis=-1, block_size=32)]
    model = make_model(nodes, [], [helper.make_tensor_value_info("x", F, [M, K])],
                       [helper.make_tensor_value_info("y", F, [M, K])], 21, extra_opsets=[("com.amd.quark", 1)])
    fused, report = onnxfuse.optimize(model)
    assert report.fused == []
    assert any(d.code.id == "OFX305" and d.node == "quark" for d in report.diagnostics)
    assert "quark" in report.skipped
