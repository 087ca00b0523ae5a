"""A constant block DQ still in use after the weight pass  =>  a standalone `Dequantize`.

Its output keeps its name (so a DQ output that is a graph output stays one), and the function
body decodes with standard ops, so formats onnxruntime cannot run (bf16, E8M0, fp4, fp6) run.
The repacked data is shared with any DequantMatMul already made from the same weight.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxfuse import ops
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.passes import match, repack, rewrite
from onnxfuse.passes.context import Fused, RunContext
from onnxfuse.passes.fuse_weights import weight_candidate
from onnxfuse.passes.qdq import QDQ, is_dq
from onnxfuse.passes.trace import FLOAT_TYPES
from onnxfuse.passes.weight_view import WeightView


def _dequantize_edit(ctx: RunContext, q: QDQ) -> rewrite.Edit | None:
    node = q.node
    dtype = q.output_dtype
    if dtype not in FLOAT_TYPES:
        ctx.not_fused(node, f"its output type {getattr(dtype, 'name', dtype)} is not a float type Dequantize produces")
        return None
    view = WeightView.of(q.data_shape, q.axis, q.block_size)
    packed = repack.pack(ctx, q, view)
    g_value = repack.global_scale_input(ctx, packed.data.name, packed.global_scale)
    overload = ctx.add_function(
        "Dequantize", weight_format=packed.weight_format, scale_format=packed.scale_format,
        has_zero_point=packed.zero_point is not None, has_global_scale=g_value is not None,
        has_bias=False, dtype=int(dtype),
    )
    label = match.node_label(node)
    out = ir.Value(name=ctx.name(f"{label}.out"), type=ir.TensorType(dtype), shape=ir.Shape(q.data_shape))
    fused_node = ir.node(
        "Dequantize",
        rewrite.trim_inputs([packed.data, packed.scale, packed.zero_point, g_value]),
        {"shape": list(q.data_shape), "axis": q.axis, "block_size": q.block_size,
         "weight_format": packed.weight_format, "scale_format": packed.scale_format, "output_dtype": int(dtype)},
        domain=ops.DOMAIN, overload=overload, outputs=[out], name=ctx.name(f"{label}.fused"),
    )
    replaced = [label] + ([match.node_label(q.two_level.node)] if q.two_level is not None else [])
    why = "; ".join(d.message for d in ctx.reasons.get(label, [])) or None
    return rewrite.Edit(anchor=node, nodes=[fused_node], replaces=node, outputs=[out],
                        fused=Fused(fused_node.name, "Dequantize", q.format_label, replaced, why))


class FuseDequantizePass(ir.passes.InPlacePass):
    def __init__(self, ctx: RunContext):
        super().__init__()
        self.ctx = ctx

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        edits = []
        for node in list(model.graph):
            if not is_dq(node):
                continue
            out = node.outputs[0]
            if not out.uses() and not out.is_graph_output():
                continue  # dead: its consumers were fused; clean-up removes it
            q = weight_candidate(self.ctx, node)
            if q is None:
                continue
            try:
                edit = _dequantize_edit(self.ctx, q)
            except OnnxfuseError as e:  # a format combination no function body computes
                self.ctx.not_fused(node, e.diagnostics[0].message)
                edit = None
            if edit is not None:
                edits.append(edit)
        return ir.passes.PassResult(model, rewrite.apply(self.ctx, edits))
