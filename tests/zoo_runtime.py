"""Zoo models, optimized by onnxfuse.optimize, run by onnxfuse.InferenceSession and compared
with the zoo's stored reference outputs (models/golden/NAME.npz) under the per-format
tolerances of models/regression.py. Shared by tests/test_runtime_zoo.py (CPU) and
tests/test_runtime_gpu.py (CUDA)."""

from __future__ import annotations

import functools

import numpy as np
import onnx

from models import regression as rg
from models import zoo
from models.reference import cosine_similarity

QUANTIZED = [n for n in zoo.names(ci_only=True) if zoo.entry(n).base is not None]


@functools.cache
def optimized(name: str) -> onnx.ModelProto:
    """The zoo model (built into the zoo cache) after onnxfuse.optimize, as a ModelProto."""
    import onnx_ir as ir

    import onnxfuse

    model, _ = onnxfuse.optimize(zoo.build(name))
    return ir.to_proto(model)


def stored(name: str) -> tuple[dict, list]:
    data = rg.load_data(name)
    assert data is not None, f"no golden data for {name} (models/golden/{name}.npz)"
    return data


def variants(model: onnx.ModelProto) -> set[tuple[str, str, str]]:
    """(op type, element format, scale format or scale rule) of every fused node."""
    out = set()
    for node in model.graph.node:
        if node.domain != "onnxfuse":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        text = {k: v.decode() for k, v in attrs.items() if isinstance(v, bytes)}
        element = text.get("weight_format") or text.get("element_format", "?")
        scale = text.get("scale_format") or f"{text.get('mode', '?')} {text.get('scale_rule', '?')}"
        out.add((node.op_type, element, scale))
    return out


def mismatch(name: str, got: list, want: list) -> str | None:
    """None when the outputs match the reference within models/regression.py's tolerance for the
    model's float type (weight-only) or its activation format's cosine floor, else why not."""
    e = zoo.entry(name)
    kind = "float16" if any(np.asarray(w).dtype == np.float16 for w in want) else "float32"
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {i}: {g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}"
        if e.activations:
            cos = cosine_similarity(g, w)
            floor = rg.ACTIVATION_COSINE_FLOOR[e.activations]
            if not cos >= floor:
                return f"output {i}: cosine {cos:.5f} to the reference, below {floor} ({e.activations} activations)"
        else:
            scale = float(np.max(np.abs(w.astype(np.float32))))
            err = float(np.max(np.abs(g.astype(np.float32) - w.astype(np.float32))))
            if not err <= rg.MAX_ERROR[kind] * scale:
                return f"output {i}: max error {err / scale:.2e} of max |y|, above {rg.MAX_ERROR[kind]} ({kind})"
    return None
