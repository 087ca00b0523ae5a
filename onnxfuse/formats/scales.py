"""Scale formats: the data types a block scale is stored in.

`np_dtype` is the dtype of the scale as an ONNX tensor (what onnx.numpy_helper.to_array
returns); `storage_dtype` is how the fused ops store it (docs/ops.md): raw bits for bfloat16
(uint16), float8e8m0 and float8e4m3fn (uint8). Decoding is exact in float32 for all five:
every E8M0 value 2^-127..2^127 and every bf16/fp16/e4m3 value is a float32.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
from onnx import TensorProto

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.formats.elements import _describe, _lookup

E8M0_NAN_CODE = 0xFF
E8M0_BIAS = 127


@dataclasses.dataclass(frozen=True)
class ScaleFormat:
    name: str
    onnx_type: int
    bits: int
    np_dtype: np.dtype
    storage_dtype: np.dtype

    @property
    def stored_as_bits(self) -> bool:
        return self.storage_dtype != self.np_dtype

    @property
    def lut(self) -> np.ndarray | None:
        """float32[256] code -> value for the 8-bit formats (None otherwise)."""
        if self.bits != 8:
            return None
        return np.arange(256, dtype=np.uint8).view(self.np_dtype).astype(np.float32)

    def decode(self, stored) -> np.ndarray:
        """stored (storage_dtype raw bits or np_dtype values) -> float32, exact."""
        a = np.asarray(stored)
        if a.dtype == self.storage_dtype and self.stored_as_bits:
            a = a.view(self.np_dtype)
        elif a.dtype != self.np_dtype:
            raise TypeError(f"{self.name} scale: expected {self.np_dtype} or {self.storage_dtype}, got {a.dtype}")
        return a.astype(np.float32)

    def to_storage(self, array) -> np.ndarray:
        """np_dtype values -> storage_dtype (raw bits where docs/ops.md says so)."""
        a = np.asarray(array)
        if a.dtype == self.storage_dtype:
            return np.array(a, order="C")
        if a.dtype != self.np_dtype:
            raise TypeError(f"{self.name} scale: to_storage expects {self.np_dtype}, got {a.dtype}; encode() first")
        return np.array(a, order="C").view(self.storage_dtype)

    def from_storage(self, stored) -> np.ndarray:
        """storage_dtype -> np_dtype (inverse of to_storage)."""
        a = np.array(stored, order="C")  # keeps 0-d arrays 0-d, unlike ascontiguousarray
        return a if a.dtype == self.np_dtype else a.view(self.np_dtype)

    def encode(self, x) -> np.ndarray:
        """Float values -> np_dtype.

        float32/float16/bfloat16: round to nearest even (fp16 overflows to Inf, as a Cast).
        float8e4m3fn: round to nearest even, saturating to +-448 (NaN stays NaN).
        float8e8m0: exact powers of two map to themselves; other positive values round to the
        nearest power of two in linear distance, the midpoint 1.5 * 2^e rounding up (as
        ml_dtypes and onnx.numpy_helper's "nearest" mode); clamped to [2^-127, 2^127]; zero
        maps to 2^-127 (E8M0 has no zero); negative, NaN and Inf map to NaN (code 0xFF).
        Schemes compute E8M0 exponents directly (see schemes.py) and never rely on rounding.
        """
        x = np.asarray(x)
        if self.name == "float8e8m0":
            return e8m0_from_exponent(_e8m0_round_exponent(x))
        if self.name == "float8e4m3fn":
            return np.clip(x.astype(np.float32), -448.0, 448.0).astype(self.np_dtype)
        with np.errstate(over="ignore"):  # overflow gives Inf, as a Cast; callers check
            return x.astype(self.np_dtype)

    def __str__(self) -> str:
        return self.name


def e8m0_from_exponent(exp) -> np.ndarray:
    """Integer exponents e in [-127, 127] -> float8_e8m0fnu values 2^e (code e + 127).
    NaN is spelled as the exponent 128 (code 0xFF)."""
    e = np.asarray(exp, dtype=np.int64)
    if e.size and (e.min() < -E8M0_BIAS or e.max() > E8M0_NAN_CODE - E8M0_BIAS):
        raise ValueError("E8M0 exponents must lie in [-127, 127] (128 for NaN)")
    return (e + E8M0_BIAS).astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)


def _e8m0_round_exponent(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        mant, exp = np.frexp(x)  # x = mant * 2^exp, mant in [0.5, 1)
    e = exp.astype(np.int64) - 1  # x = (2 mant) * 2^e, 2 mant in [1, 2)
    e = np.where(2 * mant >= 1.5, e + 1, e)
    e = np.clip(e, -E8M0_BIAS, E8M0_BIAS)
    e = np.where(x == 0, -E8M0_BIAS, e)
    bad = ~np.isfinite(x) | (x < 0)
    return np.where(bad, E8M0_NAN_CODE - E8M0_BIAS, e)


FLOAT32 = ScaleFormat("float32", TensorProto.FLOAT, 32, np.dtype(np.float32), np.dtype(np.float32))
FLOAT16 = ScaleFormat("float16", TensorProto.FLOAT16, 16, np.dtype(np.float16), np.dtype(np.float16))
BFLOAT16 = ScaleFormat("bfloat16", TensorProto.BFLOAT16, 16, np.dtype(ml_dtypes.bfloat16), np.dtype(np.uint16))
FLOAT8E8M0 = ScaleFormat("float8e8m0", TensorProto.FLOAT8E8M0, 8, np.dtype(ml_dtypes.float8_e8m0fnu), np.dtype(np.uint8))
FLOAT8E4M3FN = ScaleFormat("float8e4m3fn", TensorProto.FLOAT8E4M3FN, 8, np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(np.uint8))

SCALE_FORMATS: tuple[ScaleFormat, ...] = (FLOAT32, FLOAT16, BFLOAT16, FLOAT8E8M0, FLOAT8E4M3FN)


def scale_format(key) -> ScaleFormat:
    """Look a scale format up by name, ONNX type or numpy dtype (np_dtype, not storage_dtype:
    uint8 is ambiguous). Raises OnnxfuseError(SCALE_DTYPE_ILLEGAL)."""
    found = _lookup(key, SCALE_FORMATS, ScaleFormat)
    if found is None:
        raise OnnxfuseError.of(
            codes.SCALE_DTYPE_ILLEGAL,
            f"{_describe(key)} is not a scale format onnxfuse knows",
            hint="known: " + ", ".join(f.name for f in SCALE_FORMATS),
        )
    return found
