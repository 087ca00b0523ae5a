"""@triton.jit decode helpers: raw codes -> float32 in registers, no lookup tables.

Integers use the float magic-number trick: OR-ing a code below 2^23 into the mantissa of 2^23
and subtracting 2^23 converts it exactly with one integer op and one FADD (cheaper than I2F,
which runs at a quarter of the FP32 rate on sm_90). Small floats are moved bit for bit into an
fp16 pattern whose exponent field holds theirs, converted (exact, subnormals included) and
rescaled by the bias difference, a power of two.

Element ids (WFMT) and scale ids (SFMT) are those of kernels/format_codes.py.
"""

from __future__ import annotations

from onnxfuse.kernels import triton_env

torch, triton, tl = triton_env.load()


@triton.jit
def _int_magic(c, OFFSET: tl.constexpr):
    """Exact float32 of c - OFFSET for 0 <= c < 2^23: c in the mantissa of 2^23 (bits 0x4B000000)."""
    return (c | 0x4B000000).to(tl.float32, bitcast=True) - (8388608.0 + OFFSET)


@triton.jit
def _small_float(c, SIGN_SHIFT: tl.constexpr, MAG_MASK: tl.constexpr, MAG_SHIFT: tl.constexpr, RESCALE: tl.constexpr):
    """A sign/exponent/mantissa code whose exponent and mantissa fit fp16's fields.

    The code's magnitude bits land at the bottom of fp16's exponent and the top of its mantissa,
    so the fp16 value is the code's value times 2^(bias - 15); RESCALE = 2^(15 - bias) undoes it.
    """
    sign = (c >> SIGN_SHIFT) & 1
    h = (sign << 15) | ((c & MAG_MASK) << MAG_SHIFT)
    return h.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32) * RESCALE


@triton.jit
def decode_element(c, WFMT: tl.constexpr):
    """int32 codes (already masked to the element's width) -> float32 values."""
    if WFMT == 0:  # int2: two's complement, (c ^ 2) - 2
        v = _int_magic(c ^ 2, 2.0)
    elif WFMT == 1:  # uint2
        v = _int_magic(c, 0.0)
    elif WFMT == 2:  # int4
        v = _int_magic(c ^ 8, 8.0)
    elif WFMT == 3:  # uint4
        v = _int_magic(c, 0.0)
    elif WFMT == 4:  # int8
        v = _int_magic(c ^ 128, 128.0)
    elif WFMT == 5:  # uint8
        v = _int_magic(c, 0.0)
    elif WFMT == 6:  # float8e4m3fn: bias 7, 3 mantissa bits; 0x7F/0xFF are NaN, no infinities
        v = _small_float(c, 7, 0x7F, 7, 256.0)
        v = tl.where((c & 0x7F) == 0x7F, float("nan"), v)
    elif WFMT == 7:  # float8e5m2 is the top byte of an fp16
        v = (c << 8).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    elif WFMT == 8:  # float4e2m1: bias 1, 1 mantissa bit
        v = _small_float(c, 3, 0x7, 9, 16384.0)
    elif WFMT == 9:  # float6e2m3: bias 1, 3 mantissa bits
        v = _small_float(c, 5, 0x1F, 7, 16384.0)
    else:  # 10, float6e3m2: bias 3, 2 mantissa bits
        v = _small_float(c, 5, 0x1F, 8, 4096.0)
    return v


@triton.jit
def decode_scale(raw, SFMT: tl.constexpr):
    """A loaded scale in its storage dtype (docs/ops.md) -> float32."""
    if SFMT == 0:  # float32
        s = raw.to(tl.float32)
    elif SFMT == 1:  # float16
        s = raw.to(tl.float32)
    elif SFMT == 2:  # bfloat16 bits (uint16 or int16 storage): the top half of a float32
        s = ((raw.to(tl.int32) & 0xFFFF) << 16).to(tl.float32, bitcast=True)
    elif SFMT == 3:  # float8e8m0: 2^(code-127); code 0 is the subnormal 2^-127, 0xFF NaN
        c = raw.to(tl.int32) & 0xFF
        s = (c << 23).to(tl.float32, bitcast=True)
        s = tl.where(c == 0, 5.877471754111438e-39, s)
        s = tl.where(c == 0xFF, float("nan"), s)
    else:  # 4, float8e4m3fn (the inner scale of a two-level scheme)
        s = decode_element(raw.to(tl.int32) & 0xFF, 6)
    return s
