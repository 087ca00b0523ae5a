"""Golden files and test data of the zoo regression tests (tests/test_zoo_regression.py).

For each zoo model, models/golden/NAME.json holds what optimizing it must report (fused counts
per pattern and format, diagnostics, how many nodes stay unfused) and the quantized model's
cosine similarity to its float model; models/golden/NAME.npz holds the test inputs and the
reference outputs of the quantized model (models/reference.py). Both are reviewed text/data,
rewritten only when ONNXFUSE_UPDATE_GOLDEN=1 is set.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
UPDATE_ENV = "ONNXFUSE_UPDATE_GOLDEN"


def updating() -> bool:
    return os.environ.get(UPDATE_ENV, "") not in ("", "0")


def golden_path(name: str) -> Path:
    return GOLDEN_DIR / f"{name}.json"


def data_path(name: str) -> Path:
    return GOLDEN_DIR / f"{name}.npz"


def load_golden(name: str) -> dict | None:
    p = golden_path(name)
    return json.loads(p.read_text()) if p.exists() else None


def save_golden(name: str, record: dict) -> None:
    GOLDEN_DIR.mkdir(exist_ok=True)
    golden_path(name).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def save_data(name: str, feeds: dict[str, np.ndarray], outputs: list[np.ndarray]) -> None:
    GOLDEN_DIR.mkdir(exist_ok=True)
    arrays = {f"input:{k}": v for k, v in feeds.items()} | {f"output_{i}": v for i, v in enumerate(outputs)}
    with open(data_path(name), "wb") as f:
        np.savez_compressed(f, **arrays)


def load_data(name: str) -> tuple[dict[str, np.ndarray], list[np.ndarray]] | None:
    p = data_path(name)
    if not p.exists():
        return None
    with np.load(p) as z:
        feeds = {k.split(":", 1)[1]: z[k] for k in z.files if k.startswith("input:")}
        outs = [z[f"output_{i}"] for i in range(sum(k.startswith("output_") for k in z.files))]
    return feeds, outs


def report_record(report) -> dict:
    """The reviewed part of an optimize Report: stable across runs and machines. The per-node
    "fused" notes (OFX302) are left out: the fused counts already say the same."""
    from onnxfuse import codes

    diagnostics = sorted(
        ({"code": d.code.id, "severity": d.severity.value, "node": d.node} for d in report.diagnostics if d.code != codes.FUSED),
        key=lambda d: (d["code"], d["node"] or ""),
    )
    return {"fused": report.counts, "diagnostics": diagnostics, "unfused_nodes": len(report.skipped)}


# -- tolerances ------------------------------------------------------------------------------
# Optimized (fused) model under stock onnxruntime vs the reference evaluation of the Q/DQ model.
# Both decode exactly the same codes and scales, so only the float arithmetic differs:
# - float32 weight-only: summation order of float32 dot products; measured <= 7e-7 of max |y|,
#   bound 2e-5 (K <= 512 terms at eps 6e-8 each, relative to the largest output).
# - float16 weight-only: every op rounds to float16 (eps 4.9e-4) in both evaluations, at different
#   points; measured <= 9e-4 of max |y| through a 2-layer decoder, bound 5e-3 (~10 ulps).
# - activation quantization (static or dynamic): a last-ulp difference before a quantizer can move
#   a value across a rounding boundary, which changes it by a whole step (a third of the value for
#   E2M1) and propagates; elementwise bounds are meaningless, so the check is the output cosine
#   similarity, with a floor per activation format. The isolated-quantizer tests are exact.
MAX_ERROR = {"float32": 2e-5, "float16": 5e-3}
ACTIVATION_COSINE_FLOOR = {"int8": 0.999, "float8e4m3fn": 0.995, "float4e2m1": 0.97}

# Quantized vs float model (the accuracy cost of RTN quantization itself), per weight scheme.
# Measured on the zoo: 8-bit >= 0.994, 6-bit 0.999, 4-bit >= 0.917, int2 0.66 (codes -1..1).
QUANTIZED_COSINE_FLOOR = {
    "int8": 0.99, "fp8": 0.99, "mxfp8": 0.99, "mxfp6e2m3": 0.99,
    "int4": 0.9, "uint4": 0.9, "mxfp4": 0.9, "nvfp4": 0.9, "int2": 0.5,
}
GOLDEN_COSINE_TOLERANCE = 2e-3  # the same float evaluation on another BLAS; flips in chaotic models
