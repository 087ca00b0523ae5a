"""What an optimize run did: op counts, fusions per pattern and format, skips with reasons, bytes, time."""

from __future__ import annotations

import collections
import dataclasses
import json
import os

import onnx_ir as ir

from onnxfuse import atomic_write
from onnxfuse.diagnostics import Diagnostic, has_errors
from onnxfuse.passes.context import Fused


def op_counts(model: ir.Model) -> dict[str, int]:
    counts = collections.Counter()
    for node in model.graph:
        counts[f"{node.domain}::{node.op_type}" if node.domain else node.op_type] += 1
    return dict(sorted(counts.items()))


def weight_bytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)


@dataclasses.dataclass
class PassRecord:
    name: str
    seconds: float
    modified: bool


@dataclasses.dataclass
class Report:
    file: str | None = None
    output: str | None = None
    ops_before: dict[str, int] = dataclasses.field(default_factory=dict)
    ops_after: dict[str, int] = dataclasses.field(default_factory=dict)
    weight_bytes_before: int = 0
    weight_bytes_after: int = 0
    fused: list[Fused] = dataclasses.field(default_factory=list)
    diagnostics: list[Diagnostic] = dataclasses.field(default_factory=list)
    # node left as it was -> why (every DQ still in the graph has an entry)
    skipped: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    passes: list[PassRecord] = dataclasses.field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def counts(self) -> dict[str, dict[str, int]]:
        """pattern -> element/scale format -> number of fused nodes."""
        out: dict[str, dict[str, int]] = {}
        for f in self.fused:
            out.setdefault(f.pattern, {}).setdefault(f.format, 0)
            out[f.pattern][f.format] += 1
        return out

    @property
    def has_errors(self) -> bool:
        return has_errors(self.diagnostics)

    def to_json(self) -> dict:
        return {
            "file": self.file,
            "output": self.output,
            "ops_before": self.ops_before,
            "ops_after": self.ops_after,
            "weight_bytes_before": self.weight_bytes_before,
            "weight_bytes_after": self.weight_bytes_after,
            "counts": self.counts,
            "fused": [dataclasses.asdict(f) for f in self.fused],
            "skipped": self.skipped,
            "diagnostics": [d.to_json() for d in self.diagnostics],
            "passes": [dataclasses.asdict(p) for p in self.passes],
            "elapsed_s": round(self.elapsed_s, 4),
        }

    def save(self, path: str) -> None:
        """Write the report as JSON, atomically; never over the model it describes or its input."""
        from onnxfuse.model_io import check_output_path

        path = os.fspath(path)
        outputs = (self.output, self.output + ".data") if self.output else ()
        check_output_path(path, self.file, avoid=outputs)
        atomic_write.write_text(path, json.dumps(self.to_json(), indent=2))

    def to_text(self, *, explain: bool = False) -> str:
        lines = []
        ops = sorted(set(self.ops_before) | set(self.ops_after))
        width = max([len(o) for o in ops] + [2])
        lines.append(f"{'op'.ljust(width)}  before  after")
        for op in ops:
            b, a = self.ops_before.get(op, 0), self.ops_after.get(op, 0)
            lines.append(f"{op.ljust(width)}  {b:6d}  {a:5d}")
        lines.append("")
        if self.fused:
            lines.append("fused:")
            for pattern, formats in sorted(self.counts.items()):
                for fmt, n in sorted(formats.items()):
                    lines.append(f"  {pattern:22s} {fmt:32s} {n}")
        else:
            lines.append("fused: nothing")
        notes = [f for f in self.fused if f.note]
        if notes:
            lines.append("standalone Dequantize (consumer not fused):")
            for f in notes if explain else notes[:10]:
                lines.append(f"  {f.replaced[0]}: {f.note}")
        if self.skipped:
            lines.append(f"left as they were: {len(self.skipped)} node(s)")
            shown = self.skipped.items() if explain else list(self.skipped.items())[:10]
            for node, reasons in shown:
                lines.append(f"  {node}: {reasons[0] if reasons else 'no rule matched'}")
                if explain:
                    for r in reasons[1:]:
                        lines.append(f"      also: {r}")
            if not explain and len(self.skipped) > 10:
                lines.append(f"  ... {len(self.skipped) - 10} more (use --explain or --report)")
        problems = [d for d in self.diagnostics if d.severity.value in ("error", "warning")]
        if problems:
            lines.append("diagnostics:")
            lines.extend("  " + d.to_text() for d in problems)
        lines.append(f"weight bytes: {self.weight_bytes_before:,} -> {self.weight_bytes_after:,}")
        lines.append(f"elapsed: {self.elapsed_s:.3f} s")
        return "\n".join(lines)
