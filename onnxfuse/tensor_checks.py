"""What a tensor in a hostile file could do before anything is allocated or opened.

Two things: a tensor's declared dims and type must match the bytes it really holds (a file
of a few bytes must not make onnxfuse allocate terabytes), and an external-data location must
stay inside the model's folder (no `..`, no absolute path, no symlink out, no device file).
Each check raises OnnxfuseError naming the file and the tensor.
"""

from __future__ import annotations

import math
import os
from typing import Iterator

import onnx

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError

SUB_BYTE_BITS = {
    onnx.TensorProto.INT4: 4,
    onnx.TensorProto.UINT4: 4,
    onnx.TensorProto.FLOAT4E2M1: 4,
    onnx.TensorProto.INT2: 2,
    onnx.TensorProto.UINT2: 2,
    onnx.TensorProto.FLOAT6E2M3: 6,
    onnx.TensorProto.FLOAT6E3M2: 6,
}


def all_tensors(model: onnx.ModelProto) -> Iterator[tuple[onnx.TensorProto, str]]:
    """Every TensorProto of a model (graph, subgraphs, function bodies), with a readable location."""
    yield from _graph_tensors(model.graph, "")
    for f in model.functions:
        yield from _node_tensors(f.node, f"function '{f.domain}.{f.name}'/")


def _graph_tensors(graph: onnx.GraphProto, prefix: str) -> Iterator[tuple[onnx.TensorProto, str]]:
    for t in graph.initializer:
        yield t, f"{prefix}initializer '{t.name}'"
    for s in graph.sparse_initializer:
        yield s.values, f"{prefix}sparse initializer '{s.values.name}' (values)"
        yield s.indices, f"{prefix}sparse initializer '{s.values.name}' (indices)"
    yield from _node_tensors(graph.node, prefix)


def _node_tensors(nodes, prefix: str) -> Iterator[tuple[onnx.TensorProto, str]]:
    for node in nodes:
        label = f"{prefix}node '{node.name or node.op_type}'"
        for attr in node.attribute:
            where = f"{label} attribute '{attr.name}'"
            if attr.HasField("t"):
                yield attr.t, where
            for t in attr.tensors:
                yield t, where
            if attr.HasField("sparse_tensor"):
                yield attr.sparse_tensor.values, where + " (values)"
                yield attr.sparse_tensor.indices, where + " (indices)"
            for s in attr.sparse_tensors:
                yield s.values, where + " (values)"
                yield s.indices, where + " (indices)"
            if attr.HasField("g"):
                yield from _graph_tensors(attr.g, f"{label}/")
            for g in attr.graphs:
                yield from _graph_tensors(g, f"{label}/")


def expected_nbytes(tensor: onnx.TensorProto) -> int | None:
    """Bytes the tensor's dims and type claim, or None for types without a fixed size."""
    numel = math.prod(tensor.dims)
    if tensor.data_type in SUB_BYTE_BITS:
        return math.ceil(numel * SUB_BYTE_BITS[tensor.data_type] / 8)
    if tensor.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        return None
    return numel * itemsize


def check_tensor(t: onnx.TensorProto, where: str, base_dir: str | None, file: str) -> None:
    """Refuse a tensor whose dims claim other bytes than it holds, or whose data lies elsewhere."""
    if any(d < 0 for d in t.dims):
        raise OnnxfuseError.of(codes.TENSOR_SIZE_MISMATCH, f"{where} has a negative dimension {list(t.dims)}", file=file, tensor=t.name)
    if t.data_type == onnx.TensorProto.UNDEFINED or t.data_type not in onnx.TensorProto.DataType.values():
        raise OnnxfuseError.of(codes.MODEL_INVALID, f"{where} has no valid data type (got {t.data_type})", file=file, tensor=t.name)
    want = expected_nbytes(t)
    if t.data_location == onnx.TensorProto.EXTERNAL:
        check_external(t, where, want, base_dir, file)
        return
    if t.data_type == onnx.TensorProto.STRING:
        if len(t.string_data) != math.prod(t.dims):
            raise OnnxfuseError.of(
                codes.TENSOR_SIZE_MISMATCH,
                f"{where} declares shape {list(t.dims)} ({math.prod(t.dims)} strings) but holds {len(t.string_data)}",
                file=file, tensor=t.name)
        return
    if want is None:
        return
    if t.HasField("raw_data"):
        if len(t.raw_data) != want:
            raise OnnxfuseError.of(
                codes.TENSOR_SIZE_MISMATCH,
                f"{where} declares shape {list(t.dims)} ({want} bytes) but holds {len(t.raw_data)} bytes",
                file=file, tensor=t.name)
        return
    entries = max(len(t.float_data), len(t.int32_data), len(t.int64_data), len(t.double_data), len(t.uint64_data))
    needed = _typed_entries_needed(t)
    if entries != needed:
        raise OnnxfuseError.of(
            codes.TENSOR_SIZE_MISMATCH,
            f"{where} declares shape {list(t.dims)} ({needed} values) but holds {entries}",
            file=file, tensor=t.name)


def _typed_entries_needed(t: onnx.TensorProto) -> int:
    """Entries of the typed repeated field that the dims claim (2- and 4-bit types pack a byte per entry)."""
    numel = math.prod(t.dims)
    bits = SUB_BYTE_BITS.get(t.data_type)
    if bits in (2, 4):
        return math.ceil(numel * bits / 8)
    if t.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128):
        return 2 * numel
    return numel


def _escapes(location: str) -> bool:
    norm = os.path.normpath(location)
    return (not location or "\0" in location or os.path.isabs(location) or norm == ".."
            or norm.startswith(".." + os.sep) or norm == ".")


def check_external(t: onnx.TensorProto, where: str, want: int | None, base_dir: str | None, file: str) -> None:
    info = {e.key: e.value for e in t.external_data}
    location = info.get("location", "")
    shown = location.replace("\0", "\\0")
    if base_dir is None:
        raise OnnxfuseError.of(
            codes.EXTERNAL_DATA_MISSING,
            f"{where} uses external data ('{shown}') but the model was given in memory; load it from its path",
            file=file, tensor=t.name)
    if _escapes(location):
        raise OnnxfuseError.of(
            codes.EXTERNAL_DATA_ESCAPES,
            f"{where} has external-data location '{shown}', which is outside the model's folder",
            file=file, tensor=t.name, hint="external data must live next to the model, under its folder")
    real_base = os.path.realpath(base_dir)
    target = os.path.realpath(os.path.join(real_base, os.path.normpath(location)))
    if os.path.commonpath([real_base, target]) != real_base:
        raise OnnxfuseError.of(
            codes.EXTERNAL_DATA_ESCAPES,
            f"{where} has external-data location '{location}', which resolves (through a symlink) outside the model's folder",
            file=file, tensor=t.name)
    if not os.path.isfile(target):  # also refuses FIFOs and devices, which could block or never end
        what = "is not a regular file" if os.path.exists(target) else "does not exist"
        raise OnnxfuseError.of(codes.EXTERNAL_DATA_MISSING, f"{where}: external-data file '{location}' {what}", file=file, tensor=t.name)
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise OnnxfuseError.of(codes.EXTERNAL_DATA_MISSING, f"{where}: external-data offset/length are not integers", file=file, tensor=t.name) from None
    size = os.path.getsize(target)
    if want is None:
        raise OnnxfuseError.of(codes.MODEL_INVALID, f"{where}: tensors of this data type cannot use external data", file=file, tensor=t.name)
    if length is not None and length != want:
        raise OnnxfuseError.of(
            codes.TENSOR_SIZE_MISMATCH,
            f"{where} declares shape {list(t.dims)} ({want} bytes) but its external data has length {length}",
            file=file, tensor=t.name)
    if offset < 0 or offset + want > size:
        raise OnnxfuseError.of(
            codes.EXTERNAL_DATA_MISSING,
            f"{where} needs bytes {offset}..{offset + want} of '{location}', which holds only {size}",
            file=file, tensor=t.name)
