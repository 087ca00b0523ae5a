"""How each scheme computes block scales and elements from a float tensor (RTN).

Every rule works on the tensor in rows (the blocked axis last, docs/ops.md), padding the
ragged last block with zeros: zeros never change a block's amax, and min/max rules include
zero anyway. Elements are then produced by the reference QuantizeLinear (reference.py) from
the float32 weight and the scale, dividing in float32 (a Q node with precision=FLOAT, or a
float32 scale, reproduces them).

Rules (docs/formats.md states the same):

* mx (OCP MX v1.0): shared_exp = floor(log2(amax)) - emax_elem; the DQ scale is the E8M0
  value 2^shared_exp, its exponent clamped to [-127, 127]; amax == 0 gives 2^-127. MXINT8
  elements are int8 with an implicit 2^-6 (values code / 64), which a standard DQ of int8
  codes expresses by the scale 2^(shared_exp - 6); MXINT8 codes clip to the symmetric
  [-127, 127] as OCP's reference does. Elements: RNE of x / scale, saturating.
* nvfp4: global = amax(w) / (6 * 448) in float32 (1.0 for an all-zero tensor); block scale
  = amax(block) / 6 / global, raised to at least 2^-9 (the smallest E4M3 subnormal, so no
  block scale is zero) and encoded E4M3 RNE saturating; elements = RNE E2M1 of
  x / float32(e4m3(block scale) * global).
* absmax (symmetric signed integers and fp8): scale = amax / qmax (qmax 7 int4, 127 int8,
  1 int2 (codes -1..1 of -2..1, so zero stays exact), 448 float8e4m3fn, 57344 float8e5m2).
* minmax (asymmetric unsigned integers): lo = min(block, 0), hi = max(block, 0);
  scale = (hi - lo) / qmax, zero_point = clip(rint(-lo / scale), 0, qmax).

For absmax and minmax the scale is rounded *up* to the scale format (float16 default;
bfloat16, float32 allowed), so |x| / scale never exceeds qmax: no element saturates and the
error is at most half a step (scale / 2). An all-zero block gets scale 1.0 (zero point 0),
never 0, so validation's zero-scale warning does not fire for it. A scale beyond the scale
format's range raises OnnxfuseError(SCALE_OUT_OF_COMPUTE_RANGE).
"""

from __future__ import annotations

import math

import numpy as np

from onnx import TensorProto

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.formats.elements import ElementFormat
from onnxfuse.formats.reference import quantize_linear
from onnxfuse.formats.rows import from_rows, to_rows
from onnxfuse.formats.scales import FLOAT8E4M3FN, ScaleFormat, e8m0_from_exponent

# OCP MX v1.0 table 1: the exponent of each element format's largest normal value.
MX_EMAX = {"float8e4m3fn": 8, "float8e5m2": 15, "float6e2m3": 2, "float6e3m2": 4, "float4e2m1": 2, "int8": 0}
MXINT8_IMPLICIT_EXP = -6
NVFP4_E2M1_MAX = 6.0
NVFP4_E4M3_MAX = 448.0
E4M3_MIN_SUBNORMAL = 2.0 ** -9


def block_view(w: np.ndarray, axis: int, block_size: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """float32 [R, G, block_size] blocks (ragged tail zero-padded) and the blocked scale shape."""
    rows, moved = to_rows(w, axis)
    R, K = rows.shape
    G = math.ceil(K / block_size)
    padded = np.zeros((R, G * block_size), np.float32)
    padded[:, :K] = rows
    shape = list(w.shape)
    shape[axis] = G
    return padded.reshape(R, G, block_size), tuple(shape)


def per_block(values_rg: np.ndarray, scale_shape, axis: int) -> np.ndarray:
    """[R, G] per-block values -> the blocked scale shape (the data's rank)."""
    return from_rows(values_rg, scale_shape, axis)


def check_finite(w: np.ndarray) -> None:
    if not np.all(np.isfinite(w)):
        raise OnnxfuseError.of(codes.SCALE_NAN_INF, "the tensor holds NaN or Inf values; no block scale can be computed",
                               hint="fix the weights before quantizing")


def mx(w, element: ElementFormat, axis: int, block_size: int):
    """-> (data, e8m0 scale)."""
    blocks, scale_shape = block_view(w, axis, block_size)
    amax = np.max(np.abs(blocks), axis=-1)
    _, exp = np.frexp(amax)  # amax = m * 2^exp, m in [0.5, 1): floor(log2(amax)) = exp - 1
    shared = exp.astype(np.int64) - 1 - MX_EMAX[element.name]
    if element.name == "int8":
        shared = shared + MXINT8_IMPLICIT_EXP
    shared = np.where(amax == 0, -127, np.clip(shared, -127, 127))
    scale = e8m0_from_exponent(per_block(shared, scale_shape, axis))
    if element.name == "int8":
        decoded = scale.astype(np.float32)
        full = np.repeat(decoded, block_size, axis=axis).take(range(w.shape[axis]), axis=axis)
        q = np.clip(np.rint(w / full), -127, 127)  # division by a power of two: exact
        return q.astype(np.int8), scale
    return quantize_linear(w, scale, axis=axis, block_size=block_size, output_dtype=element.onnx_type), scale


def nvfp4(w, element: ElementFormat, axis: int, block_size: int):
    """-> (data, e4m3 block scale, float32 global scale)."""
    amax_t = np.float32(np.max(np.abs(w))) if w.size else np.float32(0)
    g = np.float32(1.0) if amax_t == 0 else np.float32(amax_t / np.float32(NVFP4_E2M1_MAX * NVFP4_E4M3_MAX))
    blocks, scale_shape = block_view(w, axis, block_size)
    amax = np.max(np.abs(blocks), axis=-1)
    target = np.maximum((amax / np.float32(NVFP4_E2M1_MAX)) / g, np.float32(E4M3_MIN_SUBNORMAL))
    block_scale = FLOAT8E4M3FN.encode(per_block(target.astype(np.float32), scale_shape, axis))
    effective = (block_scale.astype(np.float32) * g).astype(np.float32)  # what the two-level DQ chain computes
    data = quantize_linear(w, effective, axis=axis, block_size=block_size, output_dtype=element.onnx_type)
    return data, block_scale, np.asarray(g, dtype=np.float32)


def absmax(w, element: ElementFormat, scale_fmt: ScaleFormat, axis: int, block_size: int):
    """-> (data, scale) symmetric."""
    qmax = symmetric_qmax(element)
    blocks, scale_shape = block_view(w, axis, block_size)
    amax = np.max(np.abs(blocks), axis=-1)
    target = np.where(amax == 0, np.float32(1), amax / np.float32(qmax)).astype(np.float32)
    scale = round_up(per_block(target, scale_shape, axis), scale_fmt)
    data = quantize_linear(w, scale, axis=axis, block_size=block_size, output_dtype=element.onnx_type,
                           precision=TensorProto.FLOAT)
    return data, scale


def minmax(w, element: ElementFormat, scale_fmt: ScaleFormat, axis: int, block_size: int):
    """-> (data, scale, zero_point) asymmetric."""
    qmax = element.max_value - element.min_value
    blocks, scale_shape = block_view(w, axis, block_size)
    lo = np.minimum(np.min(blocks, axis=-1), 0)  # the zero padding already included 0; explicit for clarity
    hi = np.maximum(np.max(blocks, axis=-1), 0)
    span = (hi - lo).astype(np.float32)
    target = np.where(span == 0, np.float32(1), span / np.float32(qmax)).astype(np.float32)
    scale = round_up(per_block(target, scale_shape, axis), scale_fmt)
    decoded = scale_fmt.decode(scale)
    zp_values = np.clip(np.rint(-per_block(lo, scale_shape, axis) / decoded), element.min_value, element.max_value)
    zero_point = element.from_codes(element.encode(zp_values)).reshape(scale_shape)
    data = quantize_linear(w, scale, zero_point, axis=axis, block_size=block_size, precision=TensorProto.FLOAT)
    return data, scale, zero_point


def symmetric_qmax(element: ElementFormat) -> float:
    """The largest magnitude a symmetric scale maps to: the format's max (int2: 1)."""
    return element.max_value


def round_up(target: np.ndarray, scale_fmt: ScaleFormat) -> np.ndarray:
    """Encode positive float32 targets in scale_fmt, rounding up: decode(result) >= target."""
    s = scale_fmt.encode(target)
    decoded = scale_fmt.decode(s)
    low = decoded < target
    if np.any(low):
        bits = np.array(s, order="C").view(f"u{s.dtype.itemsize}").copy()
        bits[low] += 1  # positive IEEE values: the next code is the next larger value
        s = bits.view(s.dtype)
    decoded = scale_fmt.decode(s)
    if not np.all(np.isfinite(decoded)):
        raise OnnxfuseError.of(codes.SCALE_OUT_OF_COMPUTE_RANGE,
                               f"a block scale exceeds the range of {scale_fmt.name}",
                               hint="quantize with float32 scales")
    return s

