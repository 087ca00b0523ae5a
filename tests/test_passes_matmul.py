"""DQ -> [Transpose] -> [Cast] -> MatMul / Gemm across formats: fused counts and ORT vs NumPy reference."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfuse
from qdq_builders import (
    count_ops, make_model, make_weight, matmul_model, matmul_tolerance, run_ort, weight_dq_nodes,
)

# (element, scale format, zero point, two-level)
FORMATS = [
    ("int4", "float16", False, False),
    ("int4", "float32", False, False),
    ("int4", "bfloat16", False, False),
    ("uint4", "float16", True, False),
    ("int8", "float32", False, False),
    ("uint8", "float16", True, False),
    ("int2", "float16", False, False),
    ("uint2", "float32", True, False),
    ("float8e4m3fn", "float32", False, False),
    ("float8e5m2", "float16", False, False),
    ("float4e2m1", "float8e8m0", False, False),  # MXFP4
    ("float8e4m3fn", "float8e8m0", False, False),  # MXFP8
    ("float6e2m3", "float8e8m0", False, False),  # MXFP6
    ("float6e3m2", "float8e8m0", False, False),
    ("float4e2m1", None, False, True),  # NVFP4: two-level e4m3 * fp32
]
IDS = [f"{e}-{s or 'nvfp4'}{'-zp' if z else ''}" for e, s, z, _ in FORMATS]


def _optimize_and_run(model: onnx.ModelProto, feeds: dict):
    fused, report = onnxfuse.optimize(model)
    proto = ir.serde.serialize_model(fused)
    onnx.checker.check_model(proto, full_check=True)
    return proto, report, run_ort(proto, feeds)


def _assert_close(y, ref, a, W, out_dtype):
    bound = matmul_tolerance(a.reshape(-1, a.shape[-1]), W, out_dtype).reshape(ref.shape)
    err = np.abs(y.astype(np.float64) - ref)
    assert (err <= bound).all(), f"max error {err.max():.3g}, bound there {bound.flat[err.argmax()]:.3g}"


def _weight(element, scale, zp, two_level, shape, axis, block_size, seed=0):
    return make_weight(element, shape, axis=axis, block_size=block_size, scale_format=scale or "float16",
                       zero_point=zp, two_level=two_level, seed=seed)


@pytest.mark.parametrize("element,scale,zp,two_level", FORMATS, ids=IDS)
def test_dq_matmul_axis0_every_format(element, scale, zp, two_level):
    # K = 40 with blocks of 16 or 32: the last block is ragged.
    block = 16 if two_level else 32
    w = _weight(element, scale, zp, two_level, (40, 12), 0, block)
    model, W = matmul_model(w)
    a = np.random.default_rng(1).standard_normal((3, 40)).astype(np.float32)
    proto, report, (y,) = _optimize_and_run(model, {"a": a})
    assert count_ops(proto, "DequantMatMul", "onnxfuse") == 1
    assert count_ops(proto, "DequantizeLinear") == 0 and count_ops(proto, "MatMul") == 0
    assert sum(report.counts["DequantMatMul"].values()) == 1
    _assert_close(y, a.astype(np.float64) @ W, a, W, np.float32)


@pytest.mark.parametrize("element,scale,zp,two_level", FORMATS, ids=IDS)
def test_dq_transpose_cast_matmul_fp16_rank3(element, scale, zp, two_level):
    # ModelOpt's shape: DQ(W[N, K], axis -1) -> Transpose -> Cast(fp16) -> MatMul, activations [B, M, K].
    block = 16 if two_level else 32
    w = _weight(element, scale, zp, two_level, (10, 48), 1, block, seed=2)
    model, W = matmul_model(w, act="float16", transpose=True, cast=True, lead=(2, 3))
    a = np.random.default_rng(3).standard_normal((2, 3, 48)).astype(np.float16)
    proto, report, (y,) = _optimize_and_run(model, {"a": a})
    assert count_ops(proto, "DequantMatMul", "onnxfuse") == 1
    assert count_ops(proto, "Transpose") == 0 and count_ops(proto, "Cast") == 0
    assert y.dtype == np.float16
    _assert_close(y, a.astype(np.float64) @ W, a, W, np.float16)


def test_reshape_3d_to_2d_look_through():
    # DQ on [N, K/bs, bs] blocked along the last axis, Reshape to [N, K], Transpose, MatMul.
    w = make_weight("int4", (8, 3, 16), axis=2, block_size=16, scale_format="float32", seed=4)
    nodes, inits = weight_dq_nodes(w, "w", "w_dq")
    inits.append(numpy_helper.from_array(np.array([8, 48], np.int64), "shape"))
    nodes += [helper.make_node("Reshape", ["w_dq", "shape"], ["w_2d"], name="reshape"),
              helper.make_node("Transpose", ["w_2d"], ["w_t"], perm=[1, 0], name="transpose"),
              helper.make_node("MatMul", ["a", "w_t"], ["y"], name="matmul")]
    model = make_model(nodes, inits, [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 48])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], 21)
    W = w.dequantized().reshape(8, 48).T
    a = np.random.default_rng(5).standard_normal((2, 48)).astype(np.float32)
    proto, _, (y,) = _optimize_and_run(model, {"a": a})
    assert count_ops(proto, "DequantMatMul", "onnxfuse") == 1 and count_ops(proto, "Reshape") == 0
    _assert_close(y, a.astype(np.float64) @ W, a, W, np.float32)


def test_reshape_that_splits_blocks_is_refused_and_explained():
    # Reshape [4, 32] (blocked along axis 1, K=32) -> [32, 4]: blocks do not stay along one axis.
    w = make_weight("int4", (4, 32), axis=1, block_size=32, scale_format="float32", seed=6)
    nodes, inits = weight_dq_nodes(w, "w", "w_dq")
    inits.append(numpy_helper.from_array(np.array([32, 4], np.int64), "shape"))
    nodes += [helper.make_node("Reshape", ["w_dq", "shape"], ["w_2d"], name="reshape"),
              helper.make_node("MatMul", ["a", "w_2d"], ["y"], name="matmul")]
    model = make_model(nodes, inits, [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 32])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], 21)
    a = np.random.default_rng(7).standard_normal((2, 32)).astype(np.float32)
    proto, report, (y,) = _optimize_and_run(model, {"a": a})
    # Not a DequantMatMul; the DQ becomes a standalone Dequantize and the math is unchanged.
    assert count_ops(proto, "DequantMatMul", "onnxfuse") == 0
    assert count_ops(proto, "Dequantize", "onnxfuse") == 1
    note = [f.note for f in report.fused if f.pattern == "Dequantize"][0]
    assert "Reshape 'reshape'" in note
    W = w.dequantized().reshape(32, 4)
    _assert_close(y, a.astype(np.float64) @ W, a, W, np.float32)


@pytest.mark.parametrize("trans_a,trans_b,alpha,beta,bias", [
    (0, 0, 1.0, 1.0, "none"), (0, 1, 0.5, 1.0, "vector"), (1, 0, 2.0, 0.25, "vector"),
    (1, 1, 1.0, 0.5, "matrix"), (0, 0, 1.5, 1.0, "runtime"),
])
def test_dq_gemm(trans_a, trans_b, alpha, beta, bias):
    K, N, M = 40, 6, 3
    shape, axis = ((N, K), 1) if trans_b else ((K, N), 0)
    w = make_weight("uint4", shape, axis=axis, block_size=16, scale_format="float32", zero_point=True, seed=8)
    rng = np.random.default_rng(9)
    nodes, inits = weight_dq_nodes(w, "w", "w_dq")
    a = rng.standard_normal((K, M) if trans_a else (M, K)).astype(np.float32)
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a.shape))]
    feeds = {"a": a}
    gemm_inputs = ["a", "w_dq"]
    c = None
    if bias in ("vector", "matrix"):
        c = rng.standard_normal((N,) if bias == "vector" else (M, N)).astype(np.float32)
        inits.append(numpy_helper.from_array(c, "c"))
        gemm_inputs.append("c")
    elif bias == "runtime":
        c = rng.standard_normal((M, N)).astype(np.float32)
        inputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [M, N]))
        feeds["c"] = c
        gemm_inputs.append("c")
    nodes.append(helper.make_node("Gemm", gemm_inputs, ["y"], name="gemm", alpha=alpha, beta=beta,
                                  transA=trans_a, transB=trans_b))
    model = make_model(nodes, inits, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, N])], 21)
    proto, report, (y,) = _optimize_and_run(model, feeds)
    assert count_ops(proto, "DequantMatMul", "onnxfuse") == 1 and count_ops(proto, "Gemm") == 0
    W = w.dequantized().T if trans_b else w.dequantized()
    A = a.T if trans_a else a
    ref = alpha * (A.astype(np.float64) @ W) + (beta * c.astype(np.float64) if c is not None else 0)
    bound = matmul_tolerance(A, W, np.float32) * max(alpha, 1) + (np.abs(ref) * 2.0**-22 if c is not None else 0)
    assert (np.abs(y - ref) <= bound).all()


def test_dq_output_also_graph_output_is_preserved():
    w = make_weight("float4e2m1", (32, 8), axis=0, block_size=32, scale_format="float8e8m0", seed=10)
    model, W = matmul_model(w)
    model.graph.output.append(helper.make_tensor_value_info("w_dq", TensorProto.FLOAT, [32, 8]))
    a = np.random.default_rng(11).standard_normal((2, 32)).astype(np.float32)
    proto, _, (y, w_out) = _optimize_and_run(model, {"a": a})
    assert [o.name for o in proto.graph.output] == ["y", "w_dq"]
    assert count_ops(proto, "DequantMatMul", "onnxfuse") == 1
    assert count_ops(proto, "Dequantize", "onnxfuse") == 1  # produces the graph output
    np.testing.assert_array_equal(w_out, W.astype(np.float32))  # fp4 * 2^k is exact in float32
    _assert_close(y, a.astype(np.float64) @ W, a, W, np.float32)


def test_shared_weight_two_matmuls_stored_once():
    w = make_weight("int4", (32, 8), axis=0, block_size=32, scale_format="float16", seed=12)
    nodes, inits = weight_dq_nodes(w, "w", "w_dq", output_dtype=TensorProto.FLOAT)
    nodes += [helper.make_node("MatMul", ["a", "w_dq"], ["y1"], name="mm1"),
              helper.make_node("MatMul", ["b", "w_dq"], ["y2"], name="mm2")]
    f = TensorProto.FLOAT
    model = make_model(nodes, inits,
                       [helper.make_tensor_value_info("a", f, [2, 32]), helper.make_tensor_value_info("b", f, [3, 32])],
                       [helper.make_tensor_value_info("y1", f, [2, 8]), helper.make_tensor_value_info("y2", f, [3, 8])], 23)
    rng = np.random.default_rng(13)
    a, b = rng.standard_normal((2, 32)).astype(np.float32), rng.standard_normal((3, 32)).astype(np.float32)
    proto, report, (y1, y2) = _optimize_and_run(model, {"a": a, "b": b})
    fused = [n for n in proto.graph.node if n.op_type == "DequantMatMul"]
    assert len(fused) == 2 and fused[0].input[1] == fused[1].input[1]
    assert sum(1 for t in proto.graph.initializer if t.data_type == TensorProto.UINT8 and t.dims[0] == 8) == 1
    assert any(d.code.name == "weight-shared" for d in report.diagnostics)
    W = w.dequantized()
    _assert_close(y1, a.astype(np.float64) @ W, a, W, np.float32)
    _assert_close(y2, b.astype(np.float64) @ W, b, W, np.float32)


def test_blocked_along_n_becomes_dequantize():
    # W[K, N] blocked along N (axis 1): not the reduction axis, so a standalone Dequantize feeds the MatMul.
    w = make_weight("int8", (16, 64), axis=1, block_size=32, scale_format="bfloat16", seed=14)
    model, W = matmul_model(w)
    a = np.random.default_rng(15).standard_normal((2, 16)).astype(np.float32)
    proto, report, (y,) = _optimize_and_run(model, {"a": a})
    assert count_ops(proto, "Dequantize", "onnxfuse") == 1 and count_ops(proto, "MatMul") == 1
    # The DQ's output type is its scale's (bfloat16): the dequantized weight is rounded to bf16 first.
    W = W.astype(ml_dtypes.bfloat16).astype(np.float64)
    _assert_close(y, a.astype(np.float64) @ W, a, W, np.float32)


def test_optimizing_twice_equals_once():
    w = make_weight("float4e2m1", (32, 16), axis=1, block_size=16, two_level=True, seed=16)
    model, _ = matmul_model(w, act="float16", transpose=True, cast=True)
    once, _ = onnxfuse.optimize(model)
    twice, report = onnxfuse.optimize(once)
    p1, p2 = ir.serde.serialize_model(once), ir.serde.serialize_model(twice)
    assert p1.SerializeToString() == p2.SerializeToString()
    assert report.fused == []


def test_nothing_to_fuse_keeps_initializers_byte_identical():
    f = TensorProto.FLOAT
    weight = numpy_helper.from_array(np.random.default_rng(17).standard_normal((4, 4)).astype(np.float32), "w")
    model = make_model([helper.make_node("MatMul", ["a", "w"], ["y"], name="mm")], [weight],
                       [helper.make_tensor_value_info("a", f, [1, 4])], [helper.make_tensor_value_info("y", f, [1, 4])], 21)
    out, report = onnxfuse.optimize(model)
    proto = ir.serde.serialize_model(out)
    assert [t.SerializeToString() for t in proto.graph.initializer] == [weight.SerializeToString()]
    assert report.fused == [] and report.ops_before == report.ops_after


def test_ort_default_optimizations_run_the_fused_model_unchanged():
    # With every ORT graph optimization on (its own DQ -> MatMulNBits fusion included) the fused
    # model's function bodies must still give the reference answer: nothing is left for ORT to refuse.
    import onnxruntime as ort

    w = make_weight("int4", (64, 16), axis=0, block_size=32, scale_format="float32", seed=18)
    model, W = matmul_model(w)
    fused, _ = onnxfuse.optimize(model)
    blob = ir.serde.serialize_model(fused).SerializeToString()
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    a = np.random.default_rng(19).standard_normal((2, 64)).astype(np.float32)
    (y,) = ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"]).run(None, {"a": a})
    _assert_close(y, a.astype(np.float64) @ W, a, W, np.float32)
