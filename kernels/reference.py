"""NumPy references of the fused ops, written from the format layer's decoders
(onnxfuse.formats.decode_rows and the scale rules), and random row-layout cases for tests
and benchmarks. NumPy only: importable without torch or triton.
"""

from __future__ import annotations

import dataclasses
import math

import ml_dtypes
import numpy as np

from onnxfuse import formats


def dequant_matmul_ref(a, w, scale, zero_point=None, global_scale=None, bias=None, *, K, N, block_size,
                       weight_format, scale_format) -> np.ndarray:
    """float64 A @ W + bias, W = decode_rows(...) (the docs/ops.md decoded value, float32)."""
    wd = formats.decode_rows(w, scale, zero_point, K=K, block_size=block_size, element=weight_format,
                             scale=scale_format, global_scale=global_scale).astype(np.float64)
    y = np.asarray(a, dtype=np.float64) @ wd.T
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float64)
    return y


def dequant_gather_ref(table, scale, zero_point, global_scale, indices, *, D, block_size, weight_format,
                       scale_format) -> np.ndarray:
    wd = formats.decode_rows(table, scale, zero_point, K=D, block_size=block_size, element=weight_format,
                             scale=scale_format, global_scale=global_scale)
    idx = np.asarray(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + table.shape[0], idx)
    return wd[idx]


def dequantize_ref(x, scale, zero_point, global_scale, *, shape, axis, block_size, weight_format,
                   scale_format) -> np.ndarray:
    K = int(shape[axis])
    rows = formats.decode_rows(x, scale, zero_point, K=K, block_size=block_size, element=weight_format,
                               scale=scale_format, global_scale=global_scale)
    return formats.from_rows(rows, shape, axis)


# --- random cases ---------------------------------------------------------------------------

def _valid_codes(element) -> np.ndarray:
    """Every code of the element whose value is finite (tests never feed NaN weights)."""
    n = 1 << element.bits
    lut = element.lut[:n]
    return np.nonzero(np.isfinite(lut))[0].astype(np.uint8)


def random_scales(rng, shape, scale_format: str, element_max: float = 8.0) -> np.ndarray:
    """Positive, finite scales in storage dtype spanning a factor of 16, sized so decoded
    weights stay around +-1 whatever the element's range (fp16 outputs must not overflow)."""
    sf = formats.scale_format(scale_format)
    centre = 1.0 / element_max
    if scale_format == "float8e8m0":
        c = 127 + int(round(math.log2(centre)))
        return rng.integers(c - 2, c + 3, size=shape).astype(np.uint8)
    vals = (rng.uniform(0.25, 4.0, size=shape) * centre).astype(np.float32)
    if scale_format == "float8e4m3fn":
        vals = np.maximum(vals * 64.0, 2.0 ** -6)  # the two-level global scale brings it back
        return sf.to_storage(vals.astype(ml_dtypes.float8_e4m3fn))
    return sf.to_storage(vals.astype(sf.np_dtype))


@dataclasses.dataclass
class RowCase:
    w: np.ndarray  # uint8 [R, Kb]
    scale: np.ndarray  # storage dtype [R, G]
    zero_point: np.ndarray | None
    global_scale: np.ndarray | None  # float32 []
    K: int
    block_size: int
    weight_format: str
    scale_format: str

    def decoded(self) -> np.ndarray:
        return formats.decode_rows(self.w, self.scale, self.zero_point, K=self.K, block_size=self.block_size,
                                   element=self.weight_format, scale=self.scale_format,
                                   global_scale=self.global_scale)


def random_rows(rng, R: int, K: int, *, weight_format: str, scale_format: str, block_size: int,
                zero_point: bool = False, global_scale: bool = False) -> RowCase:
    element = formats.element_format(weight_format)
    codes = rng.choice(_valid_codes(element), size=(R, K))
    w = formats.pack_rows(codes, element)
    G = math.ceil(K / block_size)
    scale = random_scales(rng, (R, G), scale_format, max(abs(element.min_value), element.max_value))
    zp = None
    if zero_point:
        zp = rng.choice(_valid_codes(element), size=(R, G)).astype(np.uint8)
    gs = None
    if global_scale:
        gs = np.asarray(rng.uniform(0.5, 2.0) / (64.0 if scale_format == "float8e4m3fn" else 1.0), dtype=np.float32)
    return RowCase(w, scale, zp, gs, K, block_size, weight_format, scale_format)
