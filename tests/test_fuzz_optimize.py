"""Fuzzing optimize (issue 7): random small graphs of Q/DQ weight patterns over every element and
scale format, shapes, axes, block sizes, look-through ops (Transpose, Cast, Reshape), Gemm, shared
weights, DQ outputs that are graph outputs, 2-D and 3-D activations, and some bad scales.

For each graph: optimize raises nothing but OnnxfuseError; the result passes
onnx.checker(full_check=True); stock onnxruntime (through the fused ops' function bodies)
matches the onnxfuse.formats reference of the *original* model; optimizing again changes nothing;
a pattern with a NaN scale is left exactly as it was.

CI runs a short derandomized campaign. A long one:
    ONNXFUSE_FUZZ=long ONNXFUSE_FUZZ_EXAMPLES=3000 pytest tests/test_fuzz_optimize.py -q
"""

from __future__ import annotations

import dataclasses
import os

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
from hypothesis import HealthCheck, event, given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

import onnxfuse
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.formats import dequantize_linear, quantize_linear
from tests.qdq_builders import ELEMENTS, make_weight, opset_for, run_ort

LONG = os.environ.get("ONNXFUSE_FUZZ") == "long"
EXAMPLES = int(os.environ.get("ONNXFUSE_FUZZ_EXAMPLES", 3000 if LONG else 100))
FUZZ_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG, database=None,
                         suppress_health_check=list(HealthCheck), print_blob=True)

SCALE_FORMATS = ["float32", "float16", "bfloat16", "float8e8m0", "nvfp4"]
LAYOUTS = ["kn", "nk_transpose", "reshape3d", "gemm_transB", "gemm", "gather"]
ACT = {"float32": (np.float32, TensorProto.FLOAT), "float16": (np.float16, TensorProto.FLOAT16)}
# Relative rounding of one value stored in a type (half an ulp).
HALF_ULP = {TensorProto.FLOAT: 2.0**-24, TensorProto.FLOAT16: 2.0**-11, TensorProto.BFLOAT16: 2.0**-8}
# Absolute rounding below the normal range (half the smallest subnormal): tiny weights and outputs.
HALF_SUBNORMAL = {TensorProto.FLOAT: 2.0**-150, TensorProto.FLOAT16: 2.0**-25, TensorProto.BFLOAT16: 2.0**-134}


@dataclasses.dataclass
class Case:
    model: onnx.ModelProto
    feeds: dict
    expected: dict  # output name -> float64 reference
    tolerance: dict  # output name -> per-element bound
    bad: str | None
    weight_path_type: int
    layout: str = ""

    def __repr__(self) -> str:  # hypothesis prints the falsifying example: show the graph itself
        return f"Case(bad={self.bad})\n" + onnx.printer.to_text(self.model.graph)[:4000]


def _reference_weight(w) -> np.ndarray:
    """float64 [*shape] of the original DQ through onnxfuse.formats' reference."""
    if w.global_scale is not None:
        inner = dequantize_linear(w.scale, np.float32(w.global_scale))  # the outer DQ of the chain
        return dequantize_linear(w.codes, inner, axis=w.axis, block_size=w.block_size).astype(np.float64)
    out = TensorProto.FLOAT if w.scale_format == "float8e8m0" else None
    return dequantize_linear(w.codes, w.scale, w.zero_point, axis=w.axis, block_size=w.block_size,
                             output_dtype=out).astype(np.float64)


@st.composite
def cases(draw) -> Case:
    element = draw(st.sampled_from(sorted(ELEMENTS)))
    scale_fmt = draw(st.sampled_from(SCALE_FORMATS if element == "float4e2m1" else SCALE_FORMATS[:4]))
    layout = draw(st.sampled_from(LAYOUTS))
    act = draw(st.sampled_from(sorted(ACT)))
    K = draw(st.integers(1, 70))
    N = draw(st.integers(1, 9))
    block = 16 if scale_fmt == "nvfp4" else draw(st.sampled_from([1, 2, 4, 8, 16, 32, 64]))
    negative_axis = draw(st.booleans())
    zero_point = not ELEMENTS[element][2] and draw(st.booleans())
    extra_cast = draw(st.booleans())
    three_d_act = layout not in ("gemm", "gemm_transB") and draw(st.booleans())
    dq_is_output = draw(st.integers(0, 5)) == 0
    shared = draw(st.integers(0, 4)) == 0
    bad = draw(st.sampled_from([None] * 10 + ["nan", "zero"]))
    alpha = draw(st.sampled_from([1.0, 0.5, 3.0])) if layout.startswith("gemm") else 1.0
    bias = layout.startswith("gemm") and draw(st.booleans())
    seed = draw(st.integers(0, 2**20))
    act_q = draw(st.sampled_from([None] * 3 + ["int8", "uint8", "float8e4m3fn"])) if act == "float32" else None
    act_block = draw(st.sampled_from([4, 16, 32]))
    rng = np.random.default_rng(seed)

    # The stored weight and the axis its blocks run along.
    if layout == "kn" or layout == "gemm":
        shape, axis = (K, N), 0
    elif layout in ("nk_transpose", "gemm_transB", "gather"):
        shape, axis = (N, K), 1
    else:  # reshape3d: [K, N1, N2] -> Reshape [K, N1*N2]
        n2 = draw(st.integers(1, 3))
        shape, axis = (K, N, n2), 0
    w = make_weight(element, shape, axis=axis, block_size=block,
                    scale_format="float16" if scale_fmt == "nvfp4" else scale_fmt,
                    zero_point=zero_point, two_level=scale_fmt == "nvfp4", seed=seed)
    if bad:
        if w.scale.dtype == ml_dtypes.float8_e8m0fnu:
            bad = "nan"  # E8M0 has no zero: 0xFF, its NaN, is the bad value it can hold
        flat = w.scale.reshape(-1)  # a view: writes go to w.scale
        flat[rng.integers(0, flat.size)] = np.nan if bad == "nan" else 0.0
    if negative_axis:
        w.axis -= len(shape)
    np_act, act_type = ACT[act]
    scale_type = TensorProto.FLOAT if w.global_scale is not None else {
        "float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16,
        "float8e8m0": TensorProto.FLOAT}[w.scale_format]

    from tests.qdq_builders import weight_dq_nodes

    nodes, inits = weight_dq_nodes(w, "w", "w_dq", output_dtype=TensorProto.FLOAT if w.scale_format == "float8e8m0" else None)
    W = _reference_weight(w)  # of `shape`, float64
    cur, cur_type = "w_dq", scale_type
    path_type = max((HALF_ULP[cur_type], cur_type), (HALF_ULP[act_type], act_type))[1]
    if layout == "reshape3d":
        inits.append(numpy_helper.from_array(np.array([K, -1], np.int64), "w_shape"))
        nodes.append(helper.make_node("Reshape", [cur, "w_shape"], ["w_r"], name="w_reshape"))
        cur, W = "w_r", W.reshape(K, -1)
    if layout == "nk_transpose":
        nodes.append(helper.make_node("Transpose", [cur], ["w_t"], perm=[1, 0], name="w_transpose"))
        cur, W = "w_t", W.T
    if layout == "gather":  # DQ(table [V, D], blocks along D) -> Gather: a quantized embedding
        return _gather_case(draw, rng, nodes, inits, cur, cur_type, W, w, bad, opset_for(w))
    if cur_type != act_type or extra_cast:
        nodes.append(helper.make_node("Cast", [cur], ["w_c"], to=act_type, name="w_cast"))
        cur, cur_type = "w_c", act_type
    if layout == "gemm_transB":
        W = W.T
    n_out = W.shape[1]
    lead = [2, 3] if three_d_act else [draw(st.integers(1, 3))]
    a = rng.standard_normal([*lead, K]).astype(np_act)
    inputs = [helper.make_tensor_value_info("a", act_type, [*lead, K])]
    outputs, expected, tol = [], {}, {}
    a_in, a_ref = "a", a
    if act_q:  # static fake quantization of the activation: Q -> DQ, blocks along K
        q_dtype = {"int8": np.int8, "uint8": np.uint8, "float8e4m3fn": ml_dtypes.float8_e4m3fn}[act_q]
        g = -(-K // act_block)
        a_scale = rng.uniform(0.01, 0.05, size=[*lead, g]).astype(np.float32)
        a_zp = np.full([*lead, g], 3 if act_q == "uint8" else 0).astype(q_dtype)
        inits += [numpy_helper.from_array(a_scale, "a_scale"), numpy_helper.from_array(a_zp, "a_zp")]
        nodes.insert(0, helper.make_node("QuantizeLinear", ["a", "a_scale", "a_zp"], ["a_q"], name="q_a", axis=-1,
                                         block_size=act_block))
        nodes.insert(1, helper.make_node("DequantizeLinear", ["a_q", "a_scale", "a_zp"], ["a_dq"], name="dq_a", axis=-1,
                                         block_size=act_block))
        a_in = "a_dq"
        a_ref = dequantize_linear(quantize_linear(a, a_scale, a_zp, axis=-1, block_size=act_block), a_scale, a_zp,
                                  axis=-1, block_size=act_block)

    def consumer(out_name, suffix):
        if layout.startswith("gemm"):
            ins = [a_in, cur] + ([f"bias{suffix}"] if bias else [])
            attrs = {"alpha": alpha, "transB": 1 if layout == "gemm_transB" else 0}
            nodes.append(helper.make_node("Gemm", ins, [out_name], name=f"gemm{suffix}", **attrs))
        else:
            nodes.append(helper.make_node("MatMul", [a_in, cur], [out_name], name=f"matmul{suffix}"))
        b = rng.standard_normal(n_out).astype(np_act) if bias else None
        if b is not None:
            inits.append(numpy_helper.from_array(b, f"bias{suffix}"))
        y = alpha * (a_ref.astype(np.float64) @ W) + (b.astype(np.float64) if b is not None else 0.0)
        outputs.append(helper.make_tensor_value_info(out_name, act_type, [*lead, n_out]))
        expected[out_name] = y
        # Bound: each weight may be rounded once to the weight path's type (the original rounds
        # DQ's output to its type; a fused kernel decodes in float32), products accumulate in
        # float32 (K * 2^-23 relative, which also covers scale * code), and the output is rounded
        # once to the activation type.
        mag = np.abs(a_ref.astype(np.float64)) @ np.abs(W) * abs(alpha) + (np.abs(b.astype(np.float64)) if b is not None else 0)
        # Below the normal range those roundings are absolute: half a subnormal per weight (times |a|)
        # and per output.
        tol[out_name] = (mag * (2 * HALF_ULP[path_type] + K * 2.0**-23) + np.abs(y) * 2 * HALF_ULP[act_type]
                         + np.abs(a_ref.astype(np.float64)).sum(axis=-1, keepdims=True) * abs(alpha) * 2 * HALF_SUBNORMAL[path_type]
                         + 2 * HALF_SUBNORMAL[act_type] + 1e-30)

    consumer("y", "")
    if shared:
        consumer("y2", "_2")
    if dq_is_output and scale_type != TensorProto.BFLOAT16:  # onnxruntime's Python API cannot return bfloat16
        outputs.append(helper.make_tensor_value_info("w_dq", scale_type, list(shape)))
        expected["w_dq"] = _reference_weight(w)
        tol["w_dq"] = np.abs(expected["w_dq"]) * 2 * HALF_ULP[scale_type] + 2 * HALF_SUBNORMAL[scale_type] + 1e-30
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset_for(w))])
    model.ir_version = 11
    return Case(model, {"a": a}, expected, tol, bad, path_type, layout + ("+act_q" if act_q else ""))


def _gather_case(draw, rng, nodes, inits, table, table_type, W, w, bad, opset) -> Case:
    V, D = W.shape
    lead = draw(st.sampled_from([[3], [2, 2]]))
    idx = rng.integers(-V, V, size=lead).astype(np.int64)  # negative indices count from the end
    inits.append(numpy_helper.from_array(idx, "idx"))
    nodes.append(helper.make_node("Gather", [table, "idx"], ["emb"], name="gather", axis=0))
    out, out_type = "emb", table_type
    if table_type == TensorProto.BFLOAT16:  # onnxruntime's Python API cannot return bfloat16
        nodes.append(helper.make_node("Cast", ["emb"], ["emb_f"], name="emb_cast", to=TensorProto.FLOAT))
        out, out_type = "emb_f", TensorProto.FLOAT
    want = W[idx]
    graph = helper.make_graph(nodes, "fuzz", [], [helper.make_tensor_value_info(out, out_type, [*lead, D])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 11
    # Each value is decoded once and rounded once to the table's DQ output type.
    tol = np.abs(want) * 2 * HALF_ULP[table_type] + 2 * HALF_SUBNORMAL[table_type] + 1e-30
    return Case(model, {}, {out: want}, {out: tol}, bad, table_type, "gather")


def _bytes(model: ir.Model) -> bytes:
    return ir.serde.serialize_model(model).SerializeToString(deterministic=True)


@FUZZ_SETTINGS
@given(cases())
def test_fuzz_optimize(case: Case):
    event(f"layout {case.layout}")
    try:
        fused, report = onnxfuse.optimize(case.model)
    except OnnxfuseError as e:
        event(f"refused: {e.diagnostics[0].code.id}")
        return  # refused with a diagnostic: allowed (nothing else is)
    proto = ir.serde.serialize_model(fused)
    onnx.checker.check_model(proto, full_check=True)

    again, _ = onnxfuse.optimize(fused)
    assert _bytes(again) == _bytes(fused), "optimizing twice differs from optimizing once"

    left = [n for n in proto.graph.node if n.op_type == "DequantizeLinear" and n.name == "w_dq"]
    if case.bad == "nan":
        assert left, "a DQ with a NaN scale must be left as it was"
        assert report.has_errors
        event("NaN scale left as it was")
        return  # the original itself computes NaN there; nothing to compare
    assert not report.has_errors, [d.to_text() for d in report.diagnostics if d.is_error]
    try:
        got = run_ort(proto, case.feeds)
    except Exception:
        if left:  # a pattern left as it was, in a format stock onnxruntime cannot run: not our output
            event("unfused DQ that onnxruntime cannot run")
            return
        raise
    event(f"fused {sum(1 for n in proto.graph.node if n.domain == 'onnxfuse')} node(s)" if not left else "left, compared")
    names = [o.name for o in proto.graph.output]
    for name, y in zip(names, got):
        want, bound = case.expected[name], case.tolerance[name]
        # Values within the bound of the output type's overflow threshold may round to +-inf there
        # (the original's float16 output does), so +-inf of the right sign is right for them.
        limit = float(np.finfo(y.dtype).max) * (1 + 2 * float(np.finfo(y.dtype).eps)) if y.dtype.kind == "f" else np.inf
        may_overflow = np.abs(want) + bound >= limit
        overflowed = np.isinf(y) & (np.sign(y) == np.sign(want)) & may_overflow
        err = np.where(overflowed, 0.0, np.abs(y.astype(np.float64) - want))
        assert (err <= bound).all(), f"{name}: max error {err.max()} above bound {bound.reshape(-1)[np.argmax(err)]}"
