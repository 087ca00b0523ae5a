"""Quantization schemes: an element format, a scale format, a block size and a scale rule.

The rules themselves (OCP MX, NVFP4, absmax, minmax) are in scale_rules.py. `SCHEMES` is a
read-only mapping; `scheme(name)` looks one up.
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.formats import elements as E
from onnxfuse.formats import scale_rules
from onnxfuse.formats import scales as S
from onnxfuse.formats.elements import ElementFormat
from onnxfuse.formats.quantized import QuantizedTensor
from onnxfuse.formats.reference import normalize_axis
from onnxfuse.formats.scales import ScaleFormat, scale_format

# Scale formats an absmax/minmax scheme may store its scale in (legal DQ scales, ORT runs fp16/fp32).
FLOAT_SCALES = ("float32", "float16", "bfloat16")


@dataclasses.dataclass(frozen=True)
class Scheme:
    name: str
    element: ElementFormat
    scale: ScaleFormat  # the block scale's format
    block_size: int  # the default
    two_level: bool  # nvfp4: e4m3 block scales times a float32 per-tensor scale
    zero_point: bool  # asymmetric (unsigned integers)
    min_opset: int  # the ai.onnx opset a Q/DQ model of this scheme needs
    rule: str  # "mx", "nvfp4", "absmax", "minmax" (scale_rules.py)

    def quantize(self, w: np.ndarray, axis: int, block_size: int | None = None,
                 scale: ScaleFormat | str | None = None) -> QuantizedTensor:
        """RTN-quantize w (computed from its float32 copy) in blocks along `axis`."""
        w = np.asarray(w)
        if w.ndim == 0:
            raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, "cannot block-quantize a scalar")
        axis = normalize_axis(axis, w.ndim)
        bs = self.block_size if block_size is None else int(block_size)
        if bs <= 0:
            raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, f"block_size must be > 0, got {bs}")
        sfmt = self._scale_format(scale)
        w = w.astype(np.float32)
        scale_rules.check_finite(w)
        zp = gs = None
        if self.rule == "mx":
            data, s = scale_rules.mx(w, self.element, axis, bs)
        elif self.rule == "nvfp4":
            data, s, gs = scale_rules.nvfp4(w, self.element, axis, bs)
        elif self.rule == "absmax":
            data, s = scale_rules.absmax(w, self.element, sfmt, axis, bs)
        else:
            data, s, zp = scale_rules.minmax(w, self.element, sfmt, axis, bs)
        return QuantizedTensor(data, s, zp, gs, axis, bs, self)

    def _scale_format(self, scale) -> ScaleFormat:
        if scale is None:
            return self.scale
        sfmt = scale_format(scale)
        if sfmt == self.scale:
            return sfmt
        if self.rule in ("absmax", "minmax") and sfmt.name in FLOAT_SCALES:
            return sfmt
        allowed = ", ".join(FLOAT_SCALES) if self.rule in ("absmax", "minmax") else self.scale.name
        raise OnnxfuseError.of(codes.SCALE_DTYPE_ILLEGAL,
                               f"scheme {self.name} cannot store its scale as {sfmt.name} (allowed: {allowed})")

    def __str__(self) -> str:
        return self.name


def _mx(name: str, element: ElementFormat) -> Scheme:
    return Scheme(name, element, S.FLOAT8E8M0, 32, False, False, max(24, element.min_opset), "mx")


def _blocks(name: str, element: ElementFormat, block_size: int) -> Scheme:
    asym = not element.is_float and not element.signed
    return Scheme(name, element, S.FLOAT16, block_size, False, asym, max(21, element.min_opset),
                  "minmax" if asym else "absmax")


_ALL = (
    _mx("mxfp4", E.FLOAT4E2M1),
    _mx("mxfp6e2m3", E.FLOAT6E2M3),
    _mx("mxfp6e3m2", E.FLOAT6E3M2),
    _mx("mxfp8", E.FLOAT8E4M3FN),
    _mx("mxfp8e5m2", E.FLOAT8E5M2),
    _mx("mxint8", E.INT8),
    Scheme("nvfp4", E.FLOAT4E2M1, S.FLOAT8E4M3FN, 16, True, False, E.FLOAT4E2M1.min_opset, "nvfp4"),
    _blocks("int4", E.INT4, 32),
    _blocks("uint4", E.UINT4, 32),
    _blocks("int8", E.INT8, 128),
    _blocks("uint8", E.UINT8, 128),
    _blocks("int2", E.INT2, 32),
    _blocks("uint2", E.UINT2, 32),
    _blocks("fp8", E.FLOAT8E4M3FN, 128),
)

SCHEMES: types.MappingProxyType = types.MappingProxyType({s.name: s for s in _ALL})


def scheme(name: str) -> Scheme:
    """The scheme called `name`; raises OnnxfuseError(SCHEME_UNKNOWN) listing the known ones."""
    key = name.lower() if isinstance(name, str) else name
    if key not in SCHEMES:
        raise OnnxfuseError.of(codes.SCHEME_UNKNOWN, f"unknown quantization scheme {name!r}",
                               hint="known schemes: " + ", ".join(SCHEMES))
    return SCHEMES[key]



