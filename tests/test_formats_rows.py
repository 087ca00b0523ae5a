"""The row layout of docs/ops.md: packing per row, to_rows/from_rows, decode_rows."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.formats import (
    ELEMENT_FORMATS,
    decode_rows,
    dequantize_linear,
    element_format,
    from_rows,
    pack_quantized,
    pack_rows,
    scale_format,
    to_rows,
    unpack_rows,
)

SETTINGS = settings(max_examples=30, derandomize=True, deadline=None)


@pytest.mark.parametrize("fmt", ELEMENT_FORMATS, ids=str)
@SETTINGS
@given(R=st.integers(1, 4), K=st.integers(1, 37), seed=st.integers(0, 2**16))
def test_pack_rows_round_trip_and_per_row_onnx_packing(fmt, R, K, seed):
    c = np.random.default_rng(seed).integers(0, 1 << fmt.bits, (R, K)).astype(np.uint8)
    packed = pack_rows(c, fmt)
    assert packed.dtype == np.uint8 and packed.shape == (R, fmt.row_bytes(K))
    np.testing.assert_array_equal(unpack_rows(packed, K, fmt), c)
    for r in range(R):
        if fmt.bits == 6:  # docs/ops.md: one 6-bit code per byte, not ONNX's 4-in-3
            np.testing.assert_array_equal(packed[r], c[r])
        else:
            np.testing.assert_array_equal(packed[r], fmt.pack(c[r]))


def test_row_packing_by_hand():
    # int4 row [1, -1, 7] -> bytes [0xF1, 0x07]: element k even in the low nibble, padding zero
    assert pack_rows(np.uint8([[1, 15, 7]]), element_format("int4")).tolist() == [[0xF1, 0x07]]
    # uint2 row [1, 2, 3, 0, 3] -> [0b00111001, 0b00000011]
    assert pack_rows(np.uint8([[1, 2, 3, 0, 3]]), element_format("uint2")).tolist() == [[0x39, 0x03]]
    assert element_format("float6e2m3").row_bytes(5) == 5 and element_format("float4e2m1").row_bytes(5) == 3


@SETTINGS
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4), data=st.data())
def test_to_rows_from_rows_round_trip(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    a = np.arange(math.prod(shape)).reshape(shape)
    rows, moved = to_rows(a, axis)
    K = shape[axis]
    assert rows.shape == (math.prod(shape) // K, K)
    assert moved == tuple(np.moveaxis(a, axis, -1).shape)
    np.testing.assert_array_equal(rows.reshape(moved), np.moveaxis(a, axis, -1))
    np.testing.assert_array_equal(from_rows(rows, shape, axis), a)


def test_to_rows_weight_k_n_axis0_gives_n_k():
    w = np.arange(6).reshape(3, 2)  # [K=3, N=2], DQ axis 0 -> rows [N, K]
    rows, _ = to_rows(w, 0)
    assert rows.tolist() == [[0, 2, 4], [1, 3, 5]]


SCALES = ["float32", "float16", "bfloat16", "float8e8m0"]


def _random_scale(sfmt, shape, rng):
    if sfmt.name == "float8e8m0":
        return sfmt.from_storage(rng.integers(100, 150, shape).astype(np.uint8))
    return sfmt.encode(rng.uniform(-2, 2, shape).astype(np.float32))


@pytest.mark.parametrize("sname", SCALES)
@pytest.mark.parametrize("fmt", ELEMENT_FORMATS, ids=str)
@pytest.mark.parametrize("shape,axis,block_size", [((3, 13), 1, 4), ((13, 3), 0, 4), ((2, 9, 3), -2, 2), ((4, 32), 1, 32)])
def test_decode_rows_equals_dequantize_linear(fmt, sname, shape, axis, block_size):
    """Single-level scales: bit for bit (same float32 products, one cast)."""
    sfmt = scale_format(sname)
    rng = np.random.default_rng(11)
    x = fmt.from_codes(rng.integers(0, 1 << fmt.bits, shape).astype(np.uint8))
    s_shape = list(shape)
    s_shape[axis] = math.ceil(shape[axis] / block_size)
    s = _random_scale(sfmt, tuple(s_shape), rng)
    zp = None if fmt.is_float else fmt.from_codes(rng.integers(0, 1 << fmt.bits, s.shape).astype(np.uint8))
    expected = dequantize_linear(x, s, zp, axis=axis, block_size=block_size, output_dtype=TensorProto.FLOAT)
    rp = pack_quantized(x, s, zp, axis=axis, block_size=block_size)
    assert rp.scale.dtype == sfmt.storage_dtype and rp.data.dtype == np.uint8
    G = math.ceil(shape[axis] / block_size)
    assert rp.scale.shape == (rp.rows, G) and rp.K == shape[axis]
    got = decode_rows(rp.data, rp.scale, rp.zero_point, K=rp.K, block_size=block_size, element=fmt, scale=sfmt)
    rows_expected, _ = to_rows(expected, axis)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32)[~np.isnan(got)], rows_expected.view(np.uint32)[~np.isnan(got)])
    assert np.array_equal(np.isnan(got), np.isnan(rows_expected))
    np.testing.assert_array_equal(rp.decode_original(), expected)


def test_decode_rows_names_and_hand_values():
    # int4 row [1, -1, 7] in blocks of 2, scales [0.5, 2], zero points [1, 0]: ((1-1)*.5, (-1-1)*.5, 7*2)
    out = decode_rows(np.uint8([[0xF1, 0x07]]), np.float16([[0.5, 2.0]]), np.uint8([[1, 0]]), K=3, block_size=2,
                      element="int4", scale="float16")
    assert out.tolist() == [[0.0, -1.0, 14.0]]
    # e8m0 codes 126 (0.5) and bf16 raw bits
    out = decode_rows(np.uint8([[0x21]]), np.uint8([[126]]), None, K=2, block_size=32, element="float4e2m1", scale="float8e8m0")
    assert out.tolist() == [[0.25, 0.5]]
    bf = scale_format("bfloat16")
    out = decode_rows(np.uint8([[3]]), bf.to_storage(bf.encode(np.float32([[0.75]]))), None, K=1, block_size=1,
                      element="int8", scale="bfloat16", global_scale=np.float32(4))
    assert out.tolist() == [[9.0]]


def test_decode_rows_two_level():
    """NVFP4 rows: (value * e4m3 scale) * global in float32; the DQ chain computes
    value * float32(e4m3 * global) instead: the two differ by at most one float32 rounding."""
    fp4, e4m3 = element_format("float4e2m1"), scale_format("float8e4m3fn")
    rng = np.random.default_rng(3)
    c = rng.integers(0, 16, (8, 40)).astype(np.uint8)
    s = e4m3.encode(rng.uniform(0.01, 400, (8, 3)).astype(np.float32))
    g = np.float32(0.0123)
    got = decode_rows(pack_rows(c, fp4), e4m3.to_storage(s), None, K=40, block_size=16, element=fp4, scale=e4m3,
                      global_scale=g)
    s_full = np.repeat(s.astype(np.float32), 16, axis=1)[:, :40]
    np.testing.assert_array_equal(got, (fp4.lut[c] * s_full) * g)
    chain = dequantize_linear(fp4.from_codes(c), dequantize_linear(s, g, output_dtype=TensorProto.FLOAT),
                              axis=1, block_size=16)
    # one float32 rounding apart: relative 2^-23 of the value (here 2^-22 for slack on both roundings)
    np.testing.assert_allclose(got, chain, rtol=2.0 ** -22, atol=0)


def test_decode_rows_errors():
    with pytest.raises(OnnxfuseError) as e:
        decode_rows(np.zeros((2, 2), np.uint8), np.zeros((2, 3), np.float32), None, K=4, block_size=2,
                    element="int4", scale="float32")
    assert e.value.diagnostics[0].code is codes.SCALE_SHAPE_MISMATCH
    with pytest.raises(ValueError):
        unpack_rows(np.zeros((2, 3), np.uint8), 4, element_format("int4"))
    with pytest.raises(OnnxfuseError) as e:
        decode_rows(np.zeros((1, 2), np.uint8), np.ones((1, 1), np.float32), np.uint8([[0x38]]), K=2, block_size=2,
                    element="float8e4m3fn", scale="float32")
    assert e.value.diagnostics[0].code is codes.ZERO_POINT_FLOAT_FORMAT
