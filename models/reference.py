"""Reference execution of zoo models, including exporters' custom ops that onnxruntime lacks.

onnx.reference.ReferenceEvaluator runs every standard op; onnxfuse.runtime.reference supplies the
one set of overrides the product uses too (Q/DQ through the format layer, ModelOpt's `trt::` ops
and Quark's `com.amd.quark::MXQuantizeDequantize`), so a model can be evaluated before any
onnxfuse pass touches it, and `onnxfuse verify` and the zoo judge by the same reference.
"""

from __future__ import annotations

import numpy as np
from onnx.reference import ReferenceEvaluator

from onnxfuse.runtime.reference import NEW_OPS


def reference_session(model) -> ReferenceEvaluator:
    """A ReferenceEvaluator for a path or ModelProto, with the exporters' custom ops."""
    return ReferenceEvaluator(model, new_ops=NEW_OPS)


def run_reference(model, feeds: dict) -> list[np.ndarray]:
    return reference_session(model).run(None, feeds)


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
