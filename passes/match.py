"""Graph queries the matchers share: constants, consumers, opsets, node names.

Everything here reads the graph and never edits it. Constant values are read through onnx-ir's
tensors, so an external-data initializer stays memory-mapped until a matcher really needs it.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

# Ops a weight may pass through between its DequantizeLinear and its MatMul / Gemm.
LOOK_THROUGH_OPS = frozenset({"Transpose", "Cast", "Reshape"})


def node_label(node: ir.Node) -> str:
    """A name for messages: the node's name, or its op type when unnamed."""
    return node.name or f"<unnamed {node.op_type}>"


def const_tensor(value: ir.Value | None) -> ir.TensorProtocol | None:
    """The constant behind a value (an initializer or a Constant node's output), else None."""
    if value is None:
        return None
    if value.is_graph_input():
        return None  # an initializer that is also an input may be overridden at run time
    try:
        return ir.convenience.get_const_tensor(value)
    except ValueError:  # a malformed Constant node: not a constant we can read
        return None


def const_array(value: ir.Value | None) -> np.ndarray | None:
    tensor = const_tensor(value)
    return None if tensor is None else tensor.numpy()


def is_constant(value: ir.Value | None) -> bool:
    return const_tensor(value) is not None


def const_shape(value: ir.Value | None) -> tuple[int, ...] | None:
    """The static shape of a value: its constant's shape, else its annotated shape if fully static."""
    tensor = const_tensor(value)
    if tensor is not None:
        return tuple(int(d) for d in tensor.shape)
    if value is None or value.shape is None:
        return None
    dims = value.shape.dims
    if not all(isinstance(d, int) for d in dims):
        return None
    return tuple(dims)


def rank_of(value: ir.Value | None) -> int | None:
    if value is None:
        return None
    tensor = const_tensor(value)
    if tensor is not None:
        return len(tensor.shape)
    return None if value.shape is None else len(value.shape)


def consumers(value: ir.Value) -> list[tuple[ir.Node, int]]:
    """(node, input index) for every use of `value`, in a stable order."""
    return [(use.node, use.idx) for use in value.uses()]


def onnx_opset(model: ir.Model) -> int:
    return int(model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0)))


def is_op(node: ir.Node | None, op_type: str, domain: str = "") -> bool:
    if node is None:
        return False
    node_domain = "" if node.domain in ("", "ai.onnx") else node.domain
    return node.op_type == op_type and node_domain == domain


def elem_type(value: ir.Value | None) -> ir.DataType | None:
    if value is None:
        return None
    if value.dtype is not None:
        return value.dtype
    tensor = const_tensor(value)
    return None if tensor is None else tensor.dtype


def unique_name(graph: ir.Graph, base: str, taken: set[str]) -> str:
    """A value/initializer name not used in the graph; `taken` records names handed out so far."""
    if not taken:
        taken.update(graph.initializers.keys())
        for v in graph.inputs:
            taken.add(v.name)
        for node in graph:
            for out in node.outputs:
                if out.name:
                    taken.add(out.name)
            if node.name:
                taken.add(node.name)
    name, i = base, 1
    while name in taken:
        name = f"{base}_{i}"
        i += 1
    taken.add(name)
    return name
