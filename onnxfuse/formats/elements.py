"""Element formats: the quantized data types a block-scaled tensor's elements are stored in.

Each format knows its ONNX type, its bit width, its code -> value table (bit-exact, from
ml_dtypes, the library onnx.numpy_helper and onnx_ir use) and how ONNX packs it. Codes are
uint8 arrays of raw bit patterns; values are float32.
"""

from __future__ import annotations

import dataclasses
import math

import ml_dtypes
import numpy as np
from onnx import TensorProto

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.formats import packing


@dataclasses.dataclass(frozen=True)
class ElementFormat:
    name: str
    onnx_type: int
    bits: int
    is_float: bool
    signed: bool
    min_opset: int  # first ai.onnx opset whose DequantizeLinear accepts this type
    min_value: float
    max_value: float
    np_dtype: np.dtype
    # Codes per byte in ONNX's flat packing. None for float6: ONNX packs four codes in three
    # bytes (see pack/packed_size); the fused ops' row layout stores one per byte instead.
    codes_per_byte: int | None
    lut: np.ndarray = dataclasses.field(compare=False, repr=False)  # float32[2**bits]

    # --- sizes ----------------------------------------------------------------------
    @property
    def code_mask(self) -> int:
        return (1 << self.bits) - 1

    @property
    def row_codes_per_byte(self) -> int:
        """Codes per byte in docs/ops.md's row layout (float6: 1, one code per byte)."""
        return self.codes_per_byte or 1

    def row_bytes(self, K: int) -> int:
        """Kb: bytes per row of K elements in the row layout."""
        return math.ceil(K / self.row_codes_per_byte)

    def packed_size(self, count: int) -> int:
        """Bytes ONNX's flat packing of `count` elements takes (raw_data length)."""
        return math.ceil(count * self.bits / 8)

    # --- values ---------------------------------------------------------------------
    def decode(self, codes_: np.ndarray) -> np.ndarray:
        """uint8 codes -> float32 values (NaN where the code is NaN)."""
        c = np.asarray(codes_)
        if c.dtype != np.uint8:
            c = c.astype(np.uint8)
        return self.lut[c]

    def encode(self, x, saturate: bool = True) -> np.ndarray:
        """Float values -> uint8 codes, with ONNX QuantizeLinear's rounding of x (already
        divided by the scale): round half to even; integers clip to their range (NaN -> 0);
        float8 saturates to +-max when `saturate` (else overflow gives NaN/Inf as a Cast);
        float4/float6 have no Inf/NaN and always saturate, as ml_dtypes' cast (NaN -> -0)."""
        x = _as_float(x)
        if not self.is_float:
            r = np.rint(x)
            r = np.where(np.isnan(r), 0, np.clip(r, self.min_value, self.max_value))
            return (r.astype(np.int16) & self.code_mask).astype(np.uint8)
        if saturate and self.bits == 8:
            x = np.clip(x, self.min_value, self.max_value)  # NaN stays NaN
        return self.codes_of(x.astype(self.np_dtype))

    def codes_of(self, array) -> np.ndarray:
        """An array of np_dtype (or integers in range) -> uint8 raw codes."""
        a = np.asarray(array)
        if a.dtype == self.np_dtype:
            return a.view(np.uint8) & np.uint8(self.code_mask)
        if not self.is_float and np.issubdtype(a.dtype, np.integer):
            if a.size and (a.min() < self.min_value or a.max() > self.max_value):
                raise ValueError(f"{self.name} values must lie in [{self.min_value:g}, {self.max_value:g}]")
            return (a.astype(np.int16) & self.code_mask).astype(np.uint8)
        raise TypeError(f"{self.name}.codes_of expects {self.np_dtype} (or integers), got {a.dtype}")

    def from_codes(self, codes_: np.ndarray) -> np.ndarray:
        """uint8 codes -> array of np_dtype (the dtype onnx.numpy_helper.to_array returns)."""
        c = np.asarray(codes_, dtype=np.uint8) & np.uint8(self.code_mask)  # a fresh C array
        return c.view(self.np_dtype)

    # --- ONNX flat packing ----------------------------------------------------------------
    def pack(self, codes_: np.ndarray) -> np.ndarray:
        """Flat codes -> ONNX's packing of the type (raw_data bytes), padding bits zero."""
        if self.bits == 6:
            return packing.pack_6bit(codes_)
        return packing.pack_subbyte(codes_, self.bits)

    def unpack(self, packed: np.ndarray, count: int) -> np.ndarray:
        """Inverse of pack: the first `count` codes as a flat uint8 array."""
        if self.bits == 6:
            return packing.unpack_6bit(packed, count)
        return packing.unpack_subbyte(packed, count, self.bits)

    def __str__(self) -> str:
        return self.name


def _as_float(x) -> np.ndarray:
    """Widen to a float type ufuncs handle everywhere; exact (fp16/bf16 -> fp32)."""
    x = np.asarray(x)
    if x.dtype in (np.float32, np.float64):
        return x
    if x.dtype.kind in "iub":
        return x.astype(np.float64)
    return x.astype(np.float32)


def _integer(name, onnx_type, bits, signed, min_opset, np_dtype) -> ElementFormat:
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    raw = np.arange(1 << bits, dtype=np.int64)
    values = np.where(raw > hi, raw - (1 << bits), raw) if signed else raw
    return _make(name, onnx_type, bits, False, signed, min_opset, lo, hi, np_dtype, values)


def _float(name, onnx_type, bits, min_opset, np_dtype) -> ElementFormat:
    fmax = float(ml_dtypes.finfo(np_dtype).max)
    values = np.arange(1 << bits, dtype=np.uint8).view(np_dtype).astype(np.float32)
    return _make(name, onnx_type, bits, True, True, min_opset, -fmax, fmax, np_dtype, values)


def _make(name, onnx_type, bits, is_float, signed, min_opset, lo, hi, np_dtype, values) -> ElementFormat:
    lut = np.asarray(values, dtype=np.float32)
    lut.setflags(write=False)
    per_byte = None if bits == 6 else 8 // bits
    return ElementFormat(name, onnx_type, bits, is_float, signed, min_opset, float(lo), float(hi),
                         np.dtype(np_dtype), per_byte, lut)


INT4 = _integer("int4", TensorProto.INT4, 4, True, 21, ml_dtypes.int4)
UINT4 = _integer("uint4", TensorProto.UINT4, 4, False, 21, ml_dtypes.uint4)
INT2 = _integer("int2", TensorProto.INT2, 2, True, 25, ml_dtypes.int2)
UINT2 = _integer("uint2", TensorProto.UINT2, 2, False, 25, ml_dtypes.uint2)
INT8 = _integer("int8", TensorProto.INT8, 8, True, 10, np.int8)
UINT8 = _integer("uint8", TensorProto.UINT8, 8, False, 10, np.uint8)
FLOAT8E4M3FN = _float("float8e4m3fn", TensorProto.FLOAT8E4M3FN, 8, 19, ml_dtypes.float8_e4m3fn)
FLOAT8E5M2 = _float("float8e5m2", TensorProto.FLOAT8E5M2, 8, 19, ml_dtypes.float8_e5m2)
FLOAT4E2M1 = _float("float4e2m1", TensorProto.FLOAT4E2M1, 4, 23, ml_dtypes.float4_e2m1fn)
FLOAT6E2M3 = _float("float6e2m3", TensorProto.FLOAT6E2M3, 6, 28, ml_dtypes.float6_e2m3fn)
FLOAT6E3M2 = _float("float6e3m2", TensorProto.FLOAT6E3M2, 6, 28, ml_dtypes.float6_e3m2fn)

ELEMENT_FORMATS: tuple[ElementFormat, ...] = (
    INT4, UINT4, INT2, UINT2, INT8, UINT8,
    FLOAT8E4M3FN, FLOAT8E5M2, FLOAT4E2M1, FLOAT6E2M3, FLOAT6E3M2,
)


def element_format(key) -> ElementFormat:
    """Look a format up by name ("int4", "FLOAT4E2M1"), ONNX TensorProto type (an int, also
    onnx_ir.DataType) or numpy dtype. Raises OnnxfuseError(ELEMENT_TYPE_UNSUPPORTED)."""
    found = _lookup(key, ELEMENT_FORMATS, ElementFormat)
    if found is None:
        raise OnnxfuseError.of(
            codes.ELEMENT_TYPE_UNSUPPORTED,
            f"{_describe(key)} is not a quantized element format onnxfuse knows",
            hint="known: " + ", ".join(f.name for f in ELEMENT_FORMATS),
        )
    return found


def _lookup(key, table, cls):
    """Shared by element_format and scale_format: match by instance, name, ONNX type or dtype."""
    if isinstance(key, cls):
        return key if key in table else None
    if isinstance(key, str):
        k = key.lower()
        return next((f for f in table if f.name == k or TensorProto.DataType.Name(f.onnx_type).lower() == k), None)
    if isinstance(key, (int, np.integer)):
        return next((f for f in table if f.onnx_type == int(key)), None)
    try:
        dt = np.dtype(key)
    except TypeError:
        return None
    return next((f for f in table if f.np_dtype == dt), None)


def _describe(key) -> str:
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        try:
            return f"ONNX type {TensorProto.DataType.Name(int(key))} ({int(key)})"
        except ValueError:
            return f"ONNX type {int(key)}"
    return repr(key) if isinstance(key, str) else str(key)
