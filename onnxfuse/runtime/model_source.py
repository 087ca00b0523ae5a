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
    return ModelSource(ir.serde.serialize_model(model), None, name)
