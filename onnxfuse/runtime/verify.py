"""Compare a fused model with its original on the same inputs (the `onnxfuse verify` command).

The original runs in onnxruntime CPU where it can; where ORT cannot run its formats (bf16/e8m0
scales, fp4, exporters' custom ops) it runs in onnx's reference evaluator with onnxfuse.formats'
NumPy Q/DQ reference (onnxfuse.runtime.reference).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.runtime.compare import OutputComparison, compare_output
from onnxfuse.runtime.feeds import graph_inputs, graph_outputs
from onnxfuse.runtime.inputs import load_npz, random_inputs
from onnxfuse.runtime.model_source import ModelSource, load_source


@dataclasses.dataclass
class VerifyResult:
    outputs: list[OutputComparison]
    reference_runner: str  # "onnxruntime" or "reference evaluator (...)"
    backend: str
    fallback_reason: str | None = None

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.outputs)

    def to_json(self) -> dict:
        return {"ok": self.ok, "backend": self.backend, "reference": self.reference_runner,
                "reference_fallback_reason": self.fallback_reason, "outputs": [c.to_json() for c in self.outputs]}


def run_original(src, feeds: dict, output_names: list[str]) -> tuple[list, str, str | None]:
    """-> (outputs, which runner, why ORT was not used)."""
    from onnxfuse.runtime.ort_backend import OrtBackend, import_ort

    source = src if isinstance(src, ModelSource) else load_source(src)
    ort = import_ort()
    # Graph optimizations off: ORT's DQ+MatMul -> MatMulNBits rewrite changes the numerics
    # (measured: max abs error 0.065 on a 40x24 int4 MatMul against the exact reference).
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        backend = OrtBackend(source, providers=["CPUExecutionProvider"], sess_options=options)
        return backend.run(output_names, feeds), "onnxruntime (CPU)", None
    except OnnxfuseError as e:
        reason = e.diagnostics[0].message
    from onnxfuse.runtime.reference import ReferenceRunner

    try:
        runner = ReferenceRunner(source.proto)
        outs = runner.run(output_names, feeds)
    except OnnxfuseError:
        raise
    except Exception as e:
        raise OnnxfuseError.of(
            codes.BACKEND_UNAVAILABLE,
            f"the original runs neither in onnxruntime ({reason}) nor in the reference evaluator: {type(e).__name__}: {e}",
            file=source.name,
        ) from e
    return outs, "reference evaluator (onnxfuse.formats Q/DQ)", reason


def verify(original, fused, *, backend: str = "auto", inputs: str | dict | None = None, shapes=None, dims=None,
           rtol: float = 1e-3, atol: float = 1e-3, rtol_per: dict | None = None, atol_per: dict | None = None,
           seed: int = 0, providers=None) -> VerifyResult:
    from onnxfuse.runtime.session import InferenceSession

    orig = original if isinstance(original, ModelSource) else load_source(original)
    fused_session = InferenceSession(fused, providers=providers, backend=backend)
    orig_inputs = graph_inputs(orig.proto)
    fused_names = {i.name for i in fused_session.get_inputs()}
    if {i.name for i in orig_inputs} != fused_names:
        raise OnnxfuseError.of(
            codes.INPUT_INVALID,
            f"the models' inputs differ: original {sorted(i.name for i in orig_inputs)}, fused {sorted(fused_names)}",
        )
    if isinstance(inputs, str):
        feeds = load_npz(inputs, orig_inputs)
    elif isinstance(inputs, dict):
        feeds = dict(inputs)
    else:
        feeds = random_inputs(orig.proto, shapes=shapes, dims=dims, seed=seed)
    names = [o.name for o in graph_outputs(orig.proto)]
    fused_out = {o.name for o in fused_session.get_outputs()}
    missing = [n for n in names if n not in fused_out]
    if missing:
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"the fused model lacks the original's outputs {missing}")
    ref, runner, why = run_original(orig, feeds, names)
    got = fused_session.run(names, feeds)
    rtol_per, atol_per = rtol_per or {}, atol_per or {}
    unknown = [n for n in list(rtol_per) + list(atol_per) if n not in names]
    if unknown:
        raise OnnxfuseError.of(codes.USAGE, f"tolerance given for unknown output(s) {sorted(set(unknown))}",
                               hint=f"the outputs are {', '.join(names)}")
    results = [
        compare_output(n, np.asarray(g), np.asarray(r), atol=atol_per.get(n, atol), rtol=rtol_per.get(n, rtol))
        for n, g, r in zip(names, got, ref)
    ]
    return VerifyResult(results, runner, fused_session.backend_name, why)
