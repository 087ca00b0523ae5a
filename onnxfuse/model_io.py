"""Loading and saving models: the only place onnxfuse touches model files.

Loading checks what a hostile or broken file could do before anything is allocated
(onnxfuse/tensor_checks.py: declared sizes against real bytes, external data kept inside the
model's folder) and, with `check=True`, that the graph is one the passes can walk
(onnxfuse/graph_integrity.py: opsets, unknown ops, SSA, dangling names, cycles). External data
stays memory-mapped (onnx-ir's ExternalTensor). Saving is atomic (onnxfuse/atomic_write.py).
"""

from __future__ import annotations

import os

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from onnxfuse import atomic_write, codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.graph_integrity import graph_problems
from onnxfuse.tensor_checks import all_tensors, check_tensor, expected_nbytes  # noqa: F401 (re-exported)

# Above this many initializer bytes a model must use external data (protobuf's 2 GiB limit,
# with room for the graph itself).
EXTERNAL_DATA_THRESHOLD = 1536 * 1024**2
# A serialized ModelProto cannot exceed 2 GiB; a bigger "model" file is not one, and reading it
# whole would only exhaust memory.
MAX_PROTO_BYTES = 2**31 - 1


def load_model(src, *, name: str | None = None, check: bool = True) -> ir.Model:
    """Load `src` (a path, onnx.ModelProto, onnx_ir.Model or onnx_graphsurgeon.Graph) as onnx_ir.

    Sizes and external-data locations are always checked; `check=True` also checks the graph's
    structure (opset imports, unknown ops, SSA, dangling names, cycles). An onnx_ir.Model is
    returned as it is. Raises OnnxfuseError naming the file for anything unreadable, oversized,
    escaping or malformed.
    """
    if isinstance(src, ir.Model):
        return src
    if isinstance(src, onnx.ModelProto):
        return _from_proto(src, base_dir=None, file=name or "<ModelProto>", check=check)
    if type(src).__module__.startswith("onnx_graphsurgeon"):
        import onnx_graphsurgeon as gs  # only installed where pipelines use it

        return _from_proto(gs.export_onnx(src), base_dir=None, file=name or "<onnx_graphsurgeon.Graph>", check=check)
    if isinstance(src, (str, os.PathLike)):
        path = os.fspath(src)
        return _from_proto(load_proto(path), base_dir=os.path.dirname(os.path.abspath(path)), file=path, check=check)
    raise OnnxfuseError.of(
        codes.USAGE,
        f"cannot load a model from a {type(src).__name__}; pass a path, an onnx.ModelProto, "
        "an onnx_ir.Model or an onnx_graphsurgeon.Graph",
    )


def load_proto(path: str) -> onnx.ModelProto:
    """Parse the ModelProto at `path` without loading external data."""
    if "\0" in path:
        raise OnnxfuseError.of(codes.FILE_NOT_FOUND, "the path contains a NUL byte", file=path.replace("\0", "\\0"))
    if not os.path.exists(path):
        raise OnnxfuseError.of(codes.FILE_NOT_FOUND, "no such file", file=path)
    if not os.path.isfile(path):  # directories, FIFOs and devices: reading could block or never end
        raise OnnxfuseError.of(codes.FILE_UNREADABLE, "not a regular file", file=path)
    size = os.path.getsize(path)
    if size > MAX_PROTO_BYTES:
        raise OnnxfuseError.of(
            codes.NOT_ONNX, f"the file holds {size} bytes, more than a protobuf ModelProto can (2 GiB)", file=path,
            hint="a model this large keeps its weights in external data files")
    try:
        with open(path, "rb") as f:
            blob = f.read(size)  # read(n) allocates n bytes up front: ask for what the file holds
    except OSError as e:
        raise OnnxfuseError.of(codes.FILE_UNREADABLE, f"cannot read the file: {e.strerror}", file=path) from e
    if not blob:
        raise OnnxfuseError.of(codes.NOT_ONNX, "the file is empty", file=path)
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(blob)
    except (DecodeError, RuntimeError, ValueError, RecursionError) as e:
        raise OnnxfuseError.of(
            codes.NOT_ONNX, "not an ONNX model (protobuf parsing failed: the file is truncated or of another kind)", file=path
        ) from e
    # Random bytes sometimes parse as a protobuf message full of unknown fields.
    if proto.ir_version <= 0 or not proto.HasField("graph"):
        raise OnnxfuseError.of(codes.NOT_ONNX, "not an ONNX model (no ir_version or no graph)", file=path)
    return proto


def _from_proto(proto: onnx.ModelProto, *, base_dir: str | None, file: str, check: bool) -> ir.Model:
    for tensor, where in all_tensors(proto):
        check_tensor(tensor, where, base_dir, file)
    problems = graph_problems(proto, file) if check else []
    if not proto.opset_import and not problems:
        raise OnnxfuseError.of(codes.OPSET_INVALID, "the model has no opset_import", file=file)
    if any(d.is_error for d in problems):
        raise OnnxfuseError(problems)
    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as e:  # onnx-ir raises various types on malformed graphs
        raise OnnxfuseError.of(codes.MODEL_INVALID, f"the model cannot be read as an ONNX graph: {_cause(e)}", file=file) from e
    if base_dir is not None:
        ir.external_data.set_base_dir(model.graph, base_dir)
        for graph in model.graphs():
            ir.external_data.set_base_dir(graph, base_dir)
    return model


def _cause(e: BaseException) -> str:
    """The innermost message of onnx-ir's chained SerdeErrors, which is the one that says why."""
    while e.__cause__ is not None:
        e = e.__cause__
    return f"{type(e).__name__}: {e}"


def initializer_bytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for g in model.graphs() for v in g.initializers.values() if v.const_value is not None)


def has_external_data(model: ir.Model) -> bool:
    return any(isinstance(v.const_value, ir.ExternalTensor) for g in model.graphs() for v in g.initializers.values())


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)
    except OSError:
        return False


def _input_files(input_path: str) -> list[str]:
    """The input model and every external-data file it names (all must stay untouched)."""
    files = [input_path]
    try:
        proto = onnx.load(input_path, load_external_data=False)
    except Exception:  # noqa: BLE001 - unreadable input: only the model file itself to protect
        return files
    folder = os.path.dirname(os.path.abspath(input_path))
    for t, _ in all_tensors(proto):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            loc = {e.key: e.value for e in t.external_data}.get("location")
            if loc and "\0" not in loc:
                files.append(os.path.join(folder, loc))
    return files


def check_output_path(path: str, input_path: str | None = None, *, avoid: tuple[str, ...] | list[str] = ()) -> None:
    """Refuse an output path that cannot be written or would overwrite the input or its data.

    avoid: other outputs of the same run that this one must not replace (e.g. for a report
    path: the model output and its `.data`).
    """
    if "\0" in path:
        raise OnnxfuseError.of(codes.OUTPUT_PATH_INVALID, "the output path contains a NUL byte", file=path.replace("\0", "\\0"))
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise OnnxfuseError.of(codes.OUTPUT_PATH_INVALID, f"the output folder '{folder}' does not exist", file=path)
    if os.path.isdir(path):
        raise OnnxfuseError.of(codes.OUTPUT_PATH_INVALID, "the output path is a directory", file=path)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OnnxfuseError.of(codes.OUTPUT_PATH_INVALID, f"the output folder '{folder}' is not writable", file=path)
    for other in avoid:
        if os.path.abspath(other) == os.path.abspath(path) or _same_file(path, other):
            raise OnnxfuseError.of(codes.OUTPUT_PATH_INVALID, f"this path is also the output '{other}'", file=path,
                                   hint="give each output its own path")
    if input_path is not None:
        data = path + ".data"
        for f in _input_files(input_path):
            if _same_file(path, f) or _same_file(data, f):
                what = "the input file" if f == input_path else f"the input's external data '{f}'"
                raise OnnxfuseError.of(
                    codes.OUTPUT_PATH_INVALID, f"writing here would overwrite {what}; onnxfuse never modifies its input",
                    file=path, hint="write to another path, e.g. model.fused.onnx")


def save_model(model: ir.Model, path: str, *, external_data: bool | None = None, input_path: str | None = None) -> None:
    """Write `model` to `path` atomically (with its external data, if any, as one unit).

    external_data: True writes every large initializer to `<name>.data` beside the model; None
    decides (on when the weights exceed EXTERNAL_DATA_THRESHOLD or the model already used
    external data); False keeps everything inline. input_path: the model's source file, which
    (with its external data) is never overwritten.
    """
    path = os.fspath(path)
    check_output_path(path, input_path)
    if external_data is None:
        external_data = has_external_data(model) or initializer_bytes(model) > EXTERNAL_DATA_THRESHOLD
    name = os.path.basename(path)
    data_name = name + ".data" if external_data else None
    if data_name:
        target = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(path)), data_name))
        for g in model.graphs():
            for v in g.initializers.values():
                t = v.const_value
                if isinstance(t, ir.ExternalTensor) and os.path.realpath(t.path) == target:
                    raise OnnxfuseError.of(
                        codes.OUTPUT_PATH_INVALID,
                        f"writing '{data_name}' would overwrite the external data that tensor '{v.name}' is read from",
                        file=path)
    try:
        with atomic_write.staging_folder(path) as stage:
            staged = os.path.join(stage, name)
            # The external-data location is relative to the model's folder, so it stays right
            # once both files are renamed from the staging folder into place.
            ir.save(model, staged, format="protobuf", external_data=data_name)
            staged_data = os.path.join(stage, data_name) if data_name else None
            # onnx-ir writes no data file when every tensor is under its size threshold.
            pairs = [(staged_data, os.path.join(os.path.dirname(path), data_name))] if staged_data and os.path.exists(staged_data) else []
            atomic_write.commit(pairs + [(staged, path)])
    except OnnxfuseError:
        raise
    except (OSError, ValueError) as e:
        raise OnnxfuseError.of(codes.WRITE_FAILED, f"cannot write the model: {e}", file=path) from e
