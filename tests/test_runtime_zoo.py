"""Every CI zoo model, optimized, through InferenceSession on the CPU against the zoo's stored
reference outputs: backend "ort" (function bodies) for all of them, backend "triton" (the
kernels in Triton's interpreter) for a subset that covers every fused op type, element format
and scale format/rule the zoo produces (the interpreter takes 3-15 s per model)."""

from __future__ import annotations

import warnings

import pytest

from onnxfuse.runtime.session import InferenceSession
from zoo_runtime import QUANTIZED, mismatch, optimized, stored, variants

# The cheapest set covering every fused op type, element-format family, scale-format family and
# QuantizeDequantize rule the zoo produces (test_triton_subset_covers_the_zoo keeps it honest
# when the zoo grows). The formats inside a family share the kernels' decode path; each one is
# also run by the kernels' own tests and by the tiny models of test_runtime_session.py.
TRITON_SUBSET = [
    "quark_mxfp4",  # QuantizeDequantize float4e2m1, dynamic mx
    "modelopt_nvfp4",  # QuantizeDequantize dynamic nvfp4; DequantMatMul float4e2m1/float8e4m3fn + global scale
    "static_qdq_fp8_blocks",  # QuantizeDequantize static absmax; DequantMatMul float8e4m3fn/float32
    "llama_toy_mxfp4",  # DequantGather + DequantMatMul float4e2m1/float8e8m0, many ORT segments
    "ort_int4_qdq",  # DequantMatMul uint4 with zero points
    "mlp_mxfp6",  # DequantMatMul float6e2m3/float8e8m0
]
# Element formats by the kernels' decode family; scale formats by how they are stored and applied.
ELEMENT_FAMILY = {"int2": "integer", "int4": "integer", "uint4": "integer", "int8": "integer", "uint8": "integer",
                  "float8e4m3fn": "fp8", "float8e5m2": "fp8", "float6e2m3": "fp6", "float6e3m2": "fp6",
                  "float4e2m1": "fp4"}
SCALE_FAMILY = {"float32": "float", "float16": "float", "bfloat16": "float", "float8e8m0": "e8m0",
                "float8e4m3fn": "e4m3 (two-level)"}


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


def _families(names) -> set:
    out = set()
    for n in names:
        for op, element, scale in variants(optimized(n)):
            out |= {("op type", op), ("element family", ELEMENT_FAMILY.get(element, element))}
            out.add(("QuantizeDequantize rule", scale) if op == "QuantizeDequantize" else
                    ("scale family", SCALE_FAMILY.get(scale, scale)))
    return out


def test_triton_subset_covers_the_zoo():
    missing = _families(QUANTIZED) - _families(TRITON_SUBSET)
    assert not missing, f"TRITON_SUBSET runs no fused node of {sorted(missing)}"
