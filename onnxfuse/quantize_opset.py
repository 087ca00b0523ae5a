"""Raising a model's default-domain opset to what a quantization scheme needs."""

from __future__ import annotations

import onnx
import onnx.defs
import onnx.version_converter
import onnx_ir as ir

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError


def _changed_ops(model: ir.Model, current: int, target: int) -> list[str]:
    """Default-domain ops whose schema changes between the two opsets (so a bump alone may be wrong)."""
    changed = set()
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.domain != "":
            continue
        try:
            before = onnx.defs.get_schema(node.op_type, current).since_version
            after = onnx.defs.get_schema(node.op_type, target).since_version
        except onnx.defs.SchemaError:
            continue  # unknown ops are left to onnx.checker to report
        if before != after:
            changed.add(node.op_type)
    return sorted(changed)


def raise_opset(model: ir.Model, target: int) -> ir.Model:
    """Return `model` with default-domain opset >= target (the same object when only the import changes).

    When no op's schema differs between the two versions the import is just raised: that keeps
    large models memory-mapped. Otherwise onnx.version_converter rewrites the ops; initializers
    stored outside the file stay references to it.
    """
    current = model.opset_imports.get("", 1)
    if current >= target:
        return model
    if not _changed_ops(model, current, target):
        model.opset_imports[""] = target
        return model
    proto = ir.to_proto(model)
    try:
        converted = onnx.version_converter.convert_version(proto, target)
    except Exception as e:  # the converter raises bare RuntimeErrors for unsupported adapters
        raise OnnxfuseError.of(
            codes.OPSET_INVALID,
            f"the model's opset {current} cannot be converted to opset {target}, which the scheme needs: {e}",
            hint="export the float model at a newer opset",
        ) from e
    new = ir.from_proto(converted)
    base_dirs = {
        t.base_dir for v in model.graph.initializers.values() if isinstance((t := v.const_value), ir.ExternalTensor)
    }
    if base_dirs:
        ir.external_data.set_base_dir(new.graph, next(iter(base_dirs)))
    return new
