"""Hypothesis-generated DQ graphs: the passes never crash, the checker accepts the result, numerics hold."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto, helper

import onnxfuse
from qdq_builders import make_weight, matmul_model, matmul_tolerance, run_ort

FORMATS = [("int4", "float16"), ("uint4", "bfloat16"), ("int8", "float32"), ("int2", "float32"),
           ("float8e4m3fn", "float8e8m0"), ("float4e2m1", "float8e8m0"), ("float6e2m3", "float8e8m0"),
           ("float4e2m1", "nvfp4")]


@st.composite
def graphs(draw):
    element, scale = draw(st.sampled_from(FORMATS))
    K = draw(st.integers(1, 70))
    N = draw(st.integers(1, 9))
    block = draw(st.sampled_from([16, 32])) if scale != "nvfp4" else 16
    transpose = draw(st.booleans())
    extra_output = draw(st.booleans())  # the DQ output is also a graph output
    seed = draw(st.integers(0, 2**16))
    shape, axis = ((N, K), 1) if transpose else ((K, N), 0)
    w = make_weight(element, shape, axis=axis, block_size=block, scale_format=scale if scale != "nvfp4" else "float16",
                    zero_point=element.startswith("u"), two_level=scale == "nvfp4", seed=seed)
    model, W = matmul_model(w, transpose=transpose)
    if extra_output:
        dq_type = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}.get(scale, TensorProto.FLOAT)
        model.graph.output.append(helper.make_tensor_value_info("w_dq", dq_type, list(shape)))
    return model, W, K, seed


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_random_graphs_fuse_and_keep_numerics(case):
    model, W, K, seed = case
    fused, report = onnxfuse.optimize(model)
    assert not report.has_errors
    proto = ir.serde.serialize_model(fused)
    onnx.checker.check_model(proto, full_check=True)
    a = np.random.default_rng(seed).standard_normal((2, K)).astype(np.float32)
    y = run_ort(proto, {"a": a})[0]
    assert (np.abs(y - a.astype(np.float64) @ W) <= matmul_tolerance(a, W, np.float32)).all()
    again, report2 = onnxfuse.optimize(fused)
    assert report2.fused == []  # idempotent
