"""The weight pass: every constant block DQ, traced to its consumers, validated, then fused.

For each DQ: parse, validate (an error leaves the whole pattern exactly as it was), trace every
use through Transpose / Cast / Reshape, and offer each path to the rules (MatMul, Gemm, Gather).
Paths no rule takes keep the DQ alive; FuseDequantizePass handles what remains.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxfuse import codes
from onnxfuse.diagnostics import Diagnostic, OnnxfuseError
from onnxfuse.passes import match, rewrite, validate
from onnxfuse.passes.context import RunContext
from onnxfuse.passes.fuse_gather import GatherRule
from onnxfuse.passes.fuse_matmul import GemmRule, MatMulRule
from onnxfuse.passes.qdq import QDQ, is_dq, parse_dq
from onnxfuse.passes.trace import trace
from onnxfuse.passes.weight_view import WeightView

RULES = (MatMulRule(), GemmRule(), GatherRule())


def weight_candidate(ctx: RunContext, node: ir.Node) -> QDQ | None:
    """A parsed, validated constant block DQ, or None (with the reason recorded)."""
    q = parse_dq(node)
    if isinstance(q, Diagnostic):
        ctx.report([q])
        ctx.explain(node, q)
        return None
    if q.block_size <= 0:
        ctx.not_fused(node, f"a per-{q.granularity} DequantizeLinear is not block-scaled; onnxruntime runs it as it is")
        return None
    if not match.is_constant(q.data):
        producer = q.data.producer()
        if producer is not None and (producer.op_type == "QuantizeLinear" or producer.domain == "trt"):
            return None  # an activation Q -> DQ: the Q/DQ pass decides and explains
        ctx.report(validate.check_constant_weight(q))
        ctx.explain(node, validate.check_constant_weight(q)[0])
        return None
    found = validate.validate_weight(q, ctx.opset)
    ctx.report(found)
    if validate.errors(found):
        for d in validate.errors(found):
            ctx.explain(node, d)
        return None
    if q.data_shape is None:
        ctx.not_fused(node, "the data's shape is not known")
        return None
    return q


class FuseWeightsPass(ir.passes.InPlacePass):
    """DQ(weight) -> MatMul / Gemm / Gather => DequantMatMul / DequantGather."""

    def __init__(self, ctx: RunContext):
        super().__init__()
        self.ctx = ctx

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        ctx = self.ctx
        edits: list[rewrite.Edit] = []
        for node in list(model.graph):
            if not is_dq(node):
                continue
            q = weight_candidate(ctx, node)
            if q is None:
                continue
            view = WeightView.of(q.data_shape, q.axis, q.block_size)
            paths = trace(node.outputs[0], view, q.output_dtype)
            taken = 0
            for path in paths:
                edit = self._offer(ctx, q, path)
                if edit is not None:
                    edits.append(edit)
                    taken += 1
            if len(paths) > 1:
                self._report_sharing(ctx, q, len(paths), taken)
        return ir.passes.PassResult(model, rewrite.apply(ctx, edits))

    @staticmethod
    def _offer(ctx: RunContext, q: QDQ, path) -> rewrite.Edit | None:
        if path.reason:
            ctx.not_fused(q.node, f"{path.describe()}: {path.reason}")
            return None
        for rule in RULES:
            if not rule.applies(path):
                continue
            compute = validate.check_compute_range(q, match.elem_type(path.terminal.inputs[0]) if rule.pattern != "DequantGather" else path.dtype)
            try:
                result = rule.rewrite(ctx, q, path)
            except OnnxfuseError as e:  # e.g. a format combination no function body computes
                result = e.diagnostics[0].message
            if isinstance(result, str):
                ctx.not_fused(q.node, f"{path.describe()}: {result}")
                return None
            ctx.report(compute)
            return result
        ctx.not_fused(q.node, f"{path.describe()}: no fused op takes a {path.terminal.op_type} "
                              f"(input {path.index}) as the weight's consumer")
        return None

    @staticmethod
    def _report_sharing(ctx: RunContext, q: QDQ, users: int, fused: int) -> None:
        rest = users - fused
        message = (f"the quantized weight '{q.data.name}' feeds {users} consumers; {fused} fused sharing one "
                   "repacked tensor")
        if rest:
            message += f", {rest} left to a Dequantize or the original DQ"
        ctx.report([Diagnostic.info(codes.WEIGHT_SHARED, message, node=match.node_label(q.node), tensor=q.data.name)])
