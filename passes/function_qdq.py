"""The QuantizeDequantize body: fake quantization in blocks, static or dynamic scale.

X is viewed as [P, n, Q] around the blocked axis (P, Q: products of the dims before and
after it, computed at run time from Shape(X) and the `axis` attribute), zero-padded along n to
G * block_size and reshaped to [P, G, block_size, Q], so one [P, G, 1, Q] scale broadcasts
over its block whatever X's rank. The padding never changes a block's amax and is sliced off.

Per element, as onnxfuse.formats' reference computes (quantize_linear with the division in
float32, then dequantize_linear):
    v = x / s;  q = quantize(v) (integers: clip(round(v) + zp); floats: nearest value, saturating)
    y = (q - zp) * s
Scale rules of dynamic mode (onnxfuse/formats/scale_rules.py states the same):
    mx:     s = 2^clip(floor(log2 amax) - emax_elem [- 6 for MXINT8], -127, 127); amax 0 -> 2^-127
    nvfp4:  s = e4m3(max(amax / 6 / g, 2^-9)) * g, g the global_scale input (or, absent,
            amax(X) / 2688, 1 for an all-zero X)
    absmax: s = amax / max_elem (1 for an all-zero block), float32 scales only.
`b` is a passes.function_builder.BodyBuilder.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onnxfuse import codes, ops
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.formats import ElementFormat, ScaleFormat
from onnxfuse.formats.scale_rules import (
    E4M3_MIN_SUBNORMAL,
    MX_EMAX,
    MXINT8_IMPLICIT_EXP,
    NVFP4_E2M1_MAX,
    NVFP4_E4M3_MAX,
)
from onnxfuse.passes.function_decode import code_table
from onnxfuse.passes.function_rounding import (
    F32_MAX_EXP,
    F32_MIN_EXP,
    floor_log2,
    pow2,
    round_signed,
    round_to_float_grid,
    scalar,
)

E8M0_MIN_EXP, E8M0_MAX_EXP = -127, 127
INT64_MAX = np.iinfo(np.int64).max
FLOAT8 = ("float8e4m3fn", "float8e5m2")
# Nearest with ties to even / away from zero / toward +inf (Quark's 2 / 0 / 1), or directed.
ROUNDING_MODES = ops.QDQ_ROUNDING_MODES
DYNAMIC_SCALE_FORMATS = {"mx": "float8e8m0", "nvfp4": "float8e4m3fn", "absmax": "float32"}
STATIC_SCALE_FORMATS = ("float32", "float16", "bfloat16")


def check_combination(element: ElementFormat, fmt: ScaleFormat, *, mode: str, scale_rule: str, rounding_mode: str,
                      saturate: bool, has_zero_point: bool, has_global_scale: bool) -> None:
    """Raise OnnxfuseError for a combination this body cannot compute exactly."""
    def refuse(code, message):
        raise OnnxfuseError.of(code, f"QuantizeDequantize({element.name}): {message}")

    if mode not in ("static", "dynamic"):
        refuse(codes.ATTRIBUTE_INVALID, f"mode must be 'static' or 'dynamic', got {mode!r}")
    if rounding_mode not in ROUNDING_MODES:
        refuse(codes.ATTRIBUTE_INVALID, f"rounding_mode must be one of {', '.join(ROUNDING_MODES)}, got {rounding_mode!r}")
    if has_zero_point and element.is_float:
        refuse(codes.ZERO_POINT_FLOAT_FORMAT, "a float element format takes no zero point")
    if element.name in FLOAT8 and not saturate and rounding_mode != "even":
        refuse(codes.ATTRIBUTE_INVALID, "non-saturating float8 is computed by Cast, which rounds half to even only")
    if mode == "static":
        if fmt.name not in STATIC_SCALE_FORMATS:
            refuse(codes.SCALE_DTYPE_ILLEGAL, f"a static scale is float32, float16 or bfloat16 (decoded at optimize time), got {fmt.name}")
        return
    expected = DYNAMIC_SCALE_FORMATS.get(scale_rule)
    if expected is None:
        refuse(codes.ATTRIBUTE_INVALID, f"scale_rule must be mx, nvfp4 or absmax, got {scale_rule!r}")
    if fmt.name != expected:
        refuse(codes.SCALE_DTYPE_ILLEGAL, f"the {scale_rule} rule produces {expected} scales, not {fmt.name}")
    if has_zero_point:
        refuse(codes.ATTRIBUTE_INVALID, "dynamic mode computes symmetric scales; it takes no zero point")
    if scale_rule == "mx" and element.name not in MX_EMAX:
        refuse(codes.ELEMENT_TYPE_UNSUPPORTED, f"OCP MX has no {element.name} elements")
    if has_global_scale and scale_rule != "nvfp4":
        refuse(codes.ATTRIBUTE_INVALID, f"the {scale_rule} rule takes no global scale")


def build_quantize_dequantize(b, *, element: ElementFormat, fmt: ScaleFormat, mode: str, scale_rule: str,
                              rounding_mode: str, saturate: bool, has_zero_point: bool, has_global_scale: bool,
                              dtype: int) -> None:
    """Append the body reading X, scale, zero_point, global_scale and writing Y."""
    x = b.opaque(b.to_float("X", dtype))  # no Q/DQ of the model propagates into the body
    view = _BlockView(b, "X")
    x4 = view.blocks(x)
    zp = b.op("Reshape", b.op("Gather", b.const(code_table(element), "zp_lut"),
                              b.op("Cast", "zero_point", to=TensorProto.INT32), axis=0),
              view.scale_shape) if has_zero_point else None
    if mode == "static":
        s = b.op("Reshape", b.to_float("scale", fmt.onnx_type), view.scale_shape)
        if has_global_scale:
            s = b.op("Mul", s, "global_scale", hint="scale")
    else:
        amax = b.op("ReduceMax", b.op("Abs", x4), b.ints(2), keepdims=1, hint="amax")
        s = _dynamic_scale(b, amax, x, element, scale_rule, "global_scale" if has_global_scale else None)
    v = b.op("Div", x4, s, hint="v")
    if element.is_float:
        q = _quantize_float(b, v, element, rounding_mode, saturate)
    else:
        q = _quantize_int(b, v, zp, element, rounding_mode, mxint8=(mode == "dynamic" and scale_rule == "mx"))
        if zp is not None:
            q = b.op("Sub", q, zp)
    y = b.opaque(view.unblocks(b.op("Mul", q, s, hint="y4")))
    b.identity_to(y if dtype == TensorProto.FLOAT else b.op("Cast", y, to=dtype), "Y")


class _BlockView:
    """The run-time shapes of the [P, G, block_size, Q] view of X (see the module doc)."""

    def __init__(self, b, x: str):
        self.b = b
        self.shape = b.op("Shape", x, hint="x_shape")
        rank = b.op("Reshape", b.op("Size", self.shape), b.ints(1))
        axis = b.op("Mod", b.op("Add", b.attr_int("axis"), rank), rank, hint="axis")
        after = b.op("Add", axis, b.ints(1))
        one = b.ints(1)
        self.P = b.op("ReduceProd", b.op("Concat", one, b.op("Slice", self.shape, b.ints(0), axis), axis=0), keepdims=1)
        self.Q = b.op("ReduceProd", b.op("Concat", one, b.op("Slice", self.shape, after, b.ints(INT64_MAX)), axis=0),
                      keepdims=1)
        self.n = b.op("Slice", self.shape, axis, after, hint="n")
        bs = b.attr_int("block_size")
        self.G = b.op("Div", b.op("Sub", b.op("Add", self.n, bs), one), bs, hint="G")
        self.padded = b.op("Mul", self.G, bs)
        self.block_shape = b.op("Concat", self.P, self.G, bs, self.Q, axis=0)
        self.scale_shape = b.op("Concat", self.P, self.G, one, self.Q, axis=0)

    def blocks(self, x: str) -> str:
        b = self.b
        x3 = b.op("Reshape", x, b.op("Concat", self.P, self.n, self.Q, axis=0))
        pads = b.op("Concat", b.ints(0, 0, 0, 0), b.op("Sub", self.padded, self.n), b.ints(0), axis=0)
        return b.op("Reshape", b.op("Pad", x3, pads), self.block_shape, hint="x4")

    def unblocks(self, y4: str) -> str:
        b = self.b
        y3 = b.op("Reshape", y4, b.op("Concat", self.P, self.padded, self.Q, axis=0))
        return b.op("Reshape", b.op("Slice", y3, b.ints(0), self.n, b.ints(1)), self.shape, hint="y")


def _dynamic_scale(b, amax: str, x: str, element: ElementFormat, rule: str, global_scale: str | None) -> str:
    is_nan = b.op("IsNaN", amax)
    clean = b.op("Where", is_nan, scalar(b, 0.0), amax)
    if rule == "mx":
        shift = MX_EMAX[element.name] - (MXINT8_IMPLICIT_EXP if element.name == "int8" else 0)
        e = floor_log2(b, clean, F32_MIN_EXP, F32_MAX_EXP)
        shared = b.op("Clip", b.op("Sub", e, scalar(b, shift)), scalar(b, E8M0_MIN_EXP), scalar(b, E8M0_MAX_EXP))
        shared = b.op("Where", b.op("Equal", clean, scalar(b, 0.0)), scalar(b, E8M0_MIN_EXP), shared)
        s = pow2(b, shared, E8M0_MIN_EXP, E8M0_MAX_EXP)
    elif rule == "nvfp4":
        g = global_scale or _nvfp4_tensor_scale(b, x)
        target = b.op("Max", b.op("Div", b.op("Div", clean, scalar(b, NVFP4_E2M1_MAX)), g),
                      scalar(b, E4M3_MIN_SUBNORMAL))
        block = b.op("Cast", b.op("Cast", target, to=TensorProto.FLOAT8E4M3FN, saturate=1), to=TensorProto.FLOAT)
        s = b.op("Mul", block, g)
    else:  # absmax
        s = b.op("Div", clean, scalar(b, element.max_value))
        s = b.op("Where", b.op("Equal", clean, scalar(b, 0.0)), scalar(b, 1.0), s)
    return b.op("Where", is_nan, scalar(b, np.nan), s, hint="scale")


def _nvfp4_tensor_scale(b, x: str) -> str:
    amax = b.op("ReduceMax", b.op("Abs", x), keepdims=0)
    g = b.op("Div", amax, scalar(b, NVFP4_E2M1_MAX * NVFP4_E4M3_MAX))
    return b.op("Where", b.op("Equal", amax, scalar(b, 0.0)), scalar(b, 1.0), g, hint="global")


def _quantize_float(b, v: str, element: ElementFormat, rounding_mode: str, saturate: bool) -> str:
    if element.name in FLOAT8 and rounding_mode == "even":
        # Cast rounds half to even with ONNX's saturate semantics: exactly QuantizeLinear's.
        q = b.op("Cast", v, to=element.onnx_type, saturate=int(saturate))
        return b.op("Cast", q, to=TensorProto.FLOAT, hint="q")
    return round_to_float_grid(b, v, element, rounding_mode, keep_nan=element.name in FLOAT8)


def _quantize_int(b, v: str, zp: str | None, element: ElementFormat, rounding_mode: str, mxint8: bool) -> str:
    r = round_signed(b, v, rounding_mode)
    if zp is not None:
        r = b.op("Add", r, zp)
    lo = -element.max_value if mxint8 else element.min_value  # MXINT8 clips to the symmetric [-127, 127]
    q = b.op("Clip", r, scalar(b, lo), scalar(b, element.max_value))
    return b.op("Where", b.op("IsNaN", q), scalar(b, 0.0), q, hint="q")  # QuantizeLinear maps NaN to 0
