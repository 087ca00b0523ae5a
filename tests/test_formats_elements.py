"""Element and scale formats: value tables, encoding, packing, lookups (onnxfuse.formats)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, numpy_helper

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.formats import (
    ELEMENT_FORMATS,
    SCALE_FORMATS,
    dq_input_types,
    e8m0_from_exponent,
    element_format,
    scale_format,
)

FLOATS = [f for f in ELEMENT_FORMATS if f.is_float]
INTS = [f for f in ELEMENT_FORMATS if not f.is_float]
SETTINGS = settings(max_examples=40, derandomize=True, deadline=None)


def bits_equal(a, b) -> bool:
    """Bitwise float32 equality that treats every NaN as equal."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and bool(np.all((a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))))


@pytest.mark.parametrize("fmt", ELEMENT_FORMATS, ids=str)
def test_lut_matches_ml_dtypes(fmt):
    all_codes = np.arange(1 << fmt.bits, dtype=np.uint8)
    expected = all_codes.view(fmt.np_dtype).astype(np.float32)
    assert fmt.lut.dtype == np.float32 and fmt.lut.shape == (1 << fmt.bits,)
    assert bits_equal(fmt.lut, expected)
    assert bits_equal(fmt.decode(all_codes), expected)
    assert not fmt.lut.flags.writeable


@pytest.mark.parametrize("fmt", ELEMENT_FORMATS, ids=str)
def test_codes_round_trip_through_np_dtype(fmt):
    all_codes = np.arange(1 << fmt.bits, dtype=np.uint8)
    arr = fmt.from_codes(all_codes)
    assert arr.dtype == fmt.np_dtype
    np.testing.assert_array_equal(fmt.codes_of(arr), all_codes)


def test_known_values():
    assert list(element_format("float4e2m1").lut[:8]) == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert element_format("float4e2m1").lut[8:].tolist() == [-0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    assert element_format("int4").lut.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1]
    assert element_format("int2").lut.tolist() == [0, 1, -2, -1]
    ranges = {"float8e4m3fn": 448, "float8e5m2": 57344, "float4e2m1": 6, "float6e2m3": 7.5, "float6e3m2": 28}
    for name, top in ranges.items():
        f = element_format(name)
        assert (f.min_value, f.max_value) == (-top, top)
        assert np.nanmax(f.lut[np.isfinite(f.lut)]) == top
    e4m3 = element_format("float8e4m3fn").lut
    assert np.isnan(e4m3[0x7F]) and np.isnan(e4m3[0xFF]) and np.isnan(e4m3).sum() == 2


def test_codes_of_integers_and_errors():
    int4 = element_format("int4")
    np.testing.assert_array_equal(int4.codes_of(np.array([-8, -1, 0, 7])), [8, 15, 0, 7])
    with pytest.raises(ValueError):
        int4.codes_of(np.array([8]))
    with pytest.raises(TypeError):
        int4.codes_of(np.array([1.0], np.float32))


# --- encode ------------------------------------------------------------------------

def _probe_values(fmt) -> np.ndarray:
    """Every finite value, the midpoints between neighbours (RNE ties), just off them, beyond the range."""
    v = np.unique(fmt.lut[np.isfinite(fmt.lut)].astype(np.float64))
    mid = (v[:-1] + v[1:]) / 2
    probes = np.concatenate([v, mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf),
                             [fmt.max_value * 1.01, fmt.min_value * 1.01, fmt.max_value * 4, -fmt.max_value * 4, 1e30, -1e30]])
    return probes.astype(np.float32)


@pytest.mark.parametrize("fmt", FLOATS, ids=str)
def test_encode_float_matches_ml_dtypes_saturating(fmt):
    x = np.concatenate([_probe_values(fmt), np.float32([np.inf, -np.inf])])
    clipped = np.clip(x, fmt.min_value, fmt.max_value)
    expected = clipped.astype(fmt.np_dtype).view(np.uint8) & fmt.code_mask
    np.testing.assert_array_equal(fmt.encode(x), expected)
    # the result is the nearest value, ties to the even code
    got = fmt.decode(fmt.encode(x))
    finite = np.isfinite(x)
    dist = np.abs(clipped[finite][:, None] - fmt.lut[np.isfinite(fmt.lut)][None, :]).min(axis=1)
    np.testing.assert_array_equal(np.abs(got[finite] - clipped[finite]), dist)


@pytest.mark.parametrize("fmt", [element_format("float8e4m3fn"), element_format("float8e5m2")], ids=str)
def test_encode_float8_without_saturation(fmt):
    x = np.float32([fmt.max_value * 4, -fmt.max_value * 4, np.inf])
    got = fmt.decode(fmt.encode(x, saturate=False))
    if fmt.name == "float8e4m3fn":
        assert np.all(np.isnan(got))  # e4m3fn has no Inf: overflow is NaN, as a Cast
    else:
        assert got.tolist() == [np.inf, -np.inf, np.inf]
    assert np.isnan(fmt.decode(fmt.encode(np.float32([np.nan]))))[0]


@pytest.mark.parametrize("fmt", INTS, ids=str)
def test_encode_int_round_half_even_and_clip(fmt):
    x = np.float32([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, 1.51, 1e9, -1e9, np.nan])
    expected = np.clip(np.rint(x), fmt.min_value, fmt.max_value)
    expected[np.isnan(expected)] = 0
    np.testing.assert_array_equal(fmt.decode(fmt.encode(x)), expected)


def _onnx_quantize(x: np.ndarray, fmt, saturate: int = 1) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator
    node = onnx.helper.make_node("QuantizeLinear", ["x", "s"], ["y"], output_dtype=fmt.onnx_type, saturate=saturate)
    graph = onnx.helper.make_graph(
        [node], "q", [onnx.helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [onnx.helper.make_tensor_value_info("y", fmt.onnx_type, [None])],
        [numpy_helper.from_array(np.float32(1.0), "s")])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 25)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("fmt", [f for f in ELEMENT_FORMATS if f.bits != 6] + [f for f in FLOATS if f.bits == 6], ids=str)
def test_encode_matches_onnx_reference_quantize(fmt):
    x = _probe_values(fmt)
    if not fmt.is_float:
        # onnx.reference casts rint(x) to int32 before clipping: beyond int32 that is undefined
        x = np.concatenate([x[np.abs(x) < 2.0 ** 31], np.float32([0.5, 1.5, 2.5, -0.5, -1.5, -2.5])])
    expected = _onnx_quantize(x, fmt)
    np.testing.assert_array_equal(fmt.encode(x), fmt.codes_of(expected))


# --- packing -------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ELEMENT_FORMATS, ids=str)
@SETTINGS
@given(data=st.data())
def test_pack_unpack_round_trip(fmt, data):
    n = data.draw(st.integers(0, 37))
    values = data.draw(st.lists(st.integers(0, fmt.code_mask), min_size=n, max_size=n))
    c = np.array(values, dtype=np.uint8)
    packed = fmt.pack(c)
    assert packed.dtype == np.uint8 and packed.size == fmt.packed_size(n)
    np.testing.assert_array_equal(fmt.unpack(packed, n), c)


@pytest.mark.parametrize("fmt", [f for f in ELEMENT_FORMATS if f.bits < 8], ids=str)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 33])
def test_pack_equals_onnx_raw_data(fmt, n):
    rng = np.random.default_rng(n)
    c = rng.integers(0, 1 << fmt.bits, n).astype(np.uint8)
    proto = numpy_helper.from_array(fmt.from_codes(c), "t")
    assert proto.data_type == fmt.onnx_type
    np.testing.assert_array_equal(fmt.pack(c), np.frombuffer(proto.raw_data, np.uint8))
    np.testing.assert_array_equal(fmt.codes_of(numpy_helper.to_array(proto)), c)


def test_padding_bits_are_zero():
    assert element_format("int4").pack(np.uint8([0xF])).tolist() == [0x0F]
    assert element_format("uint2").pack(np.uint8([3, 3, 3])).tolist() == [0x3F]
    assert element_format("float6e2m3").pack(np.uint8([0x3F])).tolist() == [0x3F]


def test_unpack_rejects_short_buffers():
    with pytest.raises(ValueError):
        element_format("int4").unpack(np.zeros(2, np.uint8), 5)


# --- lookups -------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ELEMENT_FORMATS, ids=str)
def test_element_format_lookup(fmt):
    assert element_format(fmt.name) is fmt
    assert element_format(fmt.name.upper()) is fmt
    assert element_format(TensorProto.DataType.Name(fmt.onnx_type)) is fmt
    assert element_format(fmt.onnx_type) is fmt
    assert element_format(fmt.np_dtype) is fmt
    assert element_format(fmt) is fmt
    assert onnx.helper.tensor_dtype_to_np_dtype(fmt.onnx_type) == fmt.np_dtype


def test_element_format_lookup_by_onnx_ir_type():
    import onnx_ir
    assert element_format(onnx_ir.DataType.FLOAT4E2M1).name == "float4e2m1"


@pytest.mark.parametrize("key", ["float32", TensorProto.FLOAT, np.float16, "int16", TensorProto.INT32, 999, "nope"])
def test_element_format_unknown(key):
    with pytest.raises(OnnxfuseError) as err:
        element_format(key)
    assert err.value.diagnostics[0].code is codes.ELEMENT_TYPE_UNSUPPORTED


@pytest.mark.parametrize("fmt", ELEMENT_FORMATS, ids=str)
def test_min_opset_agrees_with_dq_schema(fmt):
    assert fmt.onnx_type in dq_input_types(fmt.min_opset, 0)
    assert fmt.onnx_type not in dq_input_types(fmt.min_opset - 1, 0)


# --- scale formats ---------------------------------------------------------------------

@pytest.mark.parametrize("fmt", SCALE_FORMATS, ids=str)
def test_scale_format_lookup_and_storage(fmt):
    assert scale_format(fmt.name) is fmt and scale_format(fmt.onnx_type) is fmt and scale_format(fmt.np_dtype) is fmt
    values = fmt.encode(np.float32([0.5, 1.0, 2.0 ** -10, 3.0]))
    stored = fmt.to_storage(values)
    assert stored.dtype == fmt.storage_dtype
    assert bits_equal(fmt.decode(stored), values.astype(np.float32))
    assert bits_equal(fmt.decode(values), values.astype(np.float32))
    np.testing.assert_array_equal(fmt.from_storage(stored).view(np.uint8), values.view(np.uint8))


def test_scale_format_unknown():
    for key in ["int4", TensorProto.INT8, np.uint8]:
        with pytest.raises(OnnxfuseError) as err:
            scale_format(key)
        assert err.value.diagnostics[0].code is codes.SCALE_DTYPE_ILLEGAL


@pytest.mark.parametrize("name", ["bfloat16", "float8e8m0", "float8e4m3fn"])
def test_scale_decode_every_code_exact(name):
    fmt = scale_format(name)
    n = 1 << fmt.bits
    raw = np.arange(n, dtype=fmt.storage_dtype)
    with np.errstate(invalid="ignore"):
        expected = raw.view(fmt.np_dtype).astype(np.float64)  # float64: no rounding at all
    got = fmt.decode(raw)
    assert got.dtype == np.float32
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(got[finite].astype(np.float64), expected[finite])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))


def test_e8m0_values_and_encode():
    e8m0 = scale_format("float8e8m0")
    lut = e8m0.lut
    assert lut[127] == 1.0 and lut[0] == np.float32(2.0 ** -127) and lut[254] == np.float32(2.0 ** 127)
    assert np.isnan(lut[255]) and np.isnan(lut).sum() == 1 and np.all(lut[:255] > 0)
    x = np.float32([1.0, 2.0 ** -127, 2.0 ** 127, 3.0, 2.9, 5.0, 6.0, 0.0, 1e-45, 1e38 * 3, -1.0, np.nan, np.inf])
    expected = [0, -127, 127, 2, 1, 2, 3, -127, -127, 127, 128, 128, 128]
    np.testing.assert_array_equal(e8m0.to_storage(e8m0.encode(x)).astype(int) - 127, expected)
    np.testing.assert_array_equal(e8m0.to_storage(e8m0_from_exponent([-127, 0, 127])), [0, 127, 254])
    # agrees with onnx's own converter in "nearest" mode on positive finite values
    ref = numpy_helper.to_float8e8m0(x[:10], saturate=True, round_mode="nearest")
    np.testing.assert_array_equal(e8m0.to_storage(e8m0.encode(x[:10])), ref.view(np.uint8))


def test_e4m3_scale_encode_saturates():
    e4m3 = scale_format("float8e4m3fn")
    assert e4m3.decode(e4m3.encode(np.float32([1000, -1000, 0.1]))).tolist() == [448, -448, np.float32(0.1).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)]
