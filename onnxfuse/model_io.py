"""Loading and saving models: the only place onnxfuse touches model files.

Loading checks what a hostile or broken file could do before anything is allocated: every
tensor's declared size against the bytes it really holds, and every external-data location
against the model's folder. External data stays memory-mapped (onnx-ir's ExternalTensor).
Saving is atomic: a temporary file in the target folder, then a rename.
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import Iterator

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError

# Above this many initializer bytes a model must use external data (protobuf's 2 GiB limit,
# with room for the graph itself).
EXTERNAL_DATA_THRESHOLD = 1536 * 1024**2

_SUB_BYTE_BITS = {
    onnx.TensorProto.INT4: 4,
    onnx.TensorProto.UINT4: 4,
    onnx.TensorProto.FLOAT4E2M1: 4,
    onnx.TensorProto.INT2: 2,
    onnx.TensorProto.UINT2: 2,
    onnx.TensorProto.FLOAT6E2M3: 6,
    onnx.TensorProto.FLOAT6E3M2: 6,
}


def load_model(src, *, name: str | None = None) -> ir.Model:
    """Load `src` (a path, onnx.ModelProto, onnx_ir.Model or onnx_graphsurgeon.Graph) as onnx_ir.

    Raises OnnxfuseError naming the file for anything unreadable, oversized or escaping.
    """
    if isinstance(src, ir.Model):
        return src
    if isinstance(src, onnx.ModelProto):
        return _from_proto(src, base_dir=None, file=name or "<ModelProto>")
    if type(src).__module__.startswith("onnx_graphsurgeon"):
        import onnx_graphsurgeon as gs  # only installed where pipelines use it

        return _from_proto(gs.export_onnx(src), base_dir=None, file=name or "<onnx_graphsurgeon.Graph>")
    if isinstance(src, (str, os.PathLike)):
        path = os.fspath(src)
        return _from_proto(load_proto(path), base_dir=os.path.dirname(os.path.abspath(path)), file=path)
    raise OnnxfuseError.of(
        codes.USAGE,
        f"cannot load a model from a {type(src).__name__}; pass a path, an onnx.ModelProto, "
        "an onnx_ir.Model or an onnx_graphsurgeon.Graph",
    )


def load_proto(path: str) -> onnx.ModelProto:
    """Parse the ModelProto at `path` without loading external data."""
    if not os.path.exists(path):
        raise OnnxfuseError.of(codes.FILE_NOT_FOUND, "no such file", file=path)
    if not os.path.isfile(path):
        raise OnnxfuseError.of(codes.FILE_UNREADABLE, "not a regular file", file=path)
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise OnnxfuseError.of(codes.FILE_UNREADABLE, f"cannot read the file: {e.strerror}", file=path) from e
    if not blob:
        raise OnnxfuseError.of(codes.NOT_ONNX, "the file is empty", file=path)
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(blob)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise OnnxfuseError.of(
            codes.NOT_ONNX, "not an ONNX model (protobuf parsing failed: the file is truncated or of another kind)", file=path
        ) from e
    # Random bytes sometimes parse as a protobuf message full of unknown fields.
    if proto.ir_version <= 0 or not proto.HasField("graph"):
        raise OnnxfuseError.of(codes.NOT_ONNX, "not an ONNX model (no ir_version or no graph)", file=path)
    return proto


def _from_proto(proto: onnx.ModelProto, *, base_dir: str | None, file: str) -> ir.Model:
    for tensor, where in _all_tensors(proto.graph):
        _check_tensor(tensor, where, base_dir, file)
    if not proto.opset_import:
        raise OnnxfuseError.of(codes.OPSET_INVALID, "the model has no opset_import", file=file)
    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as e:  # onnx-ir raises various types on malformed graphs
        raise OnnxfuseError.of(codes.MODEL_INVALID, f"the model cannot be read as an ONNX graph: {e}", file=file) from e
    if base_dir is not None:
        ir.external_data.set_base_dir(model.graph, base_dir)
    return model


def _all_tensors(graph: onnx.GraphProto, prefix: str = "") -> Iterator[tuple[onnx.TensorProto, str]]:
    """Every TensorProto in a graph and its subgraphs, with a readable location."""
    for t in graph.initializer:
        yield t, f"{prefix}initializer '{t.name}'"
    for t in graph.sparse_initializer:
        yield t.values, f"{prefix}sparse initializer '{t.values.name}'"
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t, f"{prefix}node '{node.name or node.op_type}' attribute '{attr.name}'"
            for t in attr.tensors:
                yield t, f"{prefix}node '{node.name or node.op_type}' attribute '{attr.name}'"
            if attr.HasField("g"):
                yield from _all_tensors(attr.g, f"{prefix}{node.name or node.op_type}/")
            for g in attr.graphs:
                yield from _all_tensors(g, f"{prefix}{node.name or node.op_type}/")


def expected_nbytes(tensor: onnx.TensorProto) -> int | None:
    """Bytes the tensor's dims and type claim, or None for types without a fixed size."""
    numel = math.prod(tensor.dims)
    if tensor.data_type in _SUB_BYTE_BITS:
        return math.ceil(numel * _SUB_BYTE_BITS[tensor.data_type] / 8)
    if tensor.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        return None
    return numel * itemsize


def _check_tensor(t: onnx.TensorProto, where: str, base_dir: str | None, file: str) -> None:
    if any(d < 0 for d in t.dims):
        raise OnnxfuseError.of(codes.TENSOR_SIZE_MISMATCH, f"{where} has a negative dimension {list(t.dims)}", file=file, tensor=t.name)
    want = expected_nbytes(t)
    if t.data_location == onnx.TensorProto.EXTERNAL:
        _check_external(t, where, want, base_dir, file)
        return
    if want is None:
        return
    if t.HasField("raw_data"):
        if len(t.raw_data) != want:
            raise OnnxfuseError.of(
                codes.TENSOR_SIZE_MISMATCH,
                f"{where} declares shape {list(t.dims)} ({want} bytes) but holds {len(t.raw_data)} bytes",
                file=file,
                tensor=t.name,
            )
        return
    entries = max(len(t.float_data), len(t.int32_data), len(t.int64_data), len(t.double_data), len(t.uint64_data))
    needed = _typed_entries_needed(t)
    if entries < needed:
        raise OnnxfuseError.of(
            codes.TENSOR_SIZE_MISMATCH,
            f"{where} declares shape {list(t.dims)} ({needed} values) but holds {entries}",
            file=file,
            tensor=t.name,
        )


def _typed_entries_needed(t: onnx.TensorProto) -> int:
    """Entries of the typed repeated field that the dims claim (2- and 4-bit types pack a byte per entry)."""
    numel = math.prod(t.dims)
    bits = _SUB_BYTE_BITS.get(t.data_type)
    if bits in (2, 4):
        return math.ceil(numel * bits / 8)
    if t.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128):
        return 2 * numel
    return numel


def _check_external(t: onnx.TensorProto, where: str, want: int | None, base_dir: str | None, file: str) -> None:
    info = {e.key: e.value for e in t.external_data}
    location = info.get("location", "")
    if base_dir is None:
        raise OnnxfuseError.of(
            codes.EXTERNAL_DATA_MISSING,
            f"{where} uses external data ('{location}') but the model was given in memory; load it from its path",
            file=file, tensor=t.name,
        )
    norm = os.path.normpath(location)
    if not location or os.path.isabs(location) or norm == ".." or norm.startswith(".." + os.sep):
        raise OnnxfuseError.of(
            codes.EXTERNAL_DATA_ESCAPES,
            f"{where} has external-data location '{location}', which is outside the model's folder",
            file=file, tensor=t.name,
            hint="external data must live next to the model, under its folder",
        )
    real_base = os.path.realpath(base_dir)
    target = os.path.realpath(os.path.join(real_base, norm))
    if os.path.commonpath([real_base, target]) != real_base:
        raise OnnxfuseError.of(
            codes.EXTERNAL_DATA_ESCAPES,
            f"{where} has external-data location '{location}', which resolves (through a symlink) outside the model's folder",
            file=file, tensor=t.name,
        )
    if not os.path.isfile(target):
        raise OnnxfuseError.of(codes.EXTERNAL_DATA_MISSING, f"{where}: external-data file '{location}' does not exist", file=file, tensor=t.name)
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise OnnxfuseError.of(codes.EXTERNAL_DATA_MISSING, f"{where}: external-data offset/length are not integers", file=file, tensor=t.name)
    size = os.path.getsize(target)
    need = length if length is not None else want
    if need is None:
        return
    if length is not None and want is not None and length != want:
        raise OnnxfuseError.of(
            codes.TENSOR_SIZE_MISMATCH,
            f"{where} declares shape {list(t.dims)} ({want} bytes) but its external data has length {length}",
            file=file, tensor=t.name,
        )
    if offset < 0 or offset + need > size:
        raise OnnxfuseError.of(
            codes.EXTERNAL_DATA_MISSING,
            f"{where} needs bytes {offset}..{offset + need} of '{location}', which holds only {size}",
            file=file, tensor=t.name,
        )


def initializer_bytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)


def _has_external(model: ir.Model) -> bool:
    return any(isinstance(v.const_value, ir.ExternalTensor) for v in model.graph.initializers.values())


def check_output_path(path: str, input_path: str | None = None) -> None:
    """Refuse an output path that cannot be written or would overwrite the input."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise OnnxfuseError.of(codes.OUTPUT_PATH_INVALID, f"the output folder '{folder}' does not exist", file=path)
    if os.path.isdir(path):
        raise OnnxfuseError.of(codes.OUTPUT_PATH_INVALID, "the output path is a directory", file=path)
    if input_path is not None and os.path.exists(path) and os.path.samefile(path, input_path):
        raise OnnxfuseError.of(
            codes.OUTPUT_PATH_INVALID, "the output path is the input file; onnxfuse never modifies its input", file=path,
            hint="write to another path, e.g. model.fused.onnx",
        )


def save_model(model: ir.Model, path: str, *, external_data: bool | None = None, input_path: str | None = None) -> None:
    """Write `model` to `path` atomically.

    external_data: True writes every large initializer to `<name>.data` beside the model; None
    decides (on when the weights exceed EXTERNAL_DATA_THRESHOLD or the model already used
    external data); False keeps everything inline.
    """
    path = os.fspath(path)
    check_output_path(path, input_path)
    if external_data is None:
        external_data = _has_external(model) or initializer_bytes(model) > EXTERNAL_DATA_THRESHOLD
    data_name = os.path.basename(path) + ".data" if external_data else None
    if data_name:
        target = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(path)), data_name))
        for v in model.graph.initializers.values():
            t = v.const_value
            if isinstance(t, ir.ExternalTensor) and os.path.realpath(t.path) == target:
                raise OnnxfuseError.of(
                    codes.OUTPUT_PATH_INVALID,
                    f"writing '{data_name}' would overwrite the external data that tensor '{v.name}' is read from",
                    file=path,
                )
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        # The external-data location is relative to the folder, so it is right for the final name
        # too; onnx-ir writes the data file itself atomically.
        ir.save(model, tmp, format="protobuf", external_data=data_name)
        os.replace(tmp, path)
    except OnnxfuseError:
        raise
    except (OSError, ValueError) as e:
        raise OnnxfuseError.of(codes.WRITE_FAILED, f"cannot write the model: {e}", file=path) from e
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
