"""Bit packing of raw element codes: ONNX's flat packings and the fused ops' row packing.

Codes are always uint8 arrays holding one raw bit pattern per element (two's complement for
signed integers, masked to the element's width). Packing never looks at values, only bits.
"""

from __future__ import annotations

import math

import numpy as np


def pack_subbyte(codes: np.ndarray, bits: int) -> np.ndarray:
    """Flat uint8 codes of 1, 2 or 4 bits -> bytes, element i of each byte-group LSB first.

    This is ONNX's packing for int4/uint4/float4e2m1 (low nibble first) and int2/uint2
    (bits 2i..2i+1); the padding bits of the last byte are zero.
    """
    if bits == 8:
        return np.ascontiguousarray(codes, dtype=np.uint8).ravel().copy()
    per_byte = 8 // bits
    flat = np.asarray(codes, dtype=np.uint8).ravel() & np.uint8((1 << bits) - 1)
    pad = -flat.size % per_byte
    if pad:
        flat = np.concatenate([flat, np.zeros(pad, np.uint8)])
    groups = flat.reshape(-1, per_byte)
    out = np.zeros(groups.shape[0], np.uint8)
    for i in range(per_byte):
        out |= groups[:, i] << np.uint8(bits * i)
    return out


def unpack_subbyte(packed: np.ndarray, count: int, bits: int) -> np.ndarray:
    """Inverse of pack_subbyte: the first `count` codes of a flat packed buffer."""
    flat = np.asarray(packed, dtype=np.uint8).ravel()
    if bits == 8:
        _check_size(flat.size, count, count)
        return flat[:count].copy()
    per_byte = 8 // bits
    needed = math.ceil(count / per_byte)
    _check_size(flat.size, needed, count)
    mask = np.uint8((1 << bits) - 1)
    out = np.empty((needed, per_byte), np.uint8)
    for i in range(per_byte):
        out[:, i] = (flat[:needed] >> np.uint8(bits * i)) & mask
    return out.reshape(-1)[:count]


def pack_6bit(codes: np.ndarray) -> np.ndarray:
    """ONNX's float6 packing: a LSB-first bit stream, four 6-bit codes in three bytes,
    ceil(6 n / 8) bytes in all (as onnx.numpy_helper writes raw_data)."""
    flat = np.asarray(codes, dtype=np.uint8).ravel() & np.uint8(0x3F)
    n = flat.size
    pad = -n % 4
    if pad:
        flat = np.concatenate([flat, np.zeros(pad, np.uint8)])
    v0, v1, v2, v3 = (flat[i::4] for i in range(4))
    out = np.empty((v0.size, 3), np.uint8)
    out[:, 0] = v0 | (v1 << 6)
    out[:, 1] = (v1 >> 2) | (v2 << 4)
    out[:, 2] = (v2 >> 4) | (v3 << 2)
    return out.reshape(-1)[: math.ceil(n * 6 / 8)]


def unpack_6bit(packed: np.ndarray, count: int) -> np.ndarray:
    """Inverse of pack_6bit."""
    flat = np.asarray(packed, dtype=np.uint8).ravel()
    needed = math.ceil(count * 6 / 8)
    _check_size(flat.size, needed, count)
    groups = math.ceil(count / 4)
    buf = np.zeros(groups * 3, np.uint8)
    buf[:needed] = flat[:needed]
    b0, b1, b2 = buf[0::3], buf[1::3], buf[2::3]
    out = np.empty((groups, 4), np.uint8)
    out[:, 0] = b0 & 0x3F
    out[:, 1] = (b0 >> 6) | ((b1 & 0x0F) << 2)
    out[:, 2] = (b1 >> 4) | ((b2 & 0x03) << 4)
    out[:, 3] = b2 >> 2
    return out.reshape(-1)[:count]


def _check_size(have: int, need: int, count: int) -> None:
    if have < need:
        raise ValueError(f"packed buffer has {have} bytes; {count} codes need {need}")
