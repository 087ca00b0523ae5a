"""Rule: DQ(table [V, D], blocked along D) [-> Cast] -> Gather(axis 0)  =>  DequantGather.

A table that also feeds the LM head (tied embeddings) gives the same rows to DequantMatMul,
so repack's cache stores it once.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxfuse import ops
from onnxfuse.passes import match, repack
from onnxfuse.passes.context import Fused, RunContext
from onnxfuse.passes.qdq import QDQ
from onnxfuse.passes.rewrite import Edit
from onnxfuse.passes.trace import FLOAT_TYPES, Path


class GatherRule:
    pattern = "DequantGather"

    def applies(self, path: Path) -> bool:
        return match.is_op(path.terminal, "Gather") and path.index == 0

    def rewrite(self, ctx: RunContext, q: QDQ, path: Path) -> Edit | str:
        gather = path.terminal
        label = match.node_label(gather)
        view = path.view
        if view is None or len(view.shape) != 2:
            return f"Gather '{label}' reads a table that is not 2-D [V, D]"
        if gather.attributes.get_int("axis", 0) not in (0, -2):
            return f"Gather '{label}' gathers along axis {gather.attributes.get_int('axis', 0)}, not the rows of the table"
        if view.axis != 1:
            return f"Gather '{label}' reads a table blocked along V (its rows), not along the embedding dim D"
        dtype = path.dtype or q.output_dtype
        if dtype not in FLOAT_TYPES:
            return f"Gather '{label}' produces {getattr(dtype, 'name', dtype)}, not a float type"
        packed = repack.pack(ctx, q, view)
        g_value = repack.global_scale_input(ctx, packed.data.name, packed.global_scale)
        overload = ctx.add_function(
            "DequantGather", weight_format=packed.weight_format, scale_format=packed.scale_format,
            has_zero_point=packed.zero_point is not None, has_global_scale=g_value is not None,
            has_bias=False, dtype=int(dtype),
        )
        out = ir.Value(name=ctx.name(f"{label}.out"), type=ir.TensorType(dtype))
        node = ir.node(
            "DequantGather",
            [packed.data, packed.scale, packed.zero_point, g_value, gather.inputs[1]],
            {"D": packed.K, "block_size": packed.block_size, "weight_format": packed.weight_format,
             "scale_format": packed.scale_format, "output_dtype": int(dtype)},
            domain=ops.DOMAIN, overload=overload, outputs=[out], name=ctx.name(f"{label}.fused"),
        )
        fused = Fused(node.name, self.pattern, q.format_label, [match.node_label(n) for n in [q.node, *path.chain, gather]])
        return Edit(anchor=gather, nodes=[node], replaces=gather, outputs=[out], fused=fused)

