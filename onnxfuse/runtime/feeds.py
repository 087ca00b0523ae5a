"""Graph inputs and outputs as onnxruntime describes them, and checking the feeds against them.

Feeds may be NumPy arrays (or anything `np.asarray` takes) or torch tensors. Wrong names, dtypes
and shapes are refused with OnnxfuseError(INPUT_INVALID) before any backend runs, with the
sentences onnxruntime would give plus what was expected.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import onnx

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError


@dataclasses.dataclass(frozen=True)
class IOInfo:
    """Like onnxruntime.NodeArg: name, type ("tensor(float16)") and shape (ints, names or None)."""

    name: str
    type: str
    shape: list | None  # None when the rank is unknown; [] for a scalar
    elem_type: int  # onnx.TensorProto enum, 0 when not a tensor

    @property
    def np_dtype(self) -> np.dtype | None:
        return elem_np_dtype(self.elem_type)


_TYPE_NAMES = {
    onnx.TensorProto.FLOAT: "float",
    onnx.TensorProto.DOUBLE: "double",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.BFLOAT16: "bfloat16",
    onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.INT16: "int16",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.UINT16: "uint16",
    onnx.TensorProto.UINT32: "uint32",
    onnx.TensorProto.UINT64: "uint64",
    onnx.TensorProto.BOOL: "bool",
    onnx.TensorProto.STRING: "string",
}


def type_name(elem_type: int) -> str:
    name = _TYPE_NAMES.get(elem_type) or onnx.TensorProto.DataType.Name(elem_type).lower()
    return f"tensor({name})"


def elem_np_dtype(elem_type: int) -> np.dtype | None:
    if not elem_type:
        return None
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        return None


def io_infos(values) -> list[IOInfo]:
    out = []
    for vi in values:
        tt = vi.type.tensor_type
        shape = None  # unknown rank
        if tt.HasField("shape"):
            shape = []
            for d in tt.shape.dim:
                shape.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
        out.append(IOInfo(vi.name, type_name(tt.elem_type) if tt.elem_type else "unknown", shape, tt.elem_type))
    return out


def graph_inputs(model: onnx.ModelProto) -> list[IOInfo]:
    """Inputs a caller must feed: initializers listed as inputs (overridable constants) are left out,
    as onnxruntime does for get_inputs()."""
    inits = {t.name for t in model.graph.initializer}
    return io_infos(vi for vi in model.graph.input if vi.name not in inits)


def graph_outputs(model: onnx.ModelProto) -> list[IOInfo]:
    return io_infos(model.graph.output)


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def feed_dtype_and_shape(x: Any) -> tuple[np.dtype | str, tuple[int, ...]]:
    if _is_torch(x):
        from onnxfuse.runtime.torch_dtypes import np_dtype_of_torch

        return np_dtype_of_torch(x.dtype), tuple(x.shape)
    a = np.asarray(x)
    return a.dtype, a.shape


def check_feeds(inputs: list[IOInfo], feeds: Mapping[str, Any], *, file: str | None = None) -> None:
    if not isinstance(feeds, Mapping):
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"feeds must be a dict of input name to array, not {type(feeds).__name__}", file=file)
    known = {i.name: i for i in inputs}
    for name in feeds:
        if name not in known:
            raise OnnxfuseError.of(
                codes.INPUT_INVALID, f"Invalid input name: {name}", tensor=name, file=file,
                hint=f"the model's inputs are {', '.join(known) or '(none)'}",
            )
    missing = [n for n in known if n not in feeds]
    if missing:
        raise OnnxfuseError.of(
            codes.INPUT_INVALID, f"Required inputs ({', '.join(missing)}) are missing from input feeds.", file=file,
            tensor=missing[0],
        )
    for name, value in feeds.items():
        info = known[name]
        dtype, shape = feed_dtype_and_shape(value)
        want = info.np_dtype
        if want is not None and np.dtype(dtype) != want:
            got = type_name(onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))) if _known_np(dtype) else str(dtype)
            raise OnnxfuseError.of(
                codes.INPUT_INVALID,
                f"Unexpected input data type for '{name}'. Actual: ({got}), expected: ({info.type})",
                tensor=name, file=file,
                hint=f"convert it, e.g. x.astype(np.{want.name})" if want.kind != "V" else None,
            )
        if info.shape is not None:
            if len(shape) != len(info.shape):
                raise OnnxfuseError.of(
                    codes.INPUT_INVALID,
                    f"Invalid rank for input: {name} Got: {len(shape)} Expected: {len(info.shape)} "
                    f"(expected shape {_fmt_shape(info.shape)}, got {list(shape)})",
                    tensor=name, file=file,
                )
            bad = [i for i, (g, w) in enumerate(zip(shape, info.shape)) if isinstance(w, int) and g != w]
            if bad:
                raise OnnxfuseError.of(
                    codes.INPUT_INVALID,
                    f"Got invalid dimensions for input: {name} for the following indices "
                    + ", ".join(f"index: {i} Got: {shape[i]} Expected: {info.shape[i]}" for i in bad)
                    + f" (expected shape {_fmt_shape(info.shape)})",
                    tensor=name, file=file,
                )


def _known_np(dtype) -> bool:
    try:
        onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        return True
    except (KeyError, ValueError, TypeError):
        return False


def _fmt_shape(shape: list) -> str:
    return "[" + ", ".join(str(d) if d is not None else "?" for d in shape) + "]"
