"""Which initializers the weight quantizer rewrites, and along which axis.

A *use* is one consumer slot of a float initializer that the quantizer can serve with a
dequantized weight. The blocked axis is always the reduction axis of the consumer (K of a
MatMul/Gemm, D of an embedding table), because that is the axis the fused kernels reduce along.
Several uses of one initializer (a tied embedding: Gather and the LM head's Transpose->MatMul)
share one quantized tensor when they need the same stored form.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Iterable, Sequence

import onnx_ir as ir

FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


@dataclasses.dataclass(frozen=True)
class Form:
    """How a weight is stored once quantized: transposed or not, and the blocked axis of the stored tensor."""

    transpose: bool  # store W.T and put a Transpose after the dequantization (layout "nk")
    axis: int  # blocked axis of the stored tensor


@dataclasses.dataclass(frozen=True)
class WeightUse:
    node: ir.Node
    input_index: int
    form: Form


@dataclasses.dataclass
class Skipped:
    """A candidate the quantizer left alone, and why (for the report and --verbose)."""

    node: str
    tensor: str
    reason: str


def _perm_is_swap(node: ir.Node) -> bool:
    perm = node.attributes.get("perm")
    return perm is None or list(perm.as_ints()) == [1, 0]


def _matmul_form(layout: str) -> Form:
    # W is [K, N]: block along K (axis 0), or store W.T [N, K] blocked along axis 1 + Transpose.
    return Form(transpose=False, axis=0) if layout == "kn" else Form(transpose=True, axis=1)


def _use_of(node: ir.Node, index: int, layout: str) -> tuple[Form | None, str | None]:
    """The form a (node, input index) slot needs, or None and the reason it cannot be quantized."""
    op = node.op_type
    if op == "MatMul" and index == 1:
        return _matmul_form(layout), None
    if op == "Gemm" and index == 1:
        if node.attributes.get_int("transB", 0):
            # Already column-major [N, K]: block along K, no Transpose needed.
            return Form(transpose=False, axis=1), None
        return _matmul_form(layout), None
    if op == "Gather" and index == 0:
        if node.attributes.get_int("axis", 0) != 0:
            return None, "Gather along an axis other than 0 is not an embedding lookup"
        return Form(transpose=False, axis=1), None
    if op == "Transpose" and index == 0 and _perm_is_swap(node):
        # E [N, K] -> Transpose -> MatMul B: the LM head of a tied embedding. E is blocked along K.
        consumers = [(u.node, u.idx) for u in node.outputs[0].uses()]
        if consumers and all(c.op_type == "MatMul" and i == 1 for c, i in consumers):
            return Form(transpose=False, axis=1), None
        return None, "the Transpose does not feed a MatMul weight"
    return None, f"{op} input {index} is not a weight slot the quantizer handles"


def _excluded(node: ir.Node, tensor: str, patterns: Sequence[str]) -> bool:
    names = [n for n in (node.name, tensor) if n]
    if node.op_type == "Transpose":  # exclude the LM head by its MatMul's name too
        names += [u.node.name for u in node.outputs[0].uses() if u.node.name]
    return any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns)


def _slot_op(node: ir.Node) -> str:
    """The op type the user selects with op_types: a Transpose slot belongs to its MatMul."""
    return "MatMul" if node.op_type == "Transpose" else node.op_type


def find_weight_uses(
    graph: ir.Graph, op_types: Iterable[str], exclude: Sequence[str], layout: str
) -> tuple[dict[str, list[WeightUse]], list[Skipped]]:
    """Group the quantizable uses of every float 2-D initializer by initializer name."""
    op_types = set(op_types)
    uses: dict[str, list[WeightUse]] = {}
    skipped: list[Skipped] = []
    for name, value in graph.initializers.items():
        if value.is_graph_input() or value.const_value is None:
            continue
        if value.dtype not in FLOAT_TYPES or value.shape is None or len(value.shape) != 2:
            continue
        for usage in value.uses():
            node, index = usage.node, usage.idx
            if node.domain != "" or _slot_op(node) not in op_types:
                continue
            form, reason = _use_of(node, index, layout)
            if form is None:
                if node.op_type != "Transpose":
                    skipped.append(Skipped(node.name or "", name, reason))
                continue
            if _excluded(node, name, exclude):
                skipped.append(Skipped(node.name or "", name, "excluded by the user"))
                continue
            uses.setdefault(name, []).append(WeightUse(node, index, form))
    return uses, skipped
