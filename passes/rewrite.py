"""Edits: collected while matching, applied together afterwards (as ORT's fusion_base does).

An Edit inserts new nodes before an anchor and makes them take over the outputs of the node they
replace, names included, so graph outputs and downstream names stay as they were. Replaced
producers (DQ, Transpose, Cast ...) become dead and the clean-up pass removes them.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from onnxfuse import codes
from onnxfuse.diagnostics import Diagnostic
from onnxfuse.passes.context import Fused, RunContext


@dataclasses.dataclass
class Edit:
    anchor: ir.Node  # the new nodes are inserted before it
    nodes: list[ir.Node]
    replaces: ir.Node  # its outputs are taken over by `outputs`, then it is removed
    outputs: list[ir.Value]
    fused: Fused


def take_over(ctx: RunContext, old: ir.Value, new: ir.Value) -> None:
    """`new` replaces `old` everywhere, under old's name, type and shape."""
    name = old.name
    old.name = ctx.name(f"{name}.replaced") if name else None
    if new.type is None:
        new.type = old.type
    if new.shape is None:
        new.shape = old.shape
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    new.name = name


def apply(ctx: RunContext, edits: list[Edit]) -> bool:
    for edit in edits:
        ctx.graph.insert_before(edit.anchor, edit.nodes)
        for old, new in zip(edit.replaces.outputs, edit.outputs):
            take_over(ctx, old, new)
        ctx.graph.remove(edit.replaces, safe=True)
        ctx.record(edit.fused)
        f = edit.fused
        ctx.report([Diagnostic.info(codes.FUSED, f"{', '.join(f.replaced)} -> {f.pattern} ({f.format})", node=f.node)])
    return bool(edits)


def trim_inputs(inputs: list[ir.Value | None]) -> list[ir.Value | None]:
    """Drop trailing absent optional inputs (ONNX omits them rather than naming them '')."""
    inputs = list(inputs)
    while inputs and inputs[-1] is None:
        inputs.pop()
    return inputs
