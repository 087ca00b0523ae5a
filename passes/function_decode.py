"""Decode recipes for function bodies: row-layout codes, zero points and scales -> float32.

`b` is a passes.function_builder.BodyBuilder. Only standard ops onnxruntime CPU and CUDA implement, and every step exact:
- codes: one Gather per byte into a [256, codes_per_byte] float32 table built from the
  element's LUT (a byte holds 2 nibbles, 4 two-bit fields or one code; float6 uses the low 6
  bits), so no bit ops are needed at all; then reshape to [R, Kb * per] and slice to K;
- scales: float16 Cast; bfloat16 bits by an exact exponent/mantissa split (below);
  float8e8m0 and float8e4m3fn codes through a 256-entry table (E8M0 0xFF -> NaN);
- block scales are repeated block_size times along K and sliced to K (ragged last block).
The value is `(decode(code) - decode(zp)) * decode(scale) * global_scale`, in that order,
as onnxfuse.formats.decode_rows computes it (docs/ops.md), so results agree bit for bit.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onnxfuse.formats import ElementFormat, ScaleFormat

_BYTE = np.arange(256, dtype=np.int64)


def byte_table(element: ElementFormat) -> np.ndarray:
    """float32 [256, per] (or [256] for one code per byte): the values of a byte's codes."""
    per = element.row_codes_per_byte
    mask = (1 << element.bits) - 1
    if per == 1:
        return element.lut[_BYTE & mask].astype(np.float32)
    fields = [(_BYTE >> (element.bits * i)) & mask for i in range(per)]
    return np.stack([element.lut[f] for f in fields], axis=1).astype(np.float32)


def code_table(element: ElementFormat) -> np.ndarray:
    """float32 [256]: the value of one unpacked code per byte (zero points)."""
    return element.lut[_BYTE & ((1 << element.bits) - 1)].astype(np.float32)


def decode_codes(b, packed: str, K: str, element: ElementFormat) -> str:
    """uint8 [R, Kb] -> float32 [R, K] element values (K: a 1-D int64 tensor of one element)."""
    idx = b.op("Cast", packed, to=TensorProto.INT32)
    values = b.op("Gather", b.const(byte_table(element), "byte_lut"), idx, axis=0, hint="codes")
    per = element.row_codes_per_byte
    if per > 1:
        # [R, Kb, per] -> [R, Kb * per]; the target shape is computed, not 0/-1, so R = 0 works.
        shape = b.op("Shape", packed)
        rows = b.op("Slice", shape, b.ints(0), b.ints(1))
        width = b.op("Mul", b.op("Slice", shape, b.ints(1), b.ints(2)), b.ints(per))
        values = b.op("Reshape", values, b.op("Concat", rows, width, axis=0))
        values = b.op("Slice", values, b.ints(0), K, b.ints(1), hint="codes_k")
    return values


def decode_zero_point(b, zp: str, element: ElementFormat) -> str:
    """uint8 [R, G] raw codes -> float32 values."""
    idx = b.op("Cast", zp, to=TensorProto.INT32)
    return b.op("Gather", b.const(code_table(element), "zp_lut"), idx, axis=0, hint="zp")


def decode_scale(b, scale: str, fmt: ScaleFormat) -> str:
    """Stored scale (docs/ops.md storage) -> float32, exact."""
    if fmt.name == "float32":
        return scale
    if fmt.name == "float16":
        return b.op("Cast", scale, to=TensorProto.FLOAT, hint="scale")
    if fmt.name == "bfloat16":
        return decode_bfloat16_bits(b, scale)
    idx = b.op("Cast", scale, to=TensorProto.INT32)
    return b.op("Gather", b.const(fmt.lut.astype(np.float32), "scale_lut"), idx, axis=0, hint="scale")


def _bf16_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Indexed by the top 9 bits (sign, 8-bit exponent E) of a bfloat16."""
    top = np.arange(512)
    sign = np.where(top >= 256, -1.0, 1.0)
    e = top & 0xFF
    with np.errstate(over="ignore"):
        magnitude = np.where(e == 0xFF, np.inf, np.exp2(np.maximum(e, 1).astype(np.float64) - 127))
    weight = (sign * magnitude).astype(np.float32)  # 2^(E-127); subnormals (E=0) 2^-126
    implicit = np.where(e == 0, 0.0, 1.0).astype(np.float32)  # the leading 1 of a normal
    nan_flag = (e == 0xFF).astype(np.int32)  # E=255 with a non-zero mantissa is NaN
    return weight, implicit, nan_flag


def decode_bfloat16_bits(b, bits: str) -> str:
    """uint16 bfloat16 bits -> float32: weight(top9) * (implicit(top9) + mantissa / 128).

    Exact: the weight is a power of two, implicit + m/128 has 8 significant bits, and the
    product (at least 2^-133, at most below 2^128) is a float32. BitCast would be shorter but
    exists only from opset 26; this runs at every opset the fused models use.
    """
    weight, implicit, nan_flag = _bf16_tables()
    x = b.op("Cast", bits, to=TensorProto.INT32)
    top = b.op("Div", x, b.const(np.array(128, np.int32)), hint="bf16_top")
    mant = b.op("Mod", x, b.const(np.array(128, np.int32)), hint="bf16_mant")
    frac = b.op("Mul", b.op("Cast", mant, to=TensorProto.FLOAT), b.const(np.array(1 / 128, np.float32)))
    lead = b.op("Gather", b.const(implicit, "bf16_implicit"), top, axis=0)
    value = b.op("Mul", b.op("Gather", b.const(weight, "bf16_weight"), top, axis=0), b.op("Add", lead, frac))
    flagged = b.op("Mul", b.op("Gather", b.const(nan_flag, "bf16_nan"), top, axis=0), mant)
    is_nan = b.op("Greater", flagged, b.const(np.array(0, np.int32)))
    return b.op("Where", is_nan, b.const(np.array(np.nan, np.float32)), value, hint="scale")


def expand_blocks(b, blocked: str, K: str, block_size: str) -> str:
    """[R, G] -> [R, K]: repeat each entry block_size times along the last axis, slice to K."""
    tiled = b.op("Expand", b.op("Unsqueeze", blocked, b.ints(-1)),
                 b.op("Concat", b.op("Shape", blocked), block_size, axis=0))
    shape = b.op("Shape", blocked)
    flat = b.op("Concat", b.op("Slice", shape, b.ints(0), b.ints(1)),
                b.op("Mul", b.op("Slice", shape, b.ints(1), b.ints(2)), block_size), axis=0)
    return b.op("Slice", b.op("Reshape", tiled, flat), b.ints(0), K, b.ints(1), hint="per_element")


def decode_rows(b, packed: str, scale: str, zero_point: str | None, global_scale: str | None, *,
                K: str, block_size: str, element: ElementFormat, fmt: ScaleFormat) -> str:
    """The docs/ops.md decoded value of a row-layout tensor: float32 [R, K]."""
    w = decode_codes(b, packed, K, element)
    if zero_point is not None:
        w = b.op("Sub", w, expand_blocks(b, decode_zero_point(b, zero_point, element), K, block_size))
    w = b.op("Mul", w, expand_blocks(b, decode_scale(b, scale, fmt), K, block_size))
    if global_scale is not None:
        w = b.op("Mul", w, global_scale, hint="w")
    return w
