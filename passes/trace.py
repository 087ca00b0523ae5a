"""Follow a dequantized weight through Transpose / Cast / Reshape to the ops that consume it.

Every use of the DQ's output becomes a Path: the look-through nodes walked, the consumer it
ends at (or None for a graph output), and the weight's view there, or the reason the walk
stopped. Paths branch where an intermediate value has several users.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from onnxfuse.passes import match
from onnxfuse.passes.weight_view import WeightView

FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


@dataclasses.dataclass
class Path:
    chain: list[ir.Node]
    terminal: ir.Node | None  # None: the value is a graph output
    index: int
    view: WeightView | None
    dtype: ir.DataType | None  # the weight's element type where it reaches the terminal
    reason: str | None = None  # why the walk stopped before a fusable consumer

    def describe(self) -> str:
        steps = [n.op_type for n in self.chain]
        end = "graph output" if self.terminal is None else f"{self.terminal.op_type} '{match.node_label(self.terminal)}'"
        return " -> ".join(["DequantizeLinear", *steps, end])


def trace(value: ir.Value, view: WeightView | None, dtype: ir.DataType | None) -> list[Path]:
    return list(_walk(value, view, dtype, []))


def _step(node: ir.Node, view: WeightView | None, dtype):
    """(new view, new dtype) or a reason string."""
    if node.op_type == "Cast":
        to = node.attributes.get_int("to", 0)
        to = ir.DataType(to) if to else None
        if to not in FLOAT_TYPES:
            return f"Cast '{match.node_label(node)}' casts the weight to {getattr(to, 'name', to)}, not a float type"
        return view, to
    if view is None:
        return "the weight's shape is not known, so it cannot be followed through a " + node.op_type
    if node.op_type == "Transpose":
        perm = node.attributes.get_ints("perm", None)
        result = view.transpose(list(perm) if perm is not None else None)
    else:  # Reshape
        shape_value = node.inputs[1] if len(node.inputs) > 1 else None
        target = match.const_array(shape_value)
        if target is None:
            return f"Reshape '{match.node_label(node)}' has a run-time shape"
        result = view.reshape([int(d) for d in target.reshape(-1)], bool(node.attributes.get_int("allowzero", 0)))
    if isinstance(result, str):
        return f"{node.op_type} '{match.node_label(node)}': {result}"
    return result, dtype


def _walk(value: ir.Value, view, dtype, chain: list[ir.Node]):
    if value.is_graph_output():
        yield Path(list(chain), None, -1, view, dtype, "the value is a graph output")
    for node, index in match.consumers(value):
        if node.op_type in match.LOOK_THROUGH_OPS and node.domain == "" and index == 0:
            stepped = _step(node, view, dtype)
            if isinstance(stepped, str):
                yield Path(list(chain), node, index, view, dtype, stepped)
                continue
            yield from _walk(node.outputs[0], stepped[0], stepped[1], chain + [node])
        else:
            yield Path(list(chain), node, index, view, dtype)
