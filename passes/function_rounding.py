"""Exact rounding recipes for function bodies: powers of two, float exponents, value grids.

Floating-point element formats onnxruntime cannot Cast to (float4e2m1, float6) are quantized
arithmetically: with e = floor(log2 |v|) clamped to the format's normal exponents
[emin, emax], the representable values near |v| are the multiples of 2^(e - mantissa_bits)
(subnormals included, since e never goes below emin), so rounding |v| / 2^(e - m) to an
integer and multiplying back lands exactly on the format's grid; ties to even there are ties
to the even code, as the mantissa's last bit is the integer's parity. Everything is exact:
the exponent is computed with Log and then corrected against a table of exact powers of two,
and dividing or multiplying by a power of two is exact in float32.

`b` is a passes.function_builder.BodyBuilder.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from onnx import TensorProto

from onnxfuse.formats import ElementFormat

F32_MIN_EXP = -149  # the smallest float32 subnormal is 2^-149
F32_MAX_EXP = 127


def pow2_table(lo: int, hi: int) -> np.ndarray:
    """float32 [hi - lo + 1]: 2^lo .. 2^hi, exact (2^128 becomes +inf)."""
    with np.errstate(over="ignore"):
        return np.exp2(np.arange(lo, hi + 1, dtype=np.float64)).astype(np.float32)


def scalar(b, value: float) -> str:
    return b.const(np.array(value, np.float32))


def pow2(b, exponent: str, lo: int, hi: int) -> str:
    """2^e for a float tensor of integers e in [lo, hi], by table lookup (exact)."""
    index = b.op("Cast", b.op("Sub", exponent, scalar(b, lo)), to=TensorProto.INT64)
    return b.op("Gather", b.const(pow2_table(lo, hi), "pow2"), index, axis=0, hint="pow2")


def floor_log2(b, magnitude: str, lo: int, hi: int) -> str:
    """clip(floor(log2(a)), lo, hi) as float32 integers, exact, for a >= 0 (a = 0 -> lo).

    NaN must be masked by the caller (a NaN index would make Gather fail). Log's error is far
    below one binade, so one correction step against exact powers of two is enough.
    """
    approx = b.op("Floor", b.op("Mul", b.op("Log", magnitude), scalar(b, 1 / math.log(2))))
    e0 = b.op("Clip", approx, scalar(b, lo), scalar(b, hi))
    low = b.op("Cast", b.op("Less", magnitude, pow2(b, e0, lo, hi + 1)), to=TensorProto.FLOAT)
    above = b.op("Add", e0, scalar(b, 1))
    high = b.op("Cast", b.op("GreaterOrEqual", magnitude, pow2(b, above, lo, hi + 1)), to=TensorProto.FLOAT)
    e = b.op("Add", b.op("Sub", e0, low), high)
    return b.op("Clip", e, scalar(b, lo), scalar(b, hi), hint="exp")


def round_magnitude(b, a: str, negative: str | None, mode: str) -> str:
    """Round a >= 0 to an integer by `mode`, for a value of sign `negative` (bool tensor).
    Nearest, ties: even: half to even; away: half away from zero; up: half toward +inf (so a
    negative value's magnitude rounds its ties down). Directed: floor (toward -inf), ceil
    (toward +inf). a - floor(a) is exact for a >= 0."""
    if mode == "even":
        return b.op("Round", a)
    if mode in ("floor", "ceil"):  # directed: toward -inf / +inf, so a negative value's magnitude the other way
        down, up = b.op("Floor", a), b.op("Ceil", a)
        first, second = (up, down) if mode == "floor" else (down, up)
        return b.op("Where", negative, first, second, hint="rounded")
    whole = b.op("Floor", a)
    frac = b.op("Sub", a, whole)
    half = scalar(b, 0.5)
    carry = b.op("Cast", b.op("GreaterOrEqual", frac, half), to=TensorProto.FLOAT)
    if mode == "up":  # (onnxruntime has no Where on bool tensors: select the float carries)
        carry = b.op("Where", negative, b.op("Cast", b.op("Greater", frac, half), to=TensorProto.FLOAT), carry)
    return b.op("Add", whole, carry, hint="rounded")


def round_signed(b, v: str, mode: str) -> str:
    """Round a signed float tensor to integers by `mode`."""
    if mode == "even":
        return b.op("Round", v)
    if mode in ("floor", "ceil"):
        return b.op(mode.capitalize(), v)
    magnitude = round_magnitude(b, b.op("Abs", v), b.op("Less", v, scalar(b, 0.0)), mode)
    return b.op("Mul", b.op("Sign", v), magnitude)


def float_grid(element: ElementFormat) -> tuple[int, int, int]:
    """(emin, emax, mantissa bits) of a float element format."""
    info = ml_dtypes.finfo(element.np_dtype)
    return int(info.minexp), int(math.floor(math.log2(element.max_value))), int(info.nmant)


def round_to_float_grid(b, v: str, element: ElementFormat, mode: str, keep_nan: bool) -> str:
    """v (float32, already divided by the scale) -> the nearest value of `element`, saturating
    to +-max. NaN gives 0 (as a cast to float4/float6) or stays NaN when keep_nan."""
    emin, emax, mbits = float_grid(element)
    is_nan = b.op("IsNaN", v)
    clean = b.op("Where", is_nan, scalar(b, 0.0), v)
    a = b.op("Abs", clean)
    e = floor_log2(b, a, emin, emax)
    step = pow2(b, b.op("Sub", e, scalar(b, mbits)), emin - mbits, emax - mbits)
    units = round_magnitude(b, b.op("Div", a, step), b.op("Less", clean, scalar(b, 0.0)), mode)
    magnitude = b.op("Min", b.op("Mul", units, step), scalar(b, element.max_value))
    out = b.op("Mul", b.op("Sign", clean), magnitude, hint="grid")
    if keep_nan:
        out = b.op("Where", is_nan, v, out)
    return out
