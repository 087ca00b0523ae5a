"""DequantGather, Dequantize and QuantizeDequantize kernels (interpreter on CPU) against the
format layer's references. All three are exact: the kernels compute the same float32
operations as the references (decode, subtract, multiply; divide and round to the grid), so
results must agree bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxfuse.kernels.triton_env").load()  # before triton: sets TRITON_INTERPRET without CUDA

from onnxfuse import formats  # noqa: E402
from onnxfuse.diagnostics import OnnxfuseError  # noqa: E402
from onnxfuse.formats.scale_rules import mx, nvfp4  # noqa: E402
from onnxfuse.kernels import dequant_gather, dequantize, quantize_dequantize  # noqa: E402
from onnxfuse.kernels import reference as ref  # noqa: E402


def _t(x):
    return None if x is None else torch.from_numpy(np.ascontiguousarray(x))


@pytest.mark.parametrize("wf,sf,bs,zp,two", [("int4", "float16", 16, True, False), ("float4e2m1", "float8e4m3fn", 16, False, True),
                                             ("int2", "bfloat16", 8, True, False), ("float6e3m2", "float8e8m0", 32, False, False),
                                             ("uint8", "float32", 5, True, False)])
def test_dequant_gather(wf, sf, bs, zp, two):
    rng = np.random.default_rng(0)
    c = ref.random_rows(rng, 23, 45, weight_format=wf, scale_format=sf, block_size=bs, zero_point=zp, global_scale=two)
    idx = np.array([[0, 22, -1], [-23, 5, 5]], dtype=np.int64)
    got = dequant_gather(_t(c.w), _t(c.scale), _t(c.zero_point), _t(c.global_scale), _t(idx), D=45, block_size=bs,
                         weight_format=wf, scale_format=sf, out_dtype=torch.float32)
    want = ref.dequant_gather_ref(c.w, c.scale, c.zero_point, c.global_scale, idx, D=45, block_size=bs,
                                  weight_format=wf, scale_format=sf)
    assert got.shape == (2, 3, 45)
    np.testing.assert_array_equal(got.numpy(), want)
    got16 = dequant_gather(_t(c.w), _t(c.scale), _t(c.zero_point), _t(c.global_scale), _t(idx.astype(np.int32)), D=45,
                           block_size=bs, weight_format=wf, scale_format=sf, out_dtype=10)  # TensorProto.FLOAT16
    np.testing.assert_array_equal(got16.numpy(), want.astype(np.float16))


@pytest.mark.parametrize("wf,sf,bs,zp", [("int4", "float16", 16, True), ("uint8", "float32", 5, True)])
def test_column_major_scales_decode_the_same(wf, sf, bs, zp):
    """Scale and zero point of any strides (here column-major): the blocked and the element-wise
    row kernels give the row-major result bit for bit."""
    rng = np.random.default_rng(3)
    c = ref.random_rows(rng, 23, 45, weight_format=wf, scale_format=sf, block_size=bs, zero_point=zp)
    col = lambda x: _t(x).t().contiguous().t()  # noqa: E731
    idx = _t(np.array([3, 0, 22, -1]))
    kw = dict(block_size=bs, weight_format=wf, scale_format=sf, out_dtype=torch.float32)
    for s, z in ((_t(c.scale), _t(c.zero_point)), (col(c.scale), col(c.zero_point))):
        got = dequant_gather(_t(c.w), s, z, None, idx, D=45, **kw).numpy()
        np.testing.assert_array_equal(got, ref.dequant_gather_ref(c.w, c.scale, c.zero_point, None, idx.numpy(), D=45,
                                                                  **{k: v for k, v in kw.items() if k != "out_dtype"}))
        got = dequantize(_t(c.w), s, z, None, shape=(23, 45), axis=1, **kw).numpy()
        np.testing.assert_array_equal(got, ref.dequantize_ref(c.w, c.scale, c.zero_point, None, shape=(23, 45), axis=1,
                                                              **{k: v for k, v in kw.items() if k != "out_dtype"}))


def test_gather_out_of_range_rows_are_nan():
    rng = np.random.default_rng(1)
    c = ref.random_rows(rng, 4, 8, weight_format="int8", scale_format="float32", block_size=8)
    got = dequant_gather(_t(c.w), _t(c.scale), None, None, _t(np.array([1, 4, -5])), D=8, block_size=8,
                         weight_format="int8", scale_format="float32", out_dtype=torch.float32).numpy()
    assert np.isfinite(got[0]).all() and np.isnan(got[1:]).all()


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_dequantize_moves_the_blocked_axis_back(axis):
    rng = np.random.default_rng(2)
    shape = (3, 10, 7)
    K = shape[axis]
    R = int(np.prod(shape)) // K
    c = ref.random_rows(rng, R, K, weight_format="float8e5m2", scale_format="float16", block_size=4)
    got = dequantize(_t(c.w), _t(c.scale), None, None, shape=shape, axis=axis, block_size=4,
                     weight_format="float8e5m2", scale_format="float16", out_dtype=torch.float32)
    want = ref.dequantize_ref(c.w, c.scale, None, None, shape=shape, axis=axis, block_size=4,
                              weight_format="float8e5m2", scale_format="float16")
    np.testing.assert_array_equal(got.numpy(), want)


MX_ELEMENTS = ["float4e2m1", "float8e4m3fn", "float8e5m2", "float6e2m3", "float6e3m2", "int8"]


@pytest.mark.parametrize("element", MX_ELEMENTS)
def test_dynamic_mx_matches_the_ocp_rule(element):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 75)) * np.exp2(rng.integers(-6, 6, size=(6, 1)))).astype(np.float32)
    x[2, 32:64] = 0.0  # an all-zero block
    got = quantize_dequantize(_t(x), None, None, None, element_format=element, axis=1, block_size=32, mode="dynamic",
                              scale_rule="mx").numpy()
    data, scale = mx(x, formats.element_format(element), 1, 32)
    want = formats.dequantize_linear(data, scale, axis=1, block_size=32, output_dtype=1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("element", MX_ELEMENTS)
def test_dynamic_mx_tiny_blocks_use_the_full_e8m0_range(element):
    """Blocks whose shared exponent falls to -127 (2^-127, E8M0's subnormal) and an all-zero block:
    bit for bit onnxfuse.formats.scale_rules.mx (a [-126, 126] clamp would change these blocks)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 96)).astype(np.float32)
    for blk, e in enumerate((-100, -118, -126)):  # shared exponents from about -100 - emax down past -127
        x[:, 32 * blk:32 * (blk + 1)] *= np.float32(2.0 ** e)
    x[1, 32:64] = 0.0
    x[3, 64:96] *= np.float32(2.0 ** -12)  # float32 subnormals in the block
    got = quantize_dequantize(_t(x), None, None, None, element_format=element, axis=1, block_size=32, mode="dynamic",
                              scale_rule="mx").numpy()
    data, scale = mx(x, formats.element_format(element), 1, 32)
    codes = scale.view(np.uint8)
    assert (codes[[0, 2, 3]] == 0).any(), "a non-zero block must reach the 2^-127 scale"
    want = formats.dequantize_linear(data, scale, axis=1, block_size=32, output_dtype=1)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_dynamic_nvfp4_matches_the_two_level_rule():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 3, 40)).astype(np.float32)
    got = quantize_dequantize(_t(x), None, None, None, element_format="float4e2m1", axis=-1, block_size=16,
                              mode="dynamic", scale_rule="nvfp4").numpy()
    data, bscale, g = nvfp4(x, formats.element_format("float4e2m1"), 2, 16)
    want = formats.dequantize_linear(data, (bscale.astype(np.float32) * g).astype(np.float32), axis=2, block_size=16,
                                     output_dtype=1)
    np.testing.assert_array_equal(got, want)
    # a given global scale is used as is
    got_g = quantize_dequantize(_t(x), None, None, _t(g), element_format="float4e2m1", axis=2, block_size=16,
                                mode="dynamic", scale_rule="nvfp4").numpy()
    np.testing.assert_array_equal(got_g, want)


def test_static_per_tensor_per_axis_and_blocked_match_onnx_qdq():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((5, 12)) * 4).astype(np.float32)
    cases = [
        ("uint8", np.float32(0.05), np.uint8(100), 1, 0),
        ("int4", np.float32(0.3), None, 1, 0),
        ("int8", rng.uniform(0.01, 0.1, 5).astype(np.float32), rng.integers(-5, 5, 5).astype(np.int8), 0, 0),
        ("float8e4m3fn", rng.uniform(0.001, 0.01, (5, 3)).astype(np.float32), None, 1, 4),
        ("uint4", rng.uniform(0.2, 0.6, (5, 3)).astype(np.float32), rng.integers(0, 16, (5, 3)).astype(np.uint8), 1, 5),
    ]
    for element, scale, zp, axis, bs in cases:
        e = formats.element_format(element)
        zp_typed = None if zp is None else np.asarray(zp).astype(e.np_dtype)
        q = formats.quantize_linear(x, np.asarray(scale), zp_typed, axis=axis, block_size=bs,
                                    output_dtype=e.onnx_type)
        want = formats.dequantize_linear(q, np.asarray(scale), zp_typed, axis=axis, block_size=bs)
        zp_codes = None if zp is None else torch.from_numpy(np.asarray(e.codes_of(zp_typed)).reshape(np.shape(zp)))
        got = quantize_dequantize(_t(x), _t(np.asarray(scale)), zp_codes, None, element_format=element, axis=axis,
                                  block_size=bs, mode="static", scale_rule="").numpy()
        np.testing.assert_array_equal(got, want, err_msg=element)


def test_rounding_modes_and_saturation():
    x = np.array([[0.3, 0.5, 1.5, 2.5, -2.5, -0.7, 500.0, -1e6]], np.float32)
    one = _t(np.float32(1.0))
    kw = dict(axis=1, block_size=0, mode="static", scale_rule="")
    even = quantize_dequantize(_t(x), one, None, None, element_format="int8", **kw).numpy()
    np.testing.assert_array_equal(even, [[0, 0, 2, 2, -2, -1, 127, -128]])
    floor = quantize_dequantize(_t(x), one, None, None, element_format="int8", rounding_mode="floor", **kw).numpy()
    np.testing.assert_array_equal(floor, [[0, 0, 1, 2, -3, -1, 127, -128]])
    ceil = quantize_dequantize(_t(x), one, None, None, element_format="int8", rounding_mode="ceil", **kw).numpy()
    np.testing.assert_array_equal(ceil, [[1, 1, 2, 3, -2, 0, 127, -128]])
    ties = np.array([[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.7, 126.5, -128.5]], np.float32)
    away = quantize_dequantize(_t(ties), one, None, None, element_format="int8", rounding_mode="away", **kw).numpy()
    np.testing.assert_array_equal(away, [[1, 2, 3, -1, -2, -3, 0, -1, 127, -128]])
    up = quantize_dequantize(_t(ties), one, None, None, element_format="int8", rounding_mode="up", **kw).numpy()
    np.testing.assert_array_equal(up, [[1, 2, 3, 0, -1, -2, 0, -1, 127, -128]])
    # on a float grid (fp4 e2m1: 0 .5 1 1.5 2 3 4 6): ties between neighbours, subnormal 0.25 included
    grid_ties = np.array([[0.25, 1.25, 2.5, 5.0, -0.25, -2.5, -5.0, 0.26]], np.float32)
    fp4 = {m: quantize_dequantize(_t(grid_ties), one, None, None, element_format="float4e2m1", rounding_mode=m,
                                  **kw).numpy() for m in ("even", "away", "up")}
    np.testing.assert_array_equal(fp4["even"], [[0, 1, 2, 4, 0, -2, -4, 0.5]])
    np.testing.assert_array_equal(fp4["away"], [[0.5, 1.5, 3, 6, -0.5, -3, -6, 0.5]])
    np.testing.assert_array_equal(fp4["up"], [[0.5, 1.5, 3, 6, 0, -2, -4, 0.5]])
    # uint4 with a zero point: the tie is of v, before the zero point is added
    zp = torch.tensor(3, dtype=torch.uint8)
    u4 = quantize_dequantize(_t(ties), one, zp, None, element_format="uint4", rounding_mode="up", **kw).numpy()
    np.testing.assert_array_equal(u4, [[1, 2, 3, 0, -1, -2, 0, -1, 12, -3]])
    sat = quantize_dequantize(_t(x), one, None, None, element_format="float8e4m3fn", **kw).numpy()
    assert sat[0, 6] == 448 and sat[0, 7] == -448
    nosat = quantize_dequantize(_t(x), one, None, None, element_format="float8e4m3fn", saturate=False, **kw).numpy()
    assert np.isnan(nosat[0, 6]) and np.isnan(nosat[0, 7])
    e5 = quantize_dequantize(_t(x * 1e3), one, None, None, element_format="float8e5m2", saturate=False, **kw).numpy()
    assert np.isinf(e5[0, 7]) and e5[0, 7] < 0
    fp4 = quantize_dequantize(_t(x), one, None, None, element_format="float4e2m1", **kw).numpy()
    np.testing.assert_array_equal(fp4, [[0.5, 0.5, 1.5, 2.0, -2.0, -0.5, 6.0, -6.0]])


def test_errors_are_onnxfuse_errors():
    x = torch.zeros(2, 8)
    with pytest.raises(OnnxfuseError, match="rounding_mode"):
        quantize_dequantize(x, None, None, None, element_format="int8", axis=1, block_size=4, mode="dynamic",
                            scale_rule="mx", rounding_mode="nearest")
    with pytest.raises(OnnxfuseError, match="nvfp4"):
        quantize_dequantize(x, None, None, None, element_format="int8", axis=1, block_size=4, mode="dynamic",
                            scale_rule="nvfp4")
    with pytest.raises(OnnxfuseError, match="zero points are not allowed"):
        quantize_dequantize(x, torch.tensor(1.0), torch.tensor(0, dtype=torch.uint8), None,
                            element_format="float8e4m3fn", axis=1, block_size=0, mode="static", scale_rule="")
