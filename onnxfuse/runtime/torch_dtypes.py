"""Conversions between torch, NumPy and ONNX element types (torch imported by the caller)."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import onnx


@functools.cache
def _table():
    import torch

    return {
        torch.float32: np.dtype(np.float32),
        torch.float64: np.dtype(np.float64),
        torch.float16: np.dtype(np.float16),
        torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
        torch.int8: np.dtype(np.int8),
        torch.int16: np.dtype(np.int16),
        torch.int32: np.dtype(np.int32),
        torch.int64: np.dtype(np.int64),
        torch.uint8: np.dtype(np.uint8),
        torch.uint16: np.dtype(np.uint16),
        torch.uint32: np.dtype(np.uint32),
        torch.uint64: np.dtype(np.uint64),
        torch.bool: np.dtype(np.bool_),
    }


def np_dtype_of_torch(dtype) -> np.dtype:
    return _table()[dtype]


def torch_dtype_of_np(dtype) -> "torch.dtype":
    dtype = np.dtype(dtype)
    for t, n in _table().items():
        if n == dtype:
            return t
    raise KeyError(f"no torch dtype for {dtype}")


def torch_dtype_of_onnx(elem_type: int) -> "torch.dtype":
    return torch_dtype_of_np(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def to_torch(array: np.ndarray, device=None) -> "torch.Tensor":
    """NumPy (including ml_dtypes bfloat16) to torch, without a copy on the CPU."""
    import torch

    a = np.ascontiguousarray(array)
    if not a.flags.writeable:  # torch wants writable memory; initializers are read-only views
        a = a.copy()
    if a.dtype == np.dtype(ml_dtypes.bfloat16):
        t = torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(a) if a.ndim else torch.tensor(a)
    return t.to(device) if device is not None else t


def to_numpy(t: "torch.Tensor") -> np.ndarray:
    import torch

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()
