"""Every CI zoo model, optimized, through InferenceSession on the CPU against the zoo's stored
reference outputs: backend "ort" (function bodies) for all of them, backend "triton" (the
kernels in Triton's interpreter) for a subset that covers every fused op type, element format
and scale format/rule the zoo produces (the interpreter takes 3-15 s per model)."""

from __future__ import annotations

import warnings

import pytest

from onnxfuse.runtime.session import InferenceSession
from zoo_runtime import QUANTIZED, mismatch, optimized, stored, variants

# Chosen for coverage at the lowest interpreter cost; test_triton_subset_covers_the_zoo keeps
# it honest when the zoo grows.
TRITON_SUBSET = [
    "quark_mxfp4",  # QuantizeDequantize float4e2m1, dynamic mx
    "modelopt_nvfp4",  # QuantizeDequantize dynamic nvfp4; DequantMatMul float4e2m1/float8e4m3fn + global scale
    "static_qdq_fp8_blocks",  # QuantizeDequantize static absmax; DequantMatMul float8e4m3fn/float32
    "mlp_mxfp6",  # DequantMatMul float6e2m3/float8e8m0
    "llama_toy_mxfp4",  # DequantGather + DequantMatMul float4e2m1/float8e8m0, many ORT segments
    "mlp_int4_bf16",  # DequantMatMul int4/bfloat16
    "modelopt_int4",  # DequantMatMul int4/float16, float16 activations
    "ort_int4_qdq",  # DequantMatMul uint4 with zero points
    "mlp_int2",  # DequantMatMul int2
    "bert_int8",  # DequantGather int8, DequantMatMul int8 with bias
]


def _run(name: str, backend: str) -> list:
    feeds, _ = stored(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fused op falling back to its function body (OFX402) fails
        sess = InferenceSession(optimized(name), backend=backend)
    return sess.run(None, feeds)


@pytest.mark.parametrize("name", QUANTIZED)
def test_zoo_model_on_backend_ort(name):
    _, want = stored(name)
    reason = mismatch(name, _run(name, "ort"), want)
    assert reason is None, f"{name}: {reason}"


@pytest.mark.parametrize("name", TRITON_SUBSET)
def test_zoo_model_on_backend_triton_interpreter(name):
    _, want = stored(name)
    reason = mismatch(name, _run(name, "triton"), want)
    assert reason is None, f"{name}: {reason}"


def test_triton_subset_covers_the_zoo():
    every = set().union(*(variants(optimized(n)) for n in QUANTIZED))
    covered = set().union(*(variants(optimized(n)) for n in TRITON_SUBSET))
    for what, index in (("op type", 0), ("element format", 1), ("scale format or rule", 2)):
        missing = {v[index] for v in every} - {v[index] for v in covered}
        assert not missing, f"TRITON_SUBSET runs no fused node with {what} {sorted(missing)}"
