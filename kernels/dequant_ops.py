"""DequantGather and Dequantize: row decoding through kernels/dequant_rows.py."""

from __future__ import annotations

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.kernels import inputs, triton_env
from onnxfuse.kernels.dequant_rows import decode_rows_device

torch, triton, tl = triton_env.load()

_OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _out_dtype(out_dtype):
    """A torch float dtype, or an onnx TensorProto enum (1 float, 10 float16, 16 bfloat16)."""
    if isinstance(out_dtype, int):
        out_dtype = {1: torch.float32, 10: torch.float16, 16: torch.bfloat16}.get(out_dtype, out_dtype)
    if out_dtype not in _OUT_DTYPES:
        raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, f"output_dtype {out_dtype} is not float32, float16 or bfloat16")
    return out_dtype


def _prepare(x, scale, zero_point, global_scale, *, K, block_size, weight_format, scale_format, what):
    element, scale_code = inputs.formats(weight_format, scale_format)
    inputs.same_device(x, scale, zero_point)
    x = inputs.codes_uint8(torch, x, what).contiguous()
    z = inputs.codes_uint8(torch, zero_point, "zero_point")
    s = inputs.scale_storage(torch, scale, scale_code)  # (any strides, as the zero point's)
    inputs.check_rows(x, s, z, K=K, block_size=block_size, element=element, what=what)
    gs = inputs.global_scale_tensor(torch, global_scale, x.device)
    return x, s, z, gs, element, scale_code


def dequant_gather(table, scale, zero_point, global_scale, indices, *, D, block_size, weight_format,
                   scale_format, out_dtype):
    """dequant(table)[indices] -> [*indices.shape, D]. Negative indices count from the end;
    indices outside [-V, V) give rows of NaN (a device kernel cannot raise)."""
    x, s, z, gs, element, scale_code = _prepare(table, scale, zero_point, global_scale, K=D, block_size=block_size,
                                                 weight_format=weight_format, scale_format=scale_format,
                                                 what="table")
    if indices.dtype not in (torch.int32, torch.int64):
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"indices must be int32 or int64, got {indices.dtype}")
    if indices.device != x.device:
        indices = indices.to(x.device)
    rows = decode_rows_device(x, s, z, gs, K=D, block_size=block_size, element=element, scale_code=scale_code,
                              out_dtype=_out_dtype(out_dtype), indices=indices)
    return rows.reshape(*indices.shape, D)


def dequantize(x, scale, zero_point, global_scale, *, shape, axis, block_size, weight_format, scale_format,
               out_dtype):
    """Row layout [R, Kb] (blocked axis moved last, other axes flattened in order) -> `shape`."""
    shape = tuple(int(d) for d in shape)
    if not 0 <= axis < len(shape):
        raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, f"axis {axis} is out of range for shape {shape}")
    K = shape[axis]
    moved = shape[:axis] + shape[axis + 1:] + (K,)
    R = 1
    for d in moved[:-1]:
        R *= d
    if x.shape[0] != R:
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"X has {x.shape[0]} rows; shape {shape} along axis {axis} needs {R}")
    x, s, z, gs, element, scale_code = _prepare(x, scale, zero_point, global_scale, K=K, block_size=block_size,
                                                 weight_format=weight_format, scale_format=scale_format, what="X")
    rows = decode_rows_device(x, s, z, gs, K=K, block_size=block_size, element=element, scale_code=scale_code,
                              out_dtype=_out_dtype(out_dtype))
    y = rows.reshape(moved)
    if axis != len(shape) - 1:
        y = y.movedim(-1, axis).contiguous()
    return y
