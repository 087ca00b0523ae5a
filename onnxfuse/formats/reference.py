"""NumPy reference of ONNX DequantizeLinear / QuantizeLinear (opset 21-28 semantics).

Per-tensor (scalar scale), per-axis (1-D scale, block_size 0) and blocked (block_size > 0,
scale of the data's rank with dim[axis] = ceil(dim / block_size), the last block ragged).
Arrays use the dtypes onnx.numpy_helper.to_array returns (ml_dtypes int4, float4_e2m1fn, ...).
The arithmetic follows onnx.reference (and onnxruntime CPU where it runs the types), so the
results agree bit for bit: DQ computes (x - zp) * scale in float32, exact for every element
format with a 16-bit or narrower scale, then casts once to the output type; Q divides in the
scale's type (the ONNX spec, onnxruntime) unless `precision` says otherwise.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.formats.elements import ElementFormat, element_format
from onnxfuse.formats.scales import ScaleFormat, scale_format

FLOAT_OUTPUTS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)
# Integer Q/DQ types that are not block-quantized element formats (a QDQ model's int32 bias, int16
# activations): handled numerically here so the reference covers every DequantizeLinear.
WIDE_INTEGERS = (np.dtype(np.int16), np.dtype(np.uint16), np.dtype(np.int32))


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, f"axis {axis} is out of range for a tensor of rank {rank}")
    return axis % rank


def blocked_scale_shape(data_shape, axis: int, block_size: int) -> tuple[int, ...]:
    """The scale shape a blocked Q/DQ needs: data_shape with dim[axis] = ceil(dim / block_size)."""
    axis = normalize_axis(axis, len(data_shape))
    shape = list(data_shape)
    shape[axis] = math.ceil(shape[axis] / block_size)
    return tuple(shape)


def block_broadcast(scale, data_shape, axis: int, block_size: int) -> np.ndarray:
    """Expand a per-tensor, per-axis or block scale (or zero point) to data_shape."""
    scale = np.asarray(scale)
    data_shape = tuple(int(d) for d in data_shape)
    if block_size < 0:
        raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, f"block_size must be >= 0, got {block_size}")
    if scale.ndim == 0 or (block_size == 0 and scale.shape == (1,)):
        return np.broadcast_to(scale.reshape(()), data_shape)
    axis = normalize_axis(axis, len(data_shape))
    if block_size == 0:
        if scale.ndim != 1 or scale.shape[0] != data_shape[axis]:
            raise OnnxfuseError.of(
                codes.SCALE_SHAPE_MISMATCH,
                f"a per-axis scale must be 1-D with {data_shape[axis]} values (dim {axis} of {list(data_shape)}), "
                f"got shape {list(scale.shape)}")
        dims = [1] * len(data_shape)
        dims[axis] = data_shape[axis]
        return np.broadcast_to(scale.reshape(dims), data_shape)
    expected = blocked_scale_shape(data_shape, axis, block_size)
    if scale.shape != expected:
        raise OnnxfuseError.of(
            codes.SCALE_SHAPE_MISMATCH,
            f"a block scale for data {list(data_shape)}, axis {axis}, block_size {block_size} must have shape "
            f"{list(expected)}, got {list(scale.shape)}")
    return np.repeat(scale, block_size, axis=axis).take(range(data_shape[axis]), axis=axis)


def dequantize_linear(x, scale, zero_point=None, *, axis: int = 1, block_size: int = 0,
                      output_dtype: int | None = None) -> np.ndarray:
    """ONNX DequantizeLinear: y = (x - zero_point) * scale, as `output_dtype` (default: the
    scale's type; required for float8e8m0 scales)."""
    x = np.asarray(x)
    sfmt = _dq_scale_format(np.asarray(scale).dtype)
    out_type = _output_type(output_dtype, sfmt)
    if x.dtype in WIDE_INTEGERS:  # int16/uint16/int32 (e.g. a QDQ model's int32 bias): no element format
        values = x.astype(np.float32)
        if zero_point is not None:  # numpy promotion as onnx.reference: float32 - int32 is float64
            zp = _wide_zero_point(zero_point, x.dtype, np.asarray(scale))
            values = values - block_broadcast(zp, x.shape, axis, block_size)
    else:
        element = element_format(x.dtype)
        values = element.decode(element.codes_of(x))
        if zero_point is not None:
            zp_values = _zero_point_values(zero_point, element, np.asarray(scale))
            if not element.is_float:
                values = values - block_broadcast(zp_values, x.shape, axis, block_size)
    s = block_broadcast(sfmt.decode(scale), x.shape, axis, block_size)
    with np.errstate(all="ignore"):  # NaN/Inf scales propagate as ONNX does; validation warns
        y = values * s
        return y.astype(helper.tensor_dtype_to_np_dtype(out_type))


def quantize_linear(x, scale, zero_point=None, *, axis: int = 1, block_size: int = 0,
                    output_dtype: int | None = None, saturate: bool = True,
                    precision: int | None = None) -> np.ndarray:
    """ONNX QuantizeLinear: y = saturate(round(x / scale) + zero_point), round half to even.

    The output type is the zero point's type if given, else output_dtype, else uint8.
    The division runs in `precision` (a TensorProto float type) when given, else in the
    scale's type as the ONNX spec and onnxruntime do (float32 for E8M0 scales, where it is
    exact). onnx.reference instead divides in numpy's promotion of x's and the scale's types:
    pass precision=FLOAT for a float32 x with a float16/bfloat16 scale to reproduce it.
    """
    x = np.asarray(x)
    if x.dtype.kind != "f" and x.dtype != ml_dtypes.bfloat16:
        raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, f"QuantizeLinear input must be a float tensor, got {x.dtype}")
    scale = np.asarray(scale)
    _dq_scale_format(scale.dtype)
    target = _q_type(zero_point, output_dtype)
    s = block_broadcast(scale, x.shape, axis, block_size)
    if precision:
        ctype = helper.tensor_dtype_to_np_dtype(precision)
    elif s.dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
        ctype = s.dtype  # the ONNX spec: "the type of y_scale determines the precision of the division"
    else:
        ctype = np.dtype(np.float32)  # an E8M0 scale: a power of two, the division is exact in float32
    with np.errstate(all="ignore"):
        q = x.astype(ctype) / s.astype(ctype)
    if target in WIDE_INTEGERS:
        r = np.rint(q.astype(np.float64))
        if zero_point is not None:
            r = r + block_broadcast(_wide_zero_point(zero_point, target, scale), x.shape, axis, block_size)
        info = np.iinfo(target)
        return np.clip(np.nan_to_num(r), info.min, info.max).astype(target)
    element = element_format(target)
    if zero_point is not None:
        zp_values = _zero_point_values(zero_point, element, scale)
        zp_full = block_broadcast(zp_values, x.shape, axis, block_size)
    if element.is_float:
        out = element.encode(q, saturate=saturate)
    else:
        r = np.rint(q.astype(np.float64) if q.dtype != np.float64 else q)
        if zero_point is not None:
            r = r + zp_full
        out = element.encode(r)
    return element.from_codes(out).reshape(x.shape)


def _dq_scale_format(dtype) -> ScaleFormat:
    sfmt = scale_format(dtype)
    if sfmt.name == "float8e4m3fn":
        raise OnnxfuseError.of(
            codes.SCALE_DTYPE_ILLEGAL,
            "float8e4m3fn is not a legal Q/DQ scale type; a two-level scale is a DequantizeLinear of the "
            "e4m3 block scale feeding the scale input (dequantize the e4m3 scale first)")
    return sfmt


def _output_type(output_dtype: int | None, sfmt: ScaleFormat) -> int:
    out = int(output_dtype) if output_dtype else sfmt.onnx_type
    if out not in FLOAT_OUTPUTS:
        if not output_dtype:
            raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID,
                                   f"a {sfmt.name} scale needs output_dtype (float, float16 or bfloat16)")
        raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID,
                               f"output_dtype {out} is not float, float16 or bfloat16")
    return out


def _q_type(zero_point, output_dtype):
    """The QuantizeLinear output: a wide integer numpy dtype or an ElementFormat's np_dtype."""
    if zero_point is not None:
        zdt = np.asarray(zero_point).dtype
        target = zdt if zdt in WIDE_INTEGERS else element_format(zdt).np_dtype
        if output_dtype and helper.tensor_dtype_to_np_dtype(int(output_dtype)) != target:
            raise OnnxfuseError.of(codes.ZERO_POINT_SHAPE_MISMATCH,
                                   f"output_dtype {output_dtype} differs from the zero point's type {zdt}")
        return target
    onnx_type = int(output_dtype) if output_dtype else TensorProto.UINT8
    if onnx_type in (TensorProto.INT16, TensorProto.UINT16):
        return np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type))
    return element_format(onnx_type).np_dtype


def _check_zero_point_shape(zp: np.ndarray, scale: np.ndarray) -> None:
    # per-tensor scale and zero point may be spelled [] or [1] independently
    if zp.shape != scale.shape and not (zp.size == 1 and scale.size == 1):
        raise OnnxfuseError.of(codes.ZERO_POINT_SHAPE_MISMATCH,
                               f"zero point shape {list(zp.shape)} differs from the scale shape {list(scale.shape)}")


def _wide_zero_point(zero_point, dtype, scale: np.ndarray) -> np.ndarray:
    zp = np.asarray(zero_point)
    if zp.dtype != dtype:
        raise OnnxfuseError.of(codes.ZERO_POINT_SHAPE_MISMATCH, f"zero point type {zp.dtype} differs from the data type {dtype}")
    _check_zero_point_shape(zp, scale)
    return zp.reshape(scale.shape)


def _zero_point_values(zero_point, element: ElementFormat, scale: np.ndarray) -> np.ndarray:
    """The zero point decoded to float32 (in the scale's shape) after checking its type and shape."""
    zp = np.asarray(zero_point)
    if zp.dtype != element.np_dtype:
        raise OnnxfuseError.of(codes.ZERO_POINT_SHAPE_MISMATCH,
                               f"zero point type {zp.dtype} differs from the data type {element.name}")
    _check_zero_point_shape(zp, scale)
    values = element.decode(element.codes_of(zp)).reshape(scale.shape)
    if element.is_float and np.any(values != 0):
        raise OnnxfuseError.of(codes.ZERO_POINT_FLOAT_FORMAT,
                               f"{element.name} data cannot have a non-zero zero point")
    return values
