"""The planner: segments, scheduling, fallbacks and sub-models (no torch needed)."""

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from onnxfuse.runtime.plan import make_plan, submodel
from onnxfuse.runtime.value_types import value_types
from runtime_models import qdq_matmul_pair


def _kernel_for_all(node):
    return None


def test_fused_model_plans_into_ort_kernel_ort():
    _, fused = qdq_matmul_pair("int4")
    plan = make_plan(fused, _kernel_for_all)
    assert [s.kind for s in plan.segments] == ["ort", "kernel", "ort"]
    relu, dqmm, tanh = plan.segments
    assert relu.inputs == ("x",) and relu.outputs == ("xr",)
    assert dqmm.inputs == ("xr",) and set(dqmm.initializers) == {"W_rows", "W_rscale", "b"}
    assert tanh.outputs == ("y",)
    # xr is last read by the kernel segment, so the executor can drop it there
    assert plan.last_use["xr"] == 1


def test_fused_node_without_kernel_joins_the_ort_segment_with_a_reason():
    _, fused = qdq_matmul_pair("int4")
    plan = make_plan(fused, lambda n: "no kernel in this test")
    assert [s.kind for s in plan.segments] == ["ort"]
    assert plan.fallbacks[0].node == "dqmm" and plan.fallbacks[0].reason == "no kernel in this test"


def _branchy_model():
    # x -> A(std) -> F1(fused) -> C(std);  x -> B(std, independent of F1) ; out = C + B
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="A"),
        helper.make_node("DequantMatMul", ["a", "w", "s"], ["f"], name="F1", domain="onnxfuse"),
        helper.make_node("Neg", ["f"], ["c"], name="C"),
        helper.make_node("Abs", ["x"], ["b"], name="B"),
        helper.make_node("Add", ["c", "b"], ["y"], name="D"),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("onnxfuse", 1)])


def test_scheduler_gathers_independent_standard_ops_into_one_segment():
    plan = make_plan(_branchy_model(), _kernel_for_all)
    # B does not depend on F1: it runs with A, not in a segment of its own
    assert [[n.name for n in s.nodes] for s in plan.segments] == [["A", "B"], ["F1"], ["C", "D"]]
    first = plan.segments[0]
    assert set(first.outputs) == {"a", "b"}  # b crosses over the kernel to D


def test_submodel_runs_in_onnxruntime_with_inferred_boundary_types():
    _, fused = qdq_matmul_pair("int4", dtype=TensorProto.FLOAT16)
    plan = make_plan(fused, _kernel_for_all)
    types = value_types(fused)
    assert types["y0"].tensor_type.elem_type == TensorProto.FLOAT16  # the fused op's output, by its contract
    tail = submodel(fused, plan.segments[2], types)
    onnx.checker.check_model(tail)
    sess = ort.InferenceSession(tail.SerializeToString(), providers=["CPUExecutionProvider"])
    v = np.linspace(-2, 2, 3 * 24, dtype=np.float16).reshape(3, 24)
    np.testing.assert_array_equal(sess.run(None, {"y0": v})[0], np.tanh(v))


def test_submodel_takes_the_lowest_opset_that_keeps_every_schema():
    """A segment of plain ops in an opset-28 model (FLOAT6 weights carry opset 28) is stamped with
    the lowest opset giving its nodes the same schemas, so an onnxruntime that refuses opset 28
    (1.31) runs it; a node whose schema changed keeps the segment at its version."""
    _, fused = qdq_matmul_pair("int4", dtype=TensorProto.FLOAT16)
    for imp in fused.opset_import:
        if imp.domain == "":
            imp.version = 28
    plan = make_plan(fused, _kernel_for_all)
    tail = submodel(fused, plan.segments[2], value_types(fused))  # one Tanh (schema of opset 13)
    assert {i.domain: i.version for i in tail.opset_import}[""] == 13
    onnx.checker.check_model(tail)
    seg = plan.segments[2]
    cast = helper.make_node("Cast", ["y0"], ["c"], to=TensorProto.FLOAT)  # Cast changed in opset 25
    mixed = submodel(fused, dataclasses.replace(seg, nodes=(*seg.nodes, cast)), value_types(fused))
    assert {i.domain: i.version for i in mixed.opset_import}[""] == onnx.defs.get_schema("Cast", 28).since_version
