"""Per-output comparison of a fused model's outputs against the original's.

An element passes when |fused - ref| <= atol + rtol * |ref| (NumPy's allclose rule); NaN passes
only against NaN at the same place. Statistics are computed in float64.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class OutputComparison:
    name: str
    shape: tuple
    max_abs: float
    max_rel: float
    cosine: float
    mismatched: int  # elements beyond the tolerance
    total: int
    atol: float
    rtol: float
    problem: str | None = None  # shape/dtype disagreement, NaN placement

    @property
    def ok(self) -> bool:
        return self.problem is None and self.mismatched == 0

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["shape"] = list(self.shape)
        d["ok"] = self.ok
        return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in d.items()}


def _as_f64(a) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind in "biuf":
        return a.astype(np.float64)
    return a.astype(np.float32).astype(np.float64)  # ml_dtypes (bfloat16, ...)


def compare_output(name: str, fused, ref, *, atol: float, rtol: float) -> OutputComparison:
    f, r = _as_f64(fused), _as_f64(ref)
    if f.shape != r.shape:
        return OutputComparison(name, f.shape, float("inf"), float("inf"), float("nan"), f.size, max(f.size, r.size),
                                atol, rtol, f"shape {list(f.shape)} differs from the reference's {list(r.shape)}")
    nan_f, nan_r = np.isnan(f), np.isnan(r)
    problem = None
    if np.any(nan_f != nan_r):
        problem = f"NaN at {int(np.sum(nan_f != nan_r))} position(s) where the other side has a number"
    both = ~(nan_f | nan_r)
    diff = np.abs(f - r)[both]
    mag = np.abs(r)[both]
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(mag > 0, diff / mag, np.where(diff > 0, np.inf, 0.0))
    bad = int(np.sum(diff > atol + rtol * mag)) + int(np.sum(nan_f != nan_r))
    fv, rv = f[both], r[both]
    nf, nr = np.linalg.norm(fv), np.linalg.norm(rv)
    if nf == 0 and nr == 0:
        cosine = 1.0
    elif nf == 0 or nr == 0:
        cosine = 0.0
    else:
        cosine = float(np.dot(fv, rv) / (nf * nr))
    return OutputComparison(
        name, f.shape, float(diff.max()) if diff.size else 0.0, float(rel.max()) if rel.size else 0.0, cosine,
        bad, f.size, atol, rtol, problem,
    )


def format_table(results: list[OutputComparison]) -> str:
    rows = [("output", "shape", "max abs err", "max rel err", "cosine", "mismatched", "atol", "rtol", "result")]
    for c in results:
        rows.append((
            c.name, "x".join(map(str, c.shape)) or "scalar", f"{c.max_abs:.3e}", f"{c.max_rel:.3e}", f"{c.cosine:.6f}",
            f"{c.mismatched}/{c.total}", f"{c.atol:g}", f"{c.rtol:g}", "ok" if c.ok else "MISMATCH",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    for c in results:
        if c.problem:
            lines.append(f"  {c.name}: {c.problem}")
    return "\n".join(lines)
