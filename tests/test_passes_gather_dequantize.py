"""DQ -> Gather (quantized embeddings), tied embeddings stored once, standalone Dequantize."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

import onnxfuse
from qdq_builders import count_ops, make_model, make_weight, matmul_tolerance, opset_for, run_ort, weight_dq_nodes

F = TensorProto.FLOAT


def _optimize(model):
    fused, report = onnxfuse.optimize(model)
    proto = ir.serde.serialize_model(fused)
    onnx.checker.check_model(proto, full_check=True)
    return proto, report


@pytest.mark.parametrize("element,scale,zp,two_level", [
    ("int4", "float16", False, False), ("uint4", "bfloat16", True, False), ("int8", "float32", False, False),
    ("float4e2m1", "float8e8m0", False, False), ("float8e4m3fn", "float8e8m0", False, False),
    ("float4e2m1", None, False, True),
])
def test_dq_gather(element, scale, zp, two_level):
    V, D = 20, 40  # D = 40: ragged last block
    block = 16 if two_level else 32
    w = make_weight(element, (V, D), axis=1, block_size=block, scale_format=scale or "float16", zero_point=zp,
                    two_level=two_level, seed=20)
    nodes, inits = weight_dq_nodes(w, "emb", "table", output_dtype=F)
    nodes.append(helper.make_node("Gather", ["table", "ids"], ["y"], name="gather", axis=0))
    model = make_model(nodes, inits, [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
                       [helper.make_tensor_value_info("y", F, [2, 3, D])], max(opset_for(w), 23))
    ids = np.array([[0, 5, 19], [-1, 3, 3]], np.int64)
    proto, report = _optimize(model)
    assert count_ops(proto, "DequantGather", "onnxfuse") == 1 and count_ops(proto, "Gather") == 0
    (y,) = run_ort(proto, {"ids": ids})
    table = w.dequantized()
    # Decoding is exact in float32 for these formats (few-bit codes times a scale: products are exact
    # except for the two-level scale product, one float32 rounding: 2^-23 relative).
    np.testing.assert_allclose(y, table[ids], rtol=2.0**-22, atol=0)


def test_tied_embedding_stored_once():
    V, D, M = 24, 32, 3
    w = make_weight("int4", (V, D), axis=1, block_size=32, scale_format="float32", seed=21)
    nodes, inits = weight_dq_nodes(w, "emb", "table")
    nodes += [
        helper.make_node("Gather", ["table", "ids"], ["h"], name="embed", axis=0),
        helper.make_node("Transpose", ["table"], ["table_t"], perm=[1, 0], name="lm_head_t"),
        helper.make_node("MatMul", ["h", "table_t"], ["logits"], name="lm_head"),
    ]
    model = make_model(nodes, inits, [helper.make_tensor_value_info("ids", TensorProto.INT64, [M])],
                       [helper.make_tensor_value_info("logits", F, [M, V])], 21)
    proto, report = _optimize(model)
    gather = next(n for n in proto.graph.node if n.op_type == "DequantGather")
    matmul = next(n for n in proto.graph.node if n.op_type == "DequantMatMul")
    assert gather.input[0] == matmul.input[1], "the table and the LM head weight must be one initializer"
    assert sum(1 for t in proto.graph.initializer if list(t.dims) == [V, D // 2]) == 1
    ids = np.array([1, 7, 23], np.int64)
    (logits,) = run_ort(proto, {"ids": ids})
    table = w.dequantized()
    h = table[ids]
    ref = h @ table.T
    assert (np.abs(logits - ref) <= matmul_tolerance(h, table.T, np.float32)).all()


@pytest.mark.parametrize("element,scale,out", [
    ("int4", "bfloat16", TensorProto.BFLOAT16), ("float4e2m1", "float8e8m0", F),
    ("float6e3m2", "float8e8m0", TensorProto.FLOAT16), ("uint2", "float16", TensorProto.FLOAT16),
])
def test_standalone_dequantize_runs_formats_ort_cannot(element, scale, out):
    # DQ(3-D, blocked along axis 1) -> Relu: no fused consumer, so a Dequantize produces the value.
    w = make_weight(element, (3, 40, 5), axis=1, block_size=32, scale_format=scale, seed=22)
    nodes, inits = weight_dq_nodes(w, "w", "w_dq", output_dtype=out if scale == "float8e8m0" else None)
    nodes.append(helper.make_node("Relu", ["w_dq"], ["r"], name="relu"))
    # ORT CPU has no bfloat16 Relu: for bf16 the DQ feeds a Cast to float32, then the Relu.
    if out == TensorProto.BFLOAT16:
        nodes[-1] = helper.make_node("Cast", ["w_dq"], ["r"], to=F, name="cast")
        nodes.append(helper.make_node("Relu", ["r"], ["y"], name="relu"))
    else:
        nodes.append(helper.make_node("Identity", ["r"], ["y"], name="identity"))
    y_type = F if out == TensorProto.BFLOAT16 else out
    model = make_model(nodes, inits, [], [helper.make_tensor_value_info("y", y_type, [3, 40, 5])], opset_for(w))
    proto, report = _optimize(model)
    assert count_ops(proto, "Dequantize", "onnxfuse") == 1 and count_ops(proto, "DequantizeLinear") == 0
    (y,) = run_ort(proto, {})
    ref = np.maximum(w.dequantized(), 0)
    np_out = {F: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.BFLOAT16: ml_dtypes.bfloat16}[out]
    # The DQ's result is rounded once to its output type (exact for float32 here).
    np.testing.assert_array_equal(y.astype(np.float32), ref.astype(np_out).astype(np.float32))
