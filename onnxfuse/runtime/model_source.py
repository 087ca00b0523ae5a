"""Turn what a caller passes (a path, ModelProto, onnx_ir.Model, graphsurgeon Graph) into a ModelProto.

Loading goes through onnxfuse.model_io, which checks sizes and external-data locations first.
The runtime works on protobuf because that is what onnxruntime consumes.
"""

from __future__ import annotations

import dataclasses
import os

import onnx
import onnx_ir as ir

from onnxfuse import model_io
import onnxfuse.ops  # noqa: F401  (registers the fused ops' schemas, so inference knows them)


@dataclasses.dataclass
class ModelSource:
    proto: onnx.ModelProto
    path: str | None  # set when loaded from a file: ORT can then read external data itself
    name: str  # for messages

    def inline_external_data(self) -> onnx.ModelProto:
        """self.proto with every external initializer read into memory (the triton backend
        hands initializers to the kernels and to ORT sub-models, which have no base folder)."""
        if self.path is not None:
            _inline(self.proto, lambda _t: os.path.dirname(os.path.abspath(self.path)))
        missing = [t.name for t in self.proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
        if missing:
            from onnxfuse import codes
            from onnxfuse.diagnostics import OnnxfuseError

            raise OnnxfuseError.of(
                codes.INPUT_INVALID,
                f"{len(missing)} initializer(s) of this ModelProto live in external files whose folder is unknown "
                f"(first: {missing[0]})", file=self.name,
                hint="pass the model's path, or load the external data first "
                "(onnx.load(path) or onnx.external_data_helper.load_external_data_for_model)",
            )
        return self.proto


def _inline(proto: onnx.ModelProto, base_dir_of) -> None:
    from onnx import external_data_helper

    for t in proto.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            base = base_dir_of(t)
            if base is None:
                continue
            external_data_helper.load_external_data_for_tensor(t, base)
            t.data_location = onnx.TensorProto.DEFAULT
            del t.external_data[:]


def _serialize_inlined(model: ir.Model) -> onnx.ModelProto:
    """The proto of an onnx_ir model, external tensors read from their own base folders."""
    base = {v.name: v.const_value.base_dir for v in model.graph.initializers.values()
            if isinstance(v.const_value, ir.ExternalTensor)}
    proto = ir.serde.serialize_model(model)
    _inline(proto, lambda t: base.get(t.name))
    return proto


def load_source(src) -> ModelSource:
    if isinstance(src, (str, os.PathLike)):
        path = os.fspath(src)
        model = model_io.load_model(path)
        return ModelSource(ir.serde.serialize_model(model), path, path)
    if isinstance(src, onnx.ModelProto):
        # validated like a file, but the caller's proto itself is what runs
        model_io.load_model(src)
        return ModelSource(src, None, "<ModelProto>")
    model = model_io.load_model(src)
    name = "<onnx_ir.Model>" if isinstance(src, ir.Model) else f"<{type(src).__name__}>"
    return ModelSource(_serialize_inlined(model), None, name)
