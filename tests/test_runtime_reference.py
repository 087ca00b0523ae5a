"""The reference runner for originals ORT cannot run: exporters' custom ops, hand-checked values."""

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxfuse import formats
from onnxfuse.runtime.reference import ReferenceRunner, mx_fake_quantize, round_to_grid


def _model(nodes, inputs, outputs, opsets):
    g = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def test_mx_fake_quantize_uses_the_ocp_shared_exponent():
    # block amax 5.0 -> floor(log2 5) = 2, fp4 emax 2 -> scale 2^0: values round onto the e2m1 grid
    x = np.array([[5.0, 0.74, -2.6, 0.25]], np.float32)
    np.testing.assert_array_equal(mx_fake_quantize(x, "float4e2m1", axis=1, block_size=4),
                                  [[4.0, 0.5, -3.0, 0.0]])  # 0.74 -> 0.5 (nearer), 0.25 tie -> 0 (even)
    # amax 12 -> exponent 3 - 2 = 1, scale 2: 12/2 = 6 -> 12; 1/2 = 0.5 -> 1
    np.testing.assert_array_equal(mx_fake_quantize(np.array([[12.0, 1.0]], np.float32), "float4e2m1", 1, 2),
                                  [[12.0, 1.0]])


def test_round_to_grid_tie_rules():
    fp4 = formats.element_format("float4e2m1")
    ties = np.array([0.25, 2.5, -2.5], np.float32)  # halfway between grid points
    np.testing.assert_array_equal(round_to_grid(ties, fp4, "even"), [0.0, 2.0, -2.0])
    np.testing.assert_array_equal(round_to_grid(ties, fp4, "away"), [0.5, 3.0, -3.0])
    np.testing.assert_array_equal(round_to_grid(ties, fp4, "up"), [0.5, 3.0, -2.0])


def test_quark_mx_node_runs_in_the_reference_runner():
    node = helper.make_node("MXQuantizeDequantize", ["x"], ["y"], domain="com.amd.quark",
                            element_dtype="fp8_e4m3", axis=1, block_size=32, rounding_mode=2)
    m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])], [("", 21), ("com.amd.quark", 1)])
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    (y,) = ReferenceRunner(m).run(None, {"x": x})
    np.testing.assert_array_equal(y, mx_fake_quantize(x, "float8e4m3fn", 1, 32))
    # e4m3 has 3 mantissa bits: relative error at most 2^-4 of the block's scale grid
    assert np.max(np.abs(y - x) / np.maximum(np.abs(x), 2.0**-6)) < 2.0**-3


def test_modelopt_nvfp4_activation_chain_matches_a_hand_computation():
    nodes = [
        helper.make_node("TRT_FP4DynamicQuantize", ["x", "gs"], ["xq", "sq"], domain="trt", axis=-1, block_size=16,
                         scale_type=TensorProto.FLOAT8E4M3FN),
        helper.make_node("DequantizeLinear", ["sq", "gs"], ["s"]),
        helper.make_node("DequantizeLinear", ["xq", "s"], ["y"], axis=-1, block_size=16),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
                          [onnx.numpy_helper.from_array(np.float32(0.5), "gs")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid("trt", 1)])
    x = np.linspace(-6, 6, 32, dtype=np.float32).reshape(1, 32)
    (y,) = ReferenceRunner(m).run(None, {"x": x})
    # by hand: block amax 6 (first) and 6 (second) -> block scale e4m3(6 / 6 / 0.5) = 2, times 0.5 = 1:
    # the values round straight onto the e2m1 grid
    fp4 = formats.element_format("float4e2m1")
    np.testing.assert_array_equal(y, fp4.decode(fp4.encode(x)).reshape(1, 32))
