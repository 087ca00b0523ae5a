"""Run an original (unfused) Q/DQ model where onnxruntime cannot: onnx.reference.ReferenceEvaluator
with DequantizeLinear/QuantizeLinear replaced by onnxfuse.formats' NumPy reference (every element
and scale format, blocked, ragged) and the exporters' custom ops given reference implementations:

- trt::TRT_FP4DynamicQuantize(x, global_scale) -> (fp4 data, e4m3 block scale): ModelOpt NVFP4
  activations, block scale = e4m3(amax / 6 / global), elements = e2m1(x / (scale * global)).
- trt::TRT_MXFP8DequantizeLinear(x fp8, scale uint8 E8M0 codes), trt::TRT_MXFP8DynamicQuantize.
- trt::DequantizeLinear / trt::QuantizeLinear: older ModelOpt spellings of the standard ops.
- com.amd.quark::MXQuantizeDequantize(x): OCP MX fake quantization (shared exponent
  floor(log2(amax)) - emax_elem over blocks along `axis`), Quark rounding_mode 0 away / 1 up / 2 even.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from onnxfuse import formats
from onnxfuse.formats import element_format, scale_format, scale_rules
from onnxfuse.passes.fuse_qdq import QUARK_ELEMENTS, QUARK_ROUNDING


def _move_blocks(x: np.ndarray, axis: int, block_size: int):
    """x -> ([rows, G, block] zero-padded, restore) with blocks along `axis`."""
    axis = axis % x.ndim
    moved = np.moveaxis(x, axis, -1)
    K = moved.shape[-1]
    G = -(-K // block_size)
    padded = np.zeros(moved.shape[:-1] + (G * block_size,), dtype=np.float32)
    padded[..., :K] = moved
    blocks = padded.reshape(moved.shape[:-1] + (G, block_size))

    def restore(b: np.ndarray) -> np.ndarray:
        flat = b.reshape(moved.shape[:-1] + (G * block_size,))[..., :K]
        return np.moveaxis(flat, -1, axis)

    return blocks, restore


def _block_amax(blocks: np.ndarray) -> np.ndarray:
    return np.max(np.abs(blocks), axis=-1, keepdims=True)


def round_to_grid(x: np.ndarray, element, mode: str = "even") -> np.ndarray:
    """Round to the nearest value of `element` (saturating), ties by `mode`: even (code parity),
    away (from zero) or up (toward +inf). Returns float32 values on the grid."""
    x = np.asarray(x, dtype=np.float32)
    if not element.is_float:
        x = np.clip(x, element.min_value, element.max_value)
        if mode == "even":
            r = np.rint(x)
        elif mode == "away":
            r = np.sign(x) * np.floor(np.abs(x) + 0.5)
        else:
            r = np.floor(x + 0.5)
        return np.clip(r, element.min_value, element.max_value).astype(np.float32)
    if mode == "even":
        return element.decode(element.encode(x, saturate=True))
    lut = element.lut
    finite = np.isfinite(lut)
    grid = np.unique(lut[finite])
    xc = np.clip(x, grid[0], grid[-1])
    hi = np.clip(np.searchsorted(grid, xc), 1, len(grid) - 1)
    lo_v, hi_v = grid[hi - 1], grid[hi]
    d_lo, d_hi = xc - lo_v, hi_v - xc
    tie = d_lo == d_hi
    pick_hi = d_hi < d_lo
    if mode == "up":
        pick_hi = pick_hi | tie
    else:  # away from zero
        pick_hi = pick_hi | (tie & (xc > 0))
    return np.where(pick_hi, hi_v, lo_v).astype(np.float32)




def mx_shared_exponent(amax: np.ndarray, element_name: str) -> np.ndarray:
    """floor(log2(amax)) - emax_elem, clamped to E8M0's range; amax 0 gives the smallest scale."""
    with np.errstate(divide="ignore"):
        _, exp = np.frexp(amax.astype(np.float64))  # amax = m * 2^exp, m in [0.5, 1)
    e = exp.astype(np.int64) - 1 - scale_rules.MX_EMAX[element_name]
    e = np.where(amax > 0, e, -127)
    return np.clip(e, -127, 127)


def mx_fake_quantize(x: np.ndarray, element_name: str, axis: int, block_size: int, mode: str = "even") -> np.ndarray:
    element = element_format(element_name)
    blocks, restore = _move_blocks(np.asarray(x, dtype=np.float32), axis, block_size)
    e = mx_shared_exponent(_block_amax(blocks), element_name)
    mxint8 = element_name == "int8"  # formats.scale_rules.mx: a 2^-6 step, codes within +-127
    scale = np.ldexp(np.float32(1), e + scale_rules.MXINT8_IMPLICIT_EXP if mxint8 else e).astype(np.float32)
    q = round_to_grid(blocks / scale, element, mode)
    if mxint8:
        q = np.clip(q, -127, 127)
    return restore(q * scale).astype(np.asarray(x).dtype)


def nvfp4_dynamic_quantize(x: np.ndarray, global_scale, axis: int, block_size: int):
    """-> (float4e2m1 codes as np_dtype, float8e4m3fn block scales), blocks along `axis`."""
    fp4, e4m3 = element_format("float4e2m1"), scale_format("float8e4m3fn")
    g = np.float32(np.asarray(global_scale, dtype=np.float32).reshape(()))
    blocks, restore = _move_blocks(np.asarray(x, dtype=np.float32), axis, block_size)
    target = np.maximum(_block_amax(blocks) / np.float32(scale_rules.NVFP4_E2M1_MAX) / g,
                        np.float32(scale_rules.E4M3_MIN_SUBNORMAL))  # as the fused op: never a zero scale
    block_scale = e4m3.encode(target.astype(np.float32))
    s = block_scale.astype(np.float32) * g
    with np.errstate(all="ignore"):
        q = np.where(s > 0, blocks / s, 0).astype(np.float32)
    codes = fp4.encode(q, saturate=True)
    data = fp4.from_codes(restore(codes.astype(np.float32)).astype(np.uint8))
    scale_out = np.moveaxis(block_scale[..., 0], -1, axis % np.ndim(x))
    return data, scale_out


class DequantizeLinear(OpRun):
    op_domain = ""

    def _run(self, x, x_scale, x_zero_point=None, axis=1, block_size=0, output_dtype=None):
        return (formats.dequantize_linear(x, x_scale, x_zero_point, axis=axis, block_size=block_size,
                                          output_dtype=output_dtype or None),)


class QuantizeLinear(OpRun):
    op_domain = ""

    def _run(self, x, y_scale, y_zero_point=None, axis=1, block_size=0, output_dtype=None, saturate=1, precision=None):
        return (formats.quantize_linear(x, y_scale, y_zero_point, axis=axis, block_size=block_size,
                                        output_dtype=output_dtype or None, saturate=bool(saturate),
                                        precision=precision or None),)


# The evaluator keys new ops by (op_domain, class name): same names, trt domain.
TrtDequantizeLinear = type("DequantizeLinear", (DequantizeLinear,), {"op_domain": "trt"})
TrtQuantizeLinear = type("QuantizeLinear", (QuantizeLinear,), {"op_domain": "trt"})


class TRT_FP4DynamicQuantize(OpRun):
    op_domain = "trt"

    def _run(self, x, scale, axis=-1, block_size=16, scale_type=onnx.TensorProto.FLOAT8E4M3FN):
        return nvfp4_dynamic_quantize(x, scale, axis, block_size)


class TRT_MXFP8DequantizeLinear(OpRun):
    op_domain = "trt"

    def _run(self, x, scale, axis=-1, block_size=32, output_dtype=onnx.TensorProto.FLOAT):
        e8m0 = np.asarray(scale, dtype=np.uint8).view(scale_format("float8e8m0").np_dtype)
        return (formats.dequantize_linear(x, e8m0, axis=axis, block_size=block_size, output_dtype=output_dtype),)


class TRT_MXFP8DynamicQuantize(OpRun):
    op_domain = "trt"

    def _run(self, x, axis=-1, block_size=32, output_dtype=onnx.TensorProto.FLOAT8E4M3FN):
        element = element_format(output_dtype)
        blocks, restore = _move_blocks(np.asarray(x, dtype=np.float32), axis, block_size)
        e = mx_shared_exponent(_block_amax(blocks), element.name)
        q = blocks / np.ldexp(np.float32(1), e).astype(np.float32)
        codes = element.encode(q, saturate=True)
        data = element.from_codes(restore(codes.astype(np.float32)).astype(np.uint8))
        scale_codes = np.moveaxis((e + 127).astype(np.uint8)[..., 0], -1, axis % np.ndim(x))
        return data, scale_codes


class MXQuantizeDequantize(OpRun):
    op_domain = "com.amd.quark"

    def _run(self, x, element_dtype="int8", axis=1, block_size=32, rounding_mode=0):  # Quark's defaults
        name = element_dtype.decode() if isinstance(element_dtype, bytes) else element_dtype
        if name not in QUARK_ELEMENTS or rounding_mode not in QUARK_ROUNDING:
            raise ValueError(f"MXQuantizeDequantize: unknown element_dtype '{name}' or rounding_mode {rounding_mode}")
        return (mx_fake_quantize(x, QUARK_ELEMENTS[name], axis, block_size, QUARK_ROUNDING[rounding_mode]),)


NEW_OPS = [DequantizeLinear, QuantizeLinear, TrtDequantizeLinear, TrtQuantizeLinear, TRT_FP4DynamicQuantize,
           TRT_MXFP8DequantizeLinear, TRT_MXFP8DynamicQuantize, MXQuantizeDequantize]


class ReferenceRunner:
    """Runs a model with onnx's reference evaluator and the overrides above; like ORT's run()."""

    def __init__(self, model: onnx.ModelProto):
        self.evaluator = ReferenceEvaluator(model, new_ops=NEW_OPS)
        self.output_names = [o.name for o in model.graph.output]

    def run(self, output_names, feeds):
        names = output_names or self.output_names
        return self.evaluator.run(names, dict(feeds))
