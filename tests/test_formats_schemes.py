"""Schemes: scale rules (OCP MX, NVFP4, absmax, minmax), error bounds, legality."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.formats import (
    ELEMENT_FORMATS,
    SCALE_FORMATS,
    SCHEMES,
    block_broadcast,
    element_format,
    scale_format,
    scale_legality,
    scheme,
)

INT_SCHEMES = [s for s in SCHEMES.values() if s.rule in ("absmax", "minmax") and not s.element.is_float]
FLOAT_SCHEMES = [s for s in SCHEMES.values() if s.element.is_float]


def _weights(shape, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32) * np.float32(2.0) ** rng.integers(-4, 4, shape)
    return w.astype(np.float32)


def _effective_scale(q) -> np.ndarray:
    """The per-element float32 scale the DQ graph applies (two-level: e4m3 * global)."""
    s = q.scale.astype(np.float32)
    if q.global_scale is not None:
        s = (s * q.global_scale).astype(np.float32)
    return block_broadcast(s, q.data.shape, q.axis, q.block_size).astype(np.float64)


@pytest.mark.parametrize("sch", SCHEMES.values(), ids=str)
@pytest.mark.parametrize("shape,axis,bs", [((6, 70), 1, None), ((45, 5), 0, 16), ((3, 4, 33), -1, 8)])
def test_quantize_shapes_and_dtypes(sch, shape, axis, bs):
    q = sch.quantize(_weights(shape), axis=axis, block_size=bs)
    block = bs or sch.block_size
    expected = list(shape)
    expected[axis] = math.ceil(shape[axis] / block)
    assert q.data.shape == shape and q.data.dtype == sch.element.np_dtype
    assert q.scale.shape == tuple(expected) and q.scale.dtype == sch.scale.np_dtype
    assert q.axis == axis % len(shape) and q.block_size == block and q.scheme is sch
    assert (q.zero_point is not None) == sch.zero_point
    assert (q.global_scale is not None) == sch.two_level
    d = q.dequantize()
    assert d.dtype == np.float32 and d.shape == shape
    rows = q.to_rows()
    if not sch.two_level:  # single-level: the row layout decodes to exactly the DQ values
        np.testing.assert_array_equal(rows.decode_original(), d)
    else:  # two-level: one float32 rounding apart (tests/test_formats_rows.py)
        np.testing.assert_allclose(rows.decode_original(), d, rtol=2.0 ** -22, atol=0)


@pytest.mark.parametrize("sch", INT_SCHEMES, ids=str)
@pytest.mark.parametrize("sname", ["float16", "bfloat16", "float32"])
def test_integer_schemes_error_at_most_half_a_step(sch, sname):
    w = _weights((8, 100), seed=1)
    w[0, :] = 0  # an all-zero row: its blocks get scale 1, never 0
    q = sch.quantize(w, axis=1, block_size=32, scale=sname)
    assert q.scale.dtype == scale_format(sname).np_dtype
    s = _effective_scale(q)
    err = np.abs(q.dequantize().astype(np.float64) - w)
    # exact bound s/2; slack: the float32 product code * s (one rounding, 2^-24 relative) and the
    # float32 subtraction of the zero point are exact for these small integers
    assert np.all(err <= s / 2 * (1 + 2.0 ** -20) + np.abs(w) * 2.0 ** -23)
    assert np.all(q.scale.astype(np.float32) > 0)
    assert np.all(q.scale[0].astype(np.float32) == 1.0)
    if q.zero_point is not None:
        assert np.all(q.zero_point[0].astype(np.int64) == 0)


@pytest.mark.parametrize("sch", FLOAT_SCHEMES, ids=str)
def test_float_schemes_round_to_nearest_element(sch):
    """Every element is the nearest value of its grid to w / scale (RNE; saturating), so the
    error is at most half the local step, or the distance to the top value."""
    w = _weights((6, 96), seed=2)
    q = sch.quantize(w, axis=1)
    s = _effective_scale(q)
    target = w.astype(np.float64) / s
    lut = sch.element.lut[np.isfinite(sch.element.lut)].astype(np.float64)
    got = sch.element.decode(sch.element.codes_of(q.data)).astype(np.float64)
    nearest = np.abs(target[..., None] - lut).min(axis=-1)
    # target is computed in float64 here and in float32 by QuantizeLinear: one float32 rounding
    np.testing.assert_allclose(np.abs(target - got), nearest, rtol=0, atol=np.abs(target).max() * 2.0 ** -23)


def test_absmax_does_not_saturate():
    for name in ("int4", "int8", "int2", "fp8"):
        q = scheme(name).quantize(_weights((4, 64), 3), axis=1)
        codes_ = q.scheme.element.decode(q.scheme.element.codes_of(q.data))
        assert np.abs(codes_).max() <= q.scheme.element.max_value
        if name != "fp8":
            assert codes_.min() >= -q.scheme.element.max_value  # symmetric: -8 / -128 / -2 never used


# --- OCP MX shared exponent on hand-computed blocks ----------------------------------

@pytest.mark.parametrize("name,amax,expected_exp", [
    ("mxfp4", 1.0, -2),        # floor(log2 1) - 2
    ("mxfp4", 6.0, 0),         # floor(log2 6) = 2, - 2
    ("mxfp4", 7.9, 0),
    ("mxfp8", 6.5, -6),        # 2 - 8
    ("mxfp8e5m2", 1000.0, -6),  # 9 - 15
    ("mxfp6e2m3", 0.3, -4),    # -2 - 2
    ("mxfp6e3m2", 100.0, 2),   # 6 - 4
    ("mxint8", 1.0, -6),       # 0 - 0, DQ scale 2^(e - 6)
    ("mxint8", 3.0, -5),
    ("mxfp4", 2.0 ** -130, -127),  # clamped to the E8M0 range
    ("mxfp4", 0.0, -127),          # all-zero block: the smallest scale
    ("mxfp8", 2.0 ** 127, 119),
])
def test_mx_shared_exponent(name, amax, expected_exp):
    w = np.zeros((1, 32), np.float32)
    w[0, 5] = amax
    w[0, 6] = -amax / 3
    q = scheme(name).quantize(w, axis=1)
    assert q.scale.dtype == scale_format("float8e8m0").np_dtype
    code = int(q.scale.view(np.uint8)[0, 0])
    assert code - 127 == expected_exp
    if amax == 0:
        assert np.all(q.dequantize() == 0)


def test_mx_elements_by_hand():
    w = np.float32([[1.0, 0.3, -0.7, 6.5, 0.24] + [0] * 27])  # amax 6.5 -> mxfp4 scale 2^0
    q = scheme("mxfp4").quantize(w, axis=1)
    assert q.dequantize()[0, :5].tolist() == [1.0, 0.5, -0.5, 6.0, 0.0]  # 0.3 -> 0.5, -0.7 -> -0.5, 6.5 saturates
    q = scheme("mxint8").quantize(np.float32([[1.0, -0.5, 0.01, 0.0]]), axis=1)
    assert q.data.tolist() == [[64, -32, 1, 0]] and int(q.scale.view(np.uint8)[0, 0]) == 127 - 6
    q = scheme("mxint8").quantize(np.float32([[1.999, -1.999]]), axis=1)
    assert q.data.tolist() == [[127, -127]]  # OCP's symmetric clip: -128 is not produced


def test_nvfp4_two_level_values():
    w = np.zeros((2, 32), np.float32)
    w[0, 0] = 6 * 448  # tensor amax -> global scale exactly 1
    w[0, 16:19] = [3.0, -1.5, 0.7]  # block amax 3 -> block scale 0.5
    w[1, 0:2] = [12.0, 5.0]  # block amax 12 -> scale 2; 5 / 2 = 2.5 -> tie to 2 -> 4.0
    q = scheme("nvfp4").quantize(w, axis=1)
    assert q.global_scale.dtype == np.float32 and q.global_scale.shape == () and float(q.global_scale) == 1.0
    s = q.scale.astype(np.float32)
    assert s[0, 0] == 448 and s[0, 1] == 0.5 and s[1, 0] == 2.0
    assert s[1, 1] == 2.0 ** -9  # an all-zero block: the smallest E4M3 subnormal, not 0
    d = q.dequantize()
    assert d[0, 0] == 6 * 448 and d[0, 16:19].tolist() == [3.0, -1.5, 0.75] and d[1, 0:2].tolist() == [12.0, 4.0]


def test_nvfp4_global_scale_rule():
    w = _weights((4, 64), 5)
    q = scheme("nvfp4").quantize(w, axis=1)
    assert q.global_scale == np.float32(np.float32(np.abs(w).max()) / np.float32(6 * 448))
    target = (np.abs(w).reshape(4, 4, 16).max(-1) / np.float32(6)) / q.global_scale
    expected = scale_format("float8e4m3fn").encode(np.maximum(target, np.float32(2.0 ** -9)))
    np.testing.assert_array_equal(q.scale.view(np.uint8), expected.view(np.uint8))
    zero = scheme("nvfp4").quantize(np.zeros((2, 16), np.float32), axis=1)
    assert float(zero.global_scale) == 1.0 and np.all(zero.dequantize() == 0)


def test_int_rules_by_hand():
    q = scheme("int4").quantize(np.float32([[7.0, -3.5, 1.0, 0.0]]), axis=1, block_size=4)
    assert float(q.scale[0, 0]) == 1.0 and q.data.astype(int).tolist() == [[7, -4, 1, 0]]  # -3.5 ties to -4
    q = scheme("uint4").quantize(np.float32([[-1.0, 2.0, 0.0, 0.5]]), axis=1, block_size=4)
    target = np.float32(3.0) / np.float32(15)
    up = np.float16(target) if np.float32(np.float16(target)) >= target else np.nextafter(np.float16(target), np.float16(1))
    assert q.scale[0, 0] == up and np.float32(up) > target  # 0.2 is not a float16: the next one up
    assert int(q.zero_point[0, 0]) == 5  # rint(1 / 0.2)
    q = scheme("int2").quantize(np.float32([[2.0, -2.0, 0.9, 0.0]]), axis=1, block_size=4)
    assert float(q.scale[0, 0]) == 2.0 and q.data.astype(int).tolist() == [[1, -1, 0, 0]]


def test_scale_rounds_up_into_the_scale_format():
    w = np.float32([[0.1, 0.0]])  # 0.1 / 7 is not a float16: rounded up, never down
    q = scheme("int4").quantize(w, axis=1, block_size=2)
    assert np.float32(q.scale[0, 0]) >= np.float32(0.1) / np.float32(7)


# --- errors and lookups -------------------------------------------------------------

def test_scheme_lookup():
    assert set(SCHEMES) == {"mxfp4", "mxfp6e2m3", "mxfp6e3m2", "mxfp8", "mxfp8e5m2", "mxint8", "nvfp4", "int4",
                            "uint4", "int8", "uint8", "int2", "uint2", "fp8"}
    assert scheme("MXFP4") is SCHEMES["mxfp4"]
    with pytest.raises(TypeError):
        SCHEMES["x"] = SCHEMES["int4"]
    with pytest.raises(OnnxfuseError) as e:
        scheme("int3")
    assert e.value.diagnostics[0].code is codes.SCHEME_UNKNOWN and "mxfp4" in e.value.diagnostics[0].hint


def test_quantize_errors():
    w = _weights((4, 32))
    cases = [
        (lambda: scheme("mxfp4").quantize(w, 1, scale="float16"), codes.SCALE_DTYPE_ILLEGAL),
        (lambda: scheme("int4").quantize(w, 1, scale="float8e8m0"), codes.SCALE_DTYPE_ILLEGAL),
        (lambda: scheme("int4").quantize(w, 2), codes.ATTRIBUTE_INVALID),
        (lambda: scheme("int4").quantize(w, 1, block_size=0), codes.ATTRIBUTE_INVALID),
        (lambda: scheme("int4").quantize(np.float32([[np.nan, 1.0]]), 1), codes.SCALE_NAN_INF),
        (lambda: scheme("int8").quantize(np.float32([[1e8, 1.0]]), 1), codes.SCALE_OUT_OF_COMPUTE_RANGE),
    ]
    for fn, code in cases:
        with pytest.raises(OnnxfuseError) as e:
            fn()
        assert e.value.diagnostics[0].code is code
    assert scheme("int8").quantize(np.float32([[1e8, 1.0]]), 1, scale="float32").scale.dtype == np.float32


# --- legality -----------------------------------------------------------------------

# (scale, first opset where it is a legal DequantizeLinear scale); None: never (DESIGN.md).
SCALE_FIRST_OPSET = {"float32": 10, "float16": 19, "bfloat16": 19, "float8e8m0": 24, "float8e4m3fn": None}


@pytest.mark.parametrize("element", ELEMENT_FORMATS, ids=str)
@pytest.mark.parametrize("sfmt", SCALE_FORMATS, ids=str)
def test_scale_legality_per_opset(element, sfmt):
    for opset in range(9, 29):
        why = scale_legality(element, sfmt, opset)
        first = SCALE_FIRST_OPSET[sfmt.name]
        legal = opset >= element.min_opset and first is not None and opset >= first
        assert (why is None) == legal, (opset, why)
        if not legal:
            assert isinstance(why, str) and (f"model has {opset}" in why or "not a legal" in why), why


def test_scale_legality_messages():
    fp4, int4 = element_format("float4e2m1"), element_format("int4")
    assert scale_legality(int4, scale_format("float8e8m0"), 21) == "float8e8m0 scales need opset >= 24 (model has 21)"
    assert "two-level" in scale_legality(fp4, scale_format("float8e4m3fn"), 23)
    assert scale_legality(fp4, scale_format("float16"), 21) == "float4e2m1 data needs opset >= 23 (model has 21)"
    assert scale_legality(fp4, scale_format("float8e4m3fn"), 23, inner_of_two_level=True) is None
    assert scale_legality(element_format("int8"), scale_format("float8e4m3fn"), 18, inner_of_two_level=True) == \
        "float8e4m3fn block scales (inner DequantizeLinear data) need opset >= 19 (model has 18)"
    assert "any opset" in scale_legality(fp4, scale_format("float8e8m0"), 25, inner_of_two_level=True)


@pytest.mark.parametrize("sch", SCHEMES.values(), ids=str)
def test_scheme_min_opset_is_legal(sch):
    assert scale_legality(sch.element, sch.scale, sch.min_opset, inner_of_two_level=sch.two_level) is None
    assert sch.min_opset >= 21 or sch.two_level  # blocked Q/DQ needs opset 21
    if sch.min_opset > 21:  # driven by a type: one opset earlier is illegal
        assert scale_legality(sch.element, sch.scale, sch.min_opset - 1, inner_of_two_level=sch.two_level) is not None
    q = sch.quantize(_weights((2, 32)), axis=1)
    assert q.dequantize(TensorProto.FLOAT16).dtype == np.float16
