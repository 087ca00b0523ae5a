"""The element type (and, where known, shape) of every value in a model.

ORT sub-models need typed inputs and outputs at segment boundaries. onnx shape inference gives
most of them; the fused ops' output types follow from their contract (docs/ops.md), which fills
the gaps where inference stops at a custom-domain node.
"""

from __future__ import annotations

import onnx

from onnxfuse.ops import DOMAIN


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _tensor_type(elem: int) -> onnx.TypeProto:
    t = onnx.TypeProto()
    t.tensor_type.elem_type = elem
    return t


def value_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    light = _without_large_initializers(model)
    types: dict[str, onnx.TypeProto] = {}
    for t in model.graph.initializer:
        types[t.name] = _tensor_type(t.data_type)
    # Each round types the outputs of the fused ops inference could not reach and infers again,
    # so the standard ops after them get types too. One round per chain of fused ops at most.
    for _ in range(1 + sum(n.domain == DOMAIN for n in model.graph.node)):
        _collect(_infer(light), types)
        added = False
        for node in model.graph.node:
            if node.domain != DOMAIN or not node.output or node.output[0] in types:
                continue
            elem = fused_output_elem_type(node, types)
            if elem:
                types[node.output[0]] = _tensor_type(elem)
                light.graph.value_info.append(onnx.helper.make_tensor_value_info(node.output[0], elem, None))
                added = True
        if not added:
            break
    return types


def _infer(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # inference is best effort; the fused-op rules cover the boundaries
        return model


def _collect(inferred: onnx.ModelProto, types: dict[str, onnx.TypeProto]) -> None:
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type") and not vi.type.tensor_type.elem_type:
            continue
        if vi.type.ListFields() and (vi.name not in types or _rank_known(vi.type) and not _rank_known(types[vi.name])):
            types[vi.name] = vi.type


def _rank_known(t: onnx.TypeProto) -> bool:
    return t.HasField("tensor_type") and t.tensor_type.HasField("shape")


def _without_large_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy for inference only: big weights become typed graph inputs (their values are never
    needed to infer types; small ones such as Reshape shapes are kept)."""
    light = onnx.ModelProto(ir_version=model.ir_version)
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    g = light.graph
    g.name = model.graph.name
    g.node.extend(model.graph.node)
    g.input.extend(model.graph.input)
    g.output.extend(model.graph.output)
    g.value_info.extend(model.graph.value_info)
    declared = {i.name for i in model.graph.input}
    for t in model.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL and len(t.raw_data) <= 4096:
            g.initializer.append(t)
        elif t.name not in declared:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return light


def fused_output_elem_type(node: onnx.NodeProto, types: dict[str, onnx.TypeProto]) -> int | None:
    """The output element type of a fused op, per docs/ops.md."""
    if node.op_type in ("DequantGather", "Dequantize"):
        return _attr(node, "output_dtype")
    if node.op_type in ("DequantMatMul", "QuantizeDequantize") and node.input:
        t = types.get(node.input[0])
        if t is not None and t.HasField("tensor_type"):
            return t.tensor_type.elem_type
    return None
