"""The pass manager: runs the fusion passes in order, timing each, then explains what is left."""

from __future__ import annotations

import sys
import time
from typing import Callable

import onnx_ir as ir
from onnx_ir.passes import common

from onnxfuse import codes
from onnxfuse.diagnostics import Diagnostic
from onnxfuse.passes import match
from onnxfuse.passes.cleanup import CleanupPass
from onnxfuse.passes.context import RunContext
from onnxfuse.passes.fuse_dequantize import FuseDequantizePass
from onnxfuse.passes.fuse_qdq import QUARK_DOMAIN, FuseQDQPass
from onnxfuse.passes.fuse_weights import FuseWeightsPass
from onnxfuse.passes.infer_types import InferTypesPass
from onnxfuse.passes.qdq import TRT_DOMAIN, is_dq
from onnxfuse.passes.report import PassRecord

Progress = Callable[[str, int, int], None]


def fusion_passes(ctx: RunContext) -> list[ir.passes.PassBase]:
    # Activations first (their DQs have run-time data), then weights, then what weights leave.
    return [FuseQDQPass(ctx), FuseWeightsPass(ctx), FuseDequantizePass(ctx)]


def run_passes(ctx: RunContext, progress: Progress | None = None) -> list[PassRecord]:
    """Run every fusion pass, then clean up if anything changed. In place on ctx.model."""
    records: list[PassRecord] = []
    # Types first: the matchers need activation dtypes. Adding types is not a rewrite, so it
    # alone never triggers the clean-up (a model with nothing to fuse comes out as it went in).
    passes = [InferTypesPass(), *fusion_passes(ctx)]
    modified = False
    for i, p in enumerate(passes):
        if progress:
            progress(type(p).__name__, i, len(passes) + 1)
        start = time.perf_counter()
        result = p(ctx.model)
        rewrote = result.modified and not isinstance(p, InferTypesPass)
        if rewrote:  # the next pass must not see the replaced chains as live users
            common.RemoveUnusedNodesPass()(ctx.model)
        records.append(PassRecord(type(p).__name__, time.perf_counter() - start, result.modified))
        modified |= rewrote
    ctx.drop_unused_created()
    if modified:
        if progress:
            progress("CleanupPass", len(passes), len(passes) + 1)
        start = time.perf_counter()
        result = CleanupPass()(ctx.model)
        records.append(PassRecord("CleanupPass", time.perf_counter() - start, result.modified))
    return records


def leftovers(ctx: RunContext) -> dict[str, list[str]]:
    """Every Q/DQ (and exporter quantize op) still in the graph, with why it was not fused."""
    skipped: dict[str, list[str]] = {}
    for node in ctx.model.graph:
        quantizing = is_dq(node) or match.is_op(node, "QuantizeLinear") or node.domain in (TRT_DOMAIN, QUARK_DOMAIN)
        if not quantizing:
            continue
        label = match.node_label(node)
        reasons = [d.message for d in ctx.reasons.get(label, [])]
        if not reasons:
            reasons = [f"no onnxfuse rule matches this {node.op_type} and its consumers"]
        skipped[label] = reasons
        ctx.report([Diagnostic.info(codes.NOT_FUSED, f"{node.op_type} left as it was: {reasons[0]}", node=label)])
    return skipped


def stderr_progress(total_nodes: int) -> Progress | None:
    """A progress line on stderr, only for a terminal or a large model (never in pipes for small ones)."""
    if not (sys.stderr.isatty() or total_nodes >= 5000):
        return None

    def show(name: str, i: int, n: int) -> None:
        end = "\n" if i + 1 >= n else "\r"
        print(f"onnxfuse: [{i + 1}/{n}] {name} ({total_nodes} nodes)", file=sys.stderr, end=end, flush=True)

    return show
