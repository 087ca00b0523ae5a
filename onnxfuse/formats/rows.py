"""The row layout of docs/ops.md: how every fused op stores a quantized tensor.

A tensor blocked along `axis` becomes rows: the axis moved last, the other axes flattened in
their order, so data is [R, K] codes packed per row into uint8 [R, Kb], and scales (and zero
points) are [R, G] with G = ceil(K / block_size). `decode_rows` is the reference value of
the layout that kernels, function bodies and passes are tested against.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.formats.elements import ElementFormat, element_format
from onnxfuse.formats.reference import blocked_scale_shape, normalize_axis
from onnxfuse.formats.scales import ScaleFormat, scale_format


@dataclasses.dataclass(frozen=True, eq=False)
class RowPacked:
    data: np.ndarray  # uint8 [R, Kb]
    scale: np.ndarray  # storage dtype [R, G]
    zero_point: np.ndarray | None  # uint8 codes [R, G]
    K: int
    block_size: int
    element: ElementFormat | None = None
    scale_format: ScaleFormat | None = None
    global_scale: np.ndarray | None = None  # float32 [], two-level scales
    shape: tuple[int, ...] | None = None  # the original tensor's dims
    axis: int | None = None  # the blocked axis of the original tensor, non-negative

    @property
    def rows(self) -> int:
        return self.data.shape[0]

    def decode(self) -> np.ndarray:
        """float32 [R, K]: decode_rows of this tensor."""
        return decode_rows(self.data, self.scale, self.zero_point, K=self.K, block_size=self.block_size,
                           element=self.element, scale=self.scale_format, global_scale=self.global_scale)

    def decode_original(self) -> np.ndarray:
        """float32 in the original shape (needs shape and axis)."""
        return from_rows(self.decode(), self.shape, self.axis)


def to_rows(array, axis: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """Move `axis` last and flatten the others in order: [R, K]. Works for codes, values,
    scales and zero points alike. Returns (rows, moved_shape): moved_shape is the shape with
    `axis` moved last, before flattening (rows.reshape(moved_shape) undoes the flattening)."""
    a = np.asarray(array)
    if a.ndim == 0:
        raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, "a scalar has no rows")
    axis = normalize_axis(axis, a.ndim)
    moved = np.moveaxis(a, axis, -1)
    return np.ascontiguousarray(moved).reshape(-1, moved.shape[-1]), tuple(moved.shape)


def from_rows(rows, shape, axis: int) -> np.ndarray:
    """Inverse of to_rows: [R, K] back to the original `shape` blocked along `axis`."""
    shape = tuple(int(d) for d in shape)
    axis = normalize_axis(axis, len(shape))
    moved = shape[:axis] + shape[axis + 1:] + (shape[axis],)
    return np.moveaxis(np.asarray(rows).reshape(moved), -1, axis)


def pack_rows(codes_2d: np.ndarray, element: ElementFormat) -> np.ndarray:
    """uint8 codes [R, K] -> uint8 [R, Kb], each row packed as ONNX packs a flat buffer
    (float6: one code per byte). Padding bits at the end of a row are zero."""
    element = element_format(element)
    c = np.asarray(codes_2d, dtype=np.uint8)
    if c.ndim != 2:
        raise ValueError(f"pack_rows expects [R, K] codes, got shape {list(c.shape)}")
    c = c & np.uint8(element.code_mask)
    per_byte = element.row_codes_per_byte
    if per_byte == 1:
        return np.ascontiguousarray(c)
    R, K = c.shape
    Kb = element.row_bytes(K)
    padded = np.zeros((R, Kb * per_byte), np.uint8)
    padded[:, :K] = c
    groups = padded.reshape(R, Kb, per_byte)
    out = np.zeros((R, Kb), np.uint8)
    for i in range(per_byte):
        out |= groups[:, :, i] << np.uint8(element.bits * i)
    return out


def unpack_rows(packed: np.ndarray, K: int, element: ElementFormat) -> np.ndarray:
    """Inverse of pack_rows: uint8 [R, Kb] -> codes [R, K]."""
    element = element_format(element)
    p = np.asarray(packed, dtype=np.uint8)
    Kb = element.row_bytes(K)
    if p.ndim != 2 or p.shape[1] != Kb:
        raise ValueError(f"{element.name} rows of K={K} need shape [R, {Kb}], got {list(p.shape)}")
    per_byte = element.row_codes_per_byte
    if per_byte == 1:
        return p & np.uint8(element.code_mask)
    mask = np.uint8(element.code_mask)
    out = np.empty((p.shape[0], Kb, per_byte), np.uint8)
    for i in range(per_byte):
        out[:, :, i] = (p >> np.uint8(element.bits * i)) & mask
    return out.reshape(p.shape[0], Kb * per_byte)[:, :K]


def expand_blocks(per_block: np.ndarray, K: int, block_size: int) -> np.ndarray:
    """[R, G] -> [R, K]: repeat each block's value over its (possibly ragged) block."""
    return np.repeat(per_block, block_size, axis=1)[:, :K]


def decode_rows(packed, scale_stored, zero_point, *, K: int, block_size: int, element, scale,
                global_scale=None) -> np.ndarray:
    """The decoded value of docs/ops.md, float32 [R, K]:

        w[r, k] = (decode(code[r, k]) - decode(zp[r, k // bs])) * decode(scale[r, k // bs]) * global_scale

    evaluated left to right in float32 (the zero point term only for integer formats).
    `element` and `scale` are formats or their names.
    """
    element = element_format(element)
    sfmt = scale_format(scale)
    if block_size <= 0:
        raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, f"block_size must be > 0, got {block_size}")
    values = element.lut[unpack_rows(packed, K, element)]
    R = values.shape[0]
    G = math.ceil(K / block_size)
    s = sfmt.decode(scale_stored)
    if s.shape != (R, G):
        raise OnnxfuseError.of(codes.SCALE_SHAPE_MISMATCH,
                               f"row scales for [{R}, K={K}] in blocks of {block_size} must be [{R}, {G}], got {list(s.shape)}")
    if zero_point is not None:
        zp = np.asarray(zero_point, dtype=np.uint8)
        if zp.shape != (R, G):
            raise OnnxfuseError.of(codes.ZERO_POINT_SHAPE_MISMATCH,
                                   f"row zero points must be [{R}, {G}], got {list(zp.shape)}")
        zp_values = element.lut[zp & np.uint8(element.code_mask)]
        if element.is_float:
            if np.any(zp_values != 0):
                raise OnnxfuseError.of(codes.ZERO_POINT_FLOAT_FORMAT, f"{element.name} rows cannot have a non-zero zero point")
        else:
            values = values - expand_blocks(zp_values, K, block_size)
    with np.errstate(all="ignore"):
        out = values * expand_blocks(s, K, block_size)
        if global_scale is not None:
            out = out * np.float32(np.asarray(global_scale, dtype=np.float32).reshape(()))
    return out


def pack_quantized(data, scale, zero_point=None, *, axis: int, block_size: int, global_scale=None) -> RowPacked:
    """A blocked Q/DQ tensor (np_dtype arrays as onnx.numpy_helper gives them: data, its
    block scale of the data's rank, optional zero point, optional two-level global scale)
    -> the row layout."""
    data = np.asarray(data)
    scale = np.asarray(scale)
    element = element_format(data.dtype)
    sfmt = scale_format(scale.dtype)
    axis = normalize_axis(axis, data.ndim)
    expected = blocked_scale_shape(data.shape, axis, block_size)
    if scale.shape != expected:
        raise OnnxfuseError.of(codes.SCALE_SHAPE_MISMATCH,
                               f"block scale must have shape {list(expected)}, got {list(scale.shape)}")
    code_rows, _ = to_rows(element.codes_of(data), axis)
    scale_rows, _ = to_rows(sfmt.to_storage(scale), axis)
    zp_rows = None
    if zero_point is not None:
        zp = np.asarray(zero_point)
        if zp.shape != expected or zp.dtype != element.np_dtype:
            raise OnnxfuseError.of(codes.ZERO_POINT_SHAPE_MISMATCH,
                                   f"zero point must be {element.name} {list(expected)}, got {zp.dtype} {list(zp.shape)}")
        zp_rows, _ = to_rows(element.codes_of(zp), axis)
    gs = None if global_scale is None else np.asarray(global_scale, dtype=np.float32).reshape(())
    return RowPacked(pack_rows(code_rows, element), scale_rows, zp_rows, int(data.shape[axis]), int(block_size),
                     element, sfmt, gs, tuple(int(d) for d in data.shape), axis)
