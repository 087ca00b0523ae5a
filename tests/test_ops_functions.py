"""The fused ops' function bodies run in stock onnxruntime CPU and compute docs/ops.md exactly.

Each test builds a one-node model by hand (row layout from onnxfuse.formats), checks it with
onnx.checker(full_check=True), runs it in onnxruntime and compares with onnxfuse.formats:
decode_rows (dequantization: bit for bit, both compute the same float32 products in the same
order) and quantize_linear / the scale rules (fake quantization: bit for bit).
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import onnx
import onnx_ir
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from onnxfuse import formats as F
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.formats import scale_rules
from onnxfuse.ops import DOMAIN, VERSION
from onnxfuse.passes.functions import function_for, overload_key

WEIGHT_FORMATS = [f.name for f in F.ELEMENT_FORMATS]
SCALE_FORMATS = [f.name for f in F.SCALE_FORMATS]
NP_OF = {T.FLOAT: np.float32, T.FLOAT16: np.float16}


# --- building and running one-node models ----------------------------------------------------
def make_model(node, inputs, outputs, inits, function, opset=21):
    proto_fn = onnx_ir.serde.serialize_function(function)
    node.overload = proto_fn.overload
    graph = helper.make_graph([node], "g", inputs, outputs, inits)
    return helper.make_model(graph, functions=[proto_fn], ir_version=10,
                             opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(DOMAIN, VERSION)])


def run(model, feeds):
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def through_bfloat16(model, name_in, name_out):
    """Feed a float32 input and fetch a float32 output around a bf16 model (onnxruntime's
    Python API has no bfloat16 numpy type): Cast nodes at the graph boundary."""
    g = model.graph
    inner_in, inner_out = name_in + "_bf16", name_out + "_bf16"
    for n in g.node:
        n.input[:] = [inner_in if i == name_in else i for i in n.input]
        n.output[:] = [inner_out if o == name_out else o for o in n.output]
    g.node.insert(0, helper.make_node("Cast", [name_in], [inner_in], to=T.BFLOAT16))
    g.node.append(helper.make_node("Cast", [inner_out], [name_out], to=T.FLOAT))
    for vi in list(g.input) + list(g.output):
        if vi.name in (name_in, name_out):
            vi.type.tensor_type.elem_type = T.FLOAT
    return model


def random_rows(rng, R, K, block_size, element, sfmt, zp):
    """Random codes and scales in row layout; float scales positive and well inside range."""
    codes = rng.integers(0, 1 << element.bits, (R, K)).astype(np.uint8)
    if element.is_float:  # avoid NaN codes (e4m3 0x7F/0xFF, e5m2 exponent 31) in matmul tests
        values = element.lut[codes]
        codes = np.where(np.isfinite(values), codes, 0).astype(np.uint8)
    G = -(-K // block_size)
    if sfmt.name == "float8e8m0":
        scale = F.e8m0_from_exponent(rng.integers(-8, 3, (R, G)))
    else:
        scale = sfmt.encode(rng.uniform(0.02, 0.5, (R, G)).astype(np.float32))
    zero_point = rng.integers(0, 1 << element.bits, (R, G)).astype(np.uint8) if zp else None
    return F.pack_rows(codes, element), sfmt.to_storage(scale), zero_point


def dequant_matmul_model(rng, *, wf, sf, zp, gs, bias, dtype, M_shape=(3,), K=37, N=6, bs=16, opset=21):
    element, sfmt = F.element_format(wf), F.scale_format(sf)
    packed, scale, zero_point = random_rows(rng, N, K, bs, element, sfmt, zp)
    g = np.float32(0.75) if gs else None
    fn = function_for("DequantMatMul", weight_format=wf, scale_format=sf, has_zero_point=zp,
                      has_global_scale=gs, has_bias=bias, dtype=dtype, opset=opset)
    inits = [numpy_helper.from_array(packed, "W"), numpy_helper.from_array(scale, "S")]
    names = ["A", "W", "S", "", "", ""]
    if zp:
        inits.append(numpy_helper.from_array(zero_point, "Z")); names[3] = "Z"
    if gs:
        inits.append(numpy_helper.from_array(np.asarray(g, np.float32), "GS")); names[4] = "GS"
    io_type = T.FLOAT if dtype == T.BFLOAT16 else dtype
    b = rng.standard_normal(N).astype(np.float32)
    if dtype == T.FLOAT16:
        b = b.astype(np.float16)
    if bias:
        tensor = numpy_helper.from_array(b.astype(ml_dtypes.bfloat16) if dtype == T.BFLOAT16 else b, "B")
        inits.append(tensor); names[5] = "B"
    while names[-1] == "":
        names.pop()
    node = helper.make_node("DequantMatMul", names, ["Y"], domain=DOMAIN, K=K, N=N, block_size=bs,
                            weight_format=wf, scale_format=sf)
    model = make_model(node, [helper.make_tensor_value_info("A", dtype, [*M_shape, K])],
                       [helper.make_tensor_value_info("Y", dtype, [*M_shape, N])], inits, fn, opset)
    if dtype == T.BFLOAT16:
        model = through_bfloat16(model, "A", "Y")
    a = rng.standard_normal((*M_shape, K)).astype(NP_OF[io_type])
    w = F.decode_rows(packed, scale, zero_point, K=K, block_size=bs, element=element, scale=sfmt, global_scale=g)
    a_eff = a.astype(ml_dtypes.bfloat16) if dtype == T.BFLOAT16 else a
    ref = a_eff.astype(np.float64) @ w.T.astype(np.float64)
    bias_eff = (b.astype(ml_dtypes.bfloat16) if dtype == T.BFLOAT16 else b).astype(np.float64)
    if bias:
        ref = ref + bias_eff
    # fp32 accumulation: |error| <= K * 2^-24 * sum|a||w| (+ the same for the bias add),
    # plus half an ulp of the output type's rounding of the result.
    bound = (np.abs(a_eff.astype(np.float64)) @ np.abs(w.T.astype(np.float64))) + np.abs(bias_eff) * bias
    out_eps = {T.FLOAT: 2.0 ** -24, T.FLOAT16: 2.0 ** -11, T.BFLOAT16: 2.0 ** -8}[dtype]
    tol = (K + 2) * 2.0 ** -24 * bound + out_eps * np.abs(ref) + 1e-30
    return model, {"A": a}, ref, tol


def _flags(i, integer):
    """Rotate zero point / global scale / bias / dtype over the format grid, so each
    combination of formats is tested with some options and each option with every format."""
    dtypes = [T.FLOAT, T.FLOAT16, T.BFLOAT16]
    return dict(zp=integer and i % 2 == 0, gs=i % 3 == 1, bias=i % 2 == 1, dtype=dtypes[i % 3])


GRID = list(itertools.product(WEIGHT_FORMATS, SCALE_FORMATS))


@pytest.mark.parametrize("index", range(len(GRID)), ids=[f"{w}-{s}" for w, s in GRID])
def test_dequant_matmul_every_format(index):
    wf, sf = GRID[index]
    rng = np.random.default_rng(index)
    flags = _flags(index, not F.element_format(wf).is_float)
    model, feeds, ref, tol = dequant_matmul_model(rng, wf=wf, sf=sf, **flags)
    y = run(model, feeds).astype(np.float64)
    assert np.all(np.abs(y - ref) <= tol), (flags, np.max(np.abs(y - ref) - tol))


@pytest.mark.parametrize("zp,gs,bias", list(itertools.product([False, True], repeat=3)))
@pytest.mark.parametrize("dtype", [T.FLOAT, T.FLOAT16, T.BFLOAT16])
def test_dequant_matmul_options(zp, gs, bias, dtype):
    rng = np.random.default_rng(7)
    model, feeds, ref, tol = dequant_matmul_model(rng, wf="uint4", sf="float16", zp=zp, gs=gs, bias=bias,
                                                  dtype=dtype, M_shape=(2, 1, 3), K=70, N=5, bs=32)
    y = run(model, feeds).astype(np.float64)
    assert np.all(np.abs(y - ref) <= tol)


@pytest.mark.parametrize("opset", [13, 17, 21, 23, 25, 28])
def test_dequant_matmul_at_model_opset(opset):
    rng = np.random.default_rng(opset)
    model, feeds, ref, tol = dequant_matmul_model(rng, wf="float4e2m1", sf="float8e4m3fn", zp=False, gs=True,
                                                  bias=False, dtype=T.FLOAT, M_shape=(1,), opset=opset)
    assert np.all(np.abs(run(model, feeds) - ref) <= tol)


def test_weights_decode_bit_for_bit():
    """With A = identity the matmul is exact: Y = w^T, the decoded weight itself."""
    rng = np.random.default_rng(3)
    for wf, sf, zp in [("int4", "bfloat16", True), ("float4e2m1", "float8e8m0", False), ("uint2", "float32", True),
                       ("float6e3m2", "float16", False), ("float8e5m2", "float8e4m3fn", False)]:
        K, N, bs = 19, 4, 8
        element, sfmt = F.element_format(wf), F.scale_format(sf)
        packed, scale, zero_point = random_rows(rng, N, K, bs, element, sfmt, zp)
        fn = function_for("DequantMatMul", weight_format=wf, scale_format=sf, has_zero_point=zp,
                          has_global_scale=False, has_bias=False, dtype=T.FLOAT)
        inits = [numpy_helper.from_array(packed, "W"), numpy_helper.from_array(scale, "S")]
        if zp:
            inits.append(numpy_helper.from_array(zero_point, "Z"))
        node = helper.make_node("DequantMatMul", ["A", "W", "S"] + (["Z"] if zp else []), ["Y"], domain=DOMAIN,
                                K=K, N=N, block_size=bs, weight_format=wf, scale_format=sf)
        model = make_model(node, [helper.make_tensor_value_info("A", T.FLOAT, [K, K])],
                           [helper.make_tensor_value_info("Y", T.FLOAT, [K, N])], inits, fn)
        y = run(model, {"A": np.eye(K, dtype=np.float32)})
        w = F.decode_rows(packed, scale, zero_point, K=K, block_size=bs, element=element, scale=sfmt)
        np.testing.assert_array_equal(y, w.T)


# --- Dequantize: every scale code, layouts -------------------------------------------------------
def dequantize_model(packed, scale, zp, gs, *, shape, axis, bs, wf, sf, dtype=T.FLOAT, opset=21):
    fn = function_for("Dequantize", weight_format=wf, scale_format=sf, has_zero_point=zp is not None,
                      has_global_scale=gs is not None, has_bias=False, dtype=dtype, opset=opset)
    inits = [numpy_helper.from_array(packed, "X"), numpy_helper.from_array(scale, "S")]
    names = ["X", "S", "", ""]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "Z")); names[2] = "Z"
    if gs is not None:
        inits.append(numpy_helper.from_array(np.asarray(gs, np.float32), "GS")); names[3] = "GS"
    while names[-1] == "":
        names.pop()
    node = helper.make_node("Dequantize", names, ["Y"], domain=DOMAIN, shape=list(shape), axis=axis, block_size=bs,
                            weight_format=wf, scale_format=sf, output_dtype=dtype)
    return make_model(node, [], [helper.make_tensor_value_info("Y", dtype, list(shape))], inits, fn, opset)


@pytest.mark.parametrize("sf", ["bfloat16", "float8e8m0", "float8e4m3fn", "float16"])
def test_every_scale_code_decodes_exactly(sf):
    """Each row holds one int8 code 1, so Y is the decoded scale: all 2^16 / 2^8 codes,
    NaN and Inf codes included, compared bit for bit with ml_dtypes."""
    sfmt = F.scale_format(sf)
    bits = np.arange(1 << sfmt.bits, dtype=sfmt.storage_dtype if sf != "float16" else np.uint16)
    stored = bits.view(np.float16) if sf == "float16" else bits
    R = bits.size
    packed = np.ones((R, 1), np.uint8)
    model = dequantize_model(packed, stored.reshape(R, 1), None, None, shape=(R, 1), axis=1, bs=1, wf="int8", sf=sf)
    y = run(model, {})[:, 0]
    expected = bits.view(sfmt.np_dtype).astype(np.float32)
    np.testing.assert_array_equal(y.view(np.uint32)[~np.isnan(expected)], expected.view(np.uint32)[~np.isnan(expected)])
    assert np.array_equal(np.isnan(y), np.isnan(expected))


@pytest.mark.parametrize("wf", WEIGHT_FORMATS)
def test_every_element_code_decodes_exactly(wf):
    """All codes of the format in one row, unit scale: Y is the element LUT (NaN included)."""
    element = F.element_format(wf)
    codes = np.arange(1 << element.bits, dtype=np.uint8)[None, :]
    K = codes.shape[1]
    model = dequantize_model(F.pack_rows(codes, element), np.ones((1, 1), np.float32), None, None,
                             shape=(1, K), axis=1, bs=K, wf=wf, sf="float32")
    y = run(model, {})[0]
    np.testing.assert_array_equal(y, element.lut)


@pytest.mark.parametrize("shape,axis", [((7, 5, 6), 0), ((7, 5, 6), 1), ((7, 5, 6), 2), ((9,), 0), ((4, 1, 3, 5), 2)])
def test_dequantize_layouts(shape, axis):
    rng = np.random.default_rng(len(shape) * 10 + axis)
    bs = 2
    data = rng.integers(-8, 8, shape).astype(ml_dtypes.int4)
    scale_shape = list(shape)
    scale_shape[axis] = -(-shape[axis] // bs)
    scale = rng.uniform(0.1, 1.0, scale_shape).astype(np.float16)
    zp = rng.integers(-8, 8, scale_shape).astype(ml_dtypes.int4)
    packed = F.pack_quantized(data, scale, zp, axis=axis, block_size=bs, global_scale=np.float32(1.5))
    model = dequantize_model(packed.data, packed.scale, packed.zero_point, np.float32(1.5), shape=shape, axis=axis,
                             bs=bs, wf="int4", sf="float16")
    y = run(model, {})
    ref = F.dequantize_linear(data, scale, zp, axis=axis, block_size=bs, output_dtype=T.FLOAT) * np.float32(1.5)
    np.testing.assert_array_equal(y, ref)


def test_dequantize_float16_output():
    element = F.element_format("float4e2m1")
    codes = np.arange(16, dtype=np.uint8).reshape(2, 8)
    model = dequantize_model(F.pack_rows(codes, element), F.e8m0_from_exponent([[3], [-2]]).view(np.uint8), None,
                             None, shape=(2, 8), axis=1, bs=8, wf="float4e2m1", sf="float8e8m0", dtype=T.FLOAT16)
    y = run(model, {})
    np.testing.assert_array_equal(y, (element.lut[codes] * np.array([[8.0], [0.25]], np.float32)).astype(np.float16))


# --- DequantGather ------------------------------------------------------------------------------
@pytest.mark.parametrize("wf,sf,zp,gs,idx_type,dtype", [
    ("int4", "float16", True, False, T.INT64, T.FLOAT),
    ("float4e2m1", "float8e4m3fn", False, True, T.INT32, T.FLOAT16),
    ("uint2", "bfloat16", True, False, T.INT64, T.FLOAT),
    ("float8e4m3fn", "float8e8m0", False, False, T.INT32, T.FLOAT),
    ("float6e2m3", "float32", False, True, T.INT64, T.FLOAT16),
    ("int8", "bfloat16", False, False, T.INT64, T.BFLOAT16),
])
def test_dequant_gather(wf, sf, zp, gs, idx_type, dtype):
    rng = np.random.default_rng(11)
    V, D, bs = 10, 21, 8
    element, sfmt = F.element_format(wf), F.scale_format(sf)
    packed, scale, zero_point = random_rows(rng, V, D, bs, element, sfmt, zp)
    g = np.float32(0.5) if gs else None
    fn = function_for("DequantGather", weight_format=wf, scale_format=sf, has_zero_point=zp, has_global_scale=gs,
                      has_bias=False, dtype=dtype)
    inits = [numpy_helper.from_array(packed, "T"), numpy_helper.from_array(scale, "S")]
    if zp:
        inits.append(numpy_helper.from_array(zero_point, "Z"))
    if gs:
        inits.append(numpy_helper.from_array(np.asarray(g), "GS"))
    node = helper.make_node("DequantGather", ["T", "S", "Z" if zp else "", "GS" if gs else "", "I"], ["Y"],
                            domain=DOMAIN, D=D, block_size=bs, weight_format=wf, scale_format=sf, output_dtype=dtype)
    model = make_model(node, [helper.make_tensor_value_info("I", idx_type, [2, 3])],
                       [helper.make_tensor_value_info("Y", dtype, [2, 3, D])], inits, fn)
    if dtype == T.BFLOAT16:
        g_ = model.graph
        g_.node[0].output[0] = "Y_bf16"
        g_.node.append(helper.make_node("Cast", ["Y_bf16"], ["Y"], to=T.FLOAT))
        g_.output[0].type.tensor_type.elem_type = T.FLOAT
    indices = np.array([[0, 9, -1], [3, -10, 3]], dtype=np.int64 if idx_type == T.INT64 else np.int32)
    y = run(model, {"I": indices})
    table = F.decode_rows(packed, scale, zero_point, K=D, block_size=bs, element=element, scale=sfmt, global_scale=g)
    expected = table[indices]
    if dtype != T.FLOAT:
        expected = expected.astype(np.float16 if dtype == T.FLOAT16 else ml_dtypes.bfloat16).astype(y.dtype)
    np.testing.assert_array_equal(y, expected)


# --- QuantizeDequantize ---------------------------------------------------------------------------
def qdq_model(x_shape, *, element, mode, axis, bs, dtype=T.FLOAT, scale=None, zp=None, gs=None, scale_rule="mx",
              sf=None, rounding_mode="even", saturate=1, opset=21):
    sf = sf or ({"static": "float32"}.get(mode) or {"mx": "float8e8m0", "nvfp4": "float8e4m3fn",
                                                     "absmax": "float32"}[scale_rule])
    fn = function_for("QuantizeDequantize", weight_format=element, scale_format=sf, has_zero_point=zp is not None,
                      has_global_scale=gs is not None, has_bias=False, dtype=dtype, opset=opset, element_format=element,
                      mode=mode, scale_rule=scale_rule, rounding_mode=rounding_mode, saturate=saturate)
    inits, names = [], ["X", "", "", ""]
    for i, (name, value) in enumerate([("S", scale), ("Z", zp), ("GS", gs)], start=1):
        if value is not None:
            inits.append(numpy_helper.from_array(np.asarray(value), name)); names[i] = name
    while names[-1] == "":
        names.pop()
    node = helper.make_node("QuantizeDequantize", names, ["Y"], domain=DOMAIN, element_format=element, axis=axis,
                            block_size=bs, mode=mode, scale_rule=scale_rule, rounding_mode=rounding_mode,
                            saturate=saturate)
    return make_model(node, [helper.make_tensor_value_info("X", dtype, list(x_shape))],
                      [helper.make_tensor_value_info("Y", dtype, list(x_shape))], inits, fn, opset)


def static_reference(x, scale, zp, *, element, axis, bs, saturate=True):
    q = F.quantize_linear(x, scale, zp, axis=axis, block_size=bs, output_dtype=F.element_format(element).onnx_type,
                          saturate=saturate, precision=T.FLOAT)
    return F.dequantize_linear(q, scale, zp, axis=axis, block_size=bs, output_dtype=T.FLOAT)


@pytest.mark.parametrize("element", WEIGHT_FORMATS)
def test_qdq_static_every_format(element):
    rng = np.random.default_rng(sum(map(ord, element)))
    fmt = F.element_format(element)
    shape, axis, bs = (3, 13, 2), 1, 4
    scale_shape = (3, 4, 2)
    scale = rng.uniform(0.05, 0.3, scale_shape).astype(np.float32)
    x = (rng.standard_normal(shape) * fmt.max_value * 0.2 * np.repeat(scale, bs, axis=1)[:, :13]).astype(np.float32)
    x[0, 0, 0] = 1e6  # saturates
    zp = None if fmt.is_float else fmt.from_codes(rng.integers(0, 1 << fmt.bits, scale_shape).astype(np.uint8))
    model = qdq_model(shape, element=element, mode="static", axis=axis, bs=bs, scale=scale,
                      zp=None if zp is None else fmt.codes_of(zp))
    y = run(model, {"X": x})
    np.testing.assert_array_equal(y, static_reference(x, scale, zp, element=element, axis=axis, bs=bs))


@pytest.mark.parametrize("sf,dtype", [("float16", T.FLOAT16), ("bfloat16", T.FLOAT), ("float32", T.FLOAT16)])
def test_qdq_static_scale_types_and_global(sf, dtype):
    rng = np.random.default_rng(5)
    shape, axis, bs = (4, 10), -1, 3
    scale = F.scale_format(sf).encode(rng.uniform(0.5, 2.0, (4, 4)).astype(np.float32))
    g = np.float32(0.25)
    x = rng.standard_normal(shape).astype(np.float32)
    x_t = x.astype(np.float16) if dtype == T.FLOAT16 else x
    model = qdq_model(shape, element="float4e2m1", mode="static", axis=axis, bs=bs, dtype=dtype, scale=scale, gs=g, sf=sf)
    y = run(model, {"X": x_t})
    effective = (scale.astype(np.float32) * g).astype(np.float32)  # what a two-level DQ chain computes
    ref = static_reference(x_t.astype(np.float32), effective, None, element="float4e2m1", axis=axis, bs=bs)
    np.testing.assert_array_equal(y, ref.astype(y.dtype))


def test_qdq_static_float8_no_saturation():
    x = np.array([[1.0, 500.0, -1000.0, 3.3]], np.float32)
    scale = np.ones((1, 1), np.float32)
    for element in ["float8e4m3fn", "float8e5m2"]:
        model = qdq_model(x.shape, element=element, mode="static", axis=1, bs=4, scale=scale, saturate=0)
        y = run(model, {"X": x})
        ref = static_reference(x, scale, None, element=element, axis=1, bs=4, saturate=False)
        np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("element", ["float4e2m1", "float6e2m3", "float6e3m2", "float8e4m3fn", "float8e5m2", "int4", "int8"])
def test_qdq_ties_round_half_to_even(element):
    """Every midpoint between neighbouring representable values (and +-0.5 steps of ints):
    the body must pick the even code exactly as the reference quantizer does."""
    fmt = F.element_format(element)
    values = np.unique(fmt.lut[np.isfinite(fmt.lut)].astype(np.float64))
    mids = ((values[1:] + values[:-1]) / 2).astype(np.float32)
    assert np.all(mids.astype(np.float64) == (values[1:] + values[:-1]) / 2)  # exact midpoints
    x = np.concatenate([mids, values.astype(np.float32)])[None, :]
    scale = np.ones((1, 1), np.float32)
    model = qdq_model(x.shape, element=element, mode="static", axis=1, bs=x.shape[1], scale=scale,
                      zp=None if fmt.is_float else np.zeros((1, 1), np.uint8))
    y = run(model, {"X": x})
    zp = None if fmt.is_float else fmt.from_codes(np.zeros((1, 1), np.uint8))
    np.testing.assert_array_equal(y, static_reference(x, scale, zp, element=element, axis=1, bs=x.shape[1]))


def _round_reference(v: np.ndarray, grid: np.ndarray, mode: str) -> np.ndarray:
    """Independent float64 reference: the nearest grid value (ties by mode) or the directed
    neighbour (floor / ceil), saturating to the grid's ends."""
    out = np.empty_like(v, dtype=np.float64)
    for i, t in enumerate(v.astype(np.float64).ravel()):
        d = np.abs(grid - t)
        near = grid[d == d.min()]
        if mode in ("floor", "ceil"):
            inside = grid[grid <= t] if mode == "floor" else grid[grid >= t]
            out.flat[i] = (inside.max() if mode == "floor" else inside.min()) if inside.size else \
                (grid.min() if mode == "floor" else grid.max())
        elif near.size == 1:
            out.flat[i] = near[0]
        elif mode == "away":
            out.flat[i] = near[np.argmax(np.abs(near))]
        else:  # up
            out.flat[i] = near.max()
    return out


@pytest.mark.parametrize("mode", ["away", "up", "floor", "ceil"])
@pytest.mark.parametrize("element", ["float4e2m1", "float6e3m2", "int8", "float8e4m3fn"])
def test_qdq_other_rounding_modes(mode, element):
    fmt = F.element_format(element)
    values = np.unique(fmt.lut[np.isfinite(fmt.lut)].astype(np.float64))
    mids = (values[1:] + values[:-1]) / 2
    rng = np.random.default_rng(1)
    x = np.concatenate([mids, values, rng.uniform(values[0] * 1.2, values[-1] * 1.2, 64)]).astype(np.float32)[None, :]
    model = qdq_model(x.shape, element=element, mode="static", axis=1, bs=x.shape[1], scale=np.ones((1, 1), np.float32),
                      rounding_mode=mode, zp=None if fmt.is_float else np.zeros((1, 1), np.uint8))
    y = run(model, {"X": x})
    if element == "int8":
        values = np.arange(-128, 128, dtype=np.float64)
    np.testing.assert_array_equal(y.astype(np.float64), _round_reference(x, values, mode))


MX_ELEMENTS = ["float8e4m3fn", "float8e5m2", "float6e2m3", "float6e3m2", "float4e2m1", "int8"]


@pytest.mark.parametrize("element", MX_ELEMENTS)
def test_qdq_dynamic_mx(element):
    rng = np.random.default_rng(2)
    shape, axis, bs = (2, 45, 3), 1, 32  # ragged: 45 = 32 + 13
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-20, 20, (2, 1, 3)))).astype(np.float32)
    x[1, :32, 2] = 0.0  # an all-zero block: scale 2^-127
    model = qdq_model(shape, element=element, mode="dynamic", axis=axis, bs=bs, scale_rule="mx")
    y = run(model, {"X": x})
    data, scale = scale_rules.mx(x, F.element_format(element), axis, bs)
    np.testing.assert_array_equal(y, F.dequantize_linear(data, scale, axis=axis, block_size=bs, output_dtype=T.FLOAT))


@pytest.mark.parametrize("with_global", [False, True])
def test_qdq_dynamic_nvfp4(with_global):
    rng = np.random.default_rng(4)
    shape, axis, bs = (3, 40), -1, 16
    x = rng.standard_normal(shape).astype(np.float32) * 3
    x[2, 16:32] = 0.0
    element = F.element_format("float4e2m1")
    data, block_scale, g = scale_rules.nvfp4(x, element, 1, bs)  # g from the tensor's amax
    model = qdq_model(shape, element="float4e2m1", mode="dynamic", axis=axis, bs=bs, scale_rule="nvfp4",
                      gs=g if with_global else None)
    y = run(model, {"X": x})
    effective = (block_scale.astype(np.float32) * g).astype(np.float32)
    np.testing.assert_array_equal(y, F.dequantize_linear(data, effective, axis=1, block_size=bs, output_dtype=T.FLOAT))


@pytest.mark.parametrize("element", ["int8", "int4", "float8e4m3fn"])
def test_qdq_dynamic_absmax(element):
    rng = np.random.default_rng(6)
    shape, axis, bs = (5, 12), 0, 2
    x = rng.standard_normal(shape).astype(np.float32)
    x[0:2, 0] = 0.0
    model = qdq_model(shape, element=element, mode="dynamic", axis=axis, bs=bs, scale_rule="absmax")
    y = run(model, {"X": x})
    data, scale = scale_rules.absmax(x, F.element_format(element), F.scale_format("float32"), axis, bs)
    np.testing.assert_array_equal(y, F.dequantize_linear(data, scale, axis=axis, block_size=bs, output_dtype=T.FLOAT))


@pytest.mark.parametrize("opset", [19, 28])
def test_qdq_at_model_opset(opset):
    x = np.linspace(-9, 9, 64, dtype=np.float32).reshape(2, 32)
    model = qdq_model(x.shape, element="float8e4m3fn", mode="dynamic", axis=1, bs=32, scale_rule="mx", opset=opset)
    data, scale = scale_rules.mx(x, F.element_format("float8e4m3fn"), 1, 32)
    np.testing.assert_array_equal(run(model, {"X": x}),
                                  F.dequantize_linear(data, scale, axis=1, block_size=32, output_dtype=T.FLOAT))


def test_qdq_dynamic_float16_activations():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 64)).astype(np.float16)
    model = qdq_model(x.shape, element="float4e2m1", mode="dynamic", axis=1, bs=32, dtype=T.FLOAT16, scale_rule="mx")
    y = run(model, {"X": x})
    data, scale = scale_rules.mx(x.astype(np.float32), F.element_format("float4e2m1"), 1, 32)
    ref = F.dequantize_linear(data, scale, axis=1, block_size=32, output_dtype=T.FLOAT).astype(np.float16)
    np.testing.assert_array_equal(y, ref)


# --- the API ----------------------------------------------------------------------------------------
def test_overload_key_is_deterministic_and_distinct():
    args = dict(weight_format="int4", scale_format="float16", has_zero_point=True, has_global_scale=False,
                has_bias=True, dtype=T.FLOAT16)
    assert overload_key("DequantMatMul", **args) == "int4.float16.zp.bias.f16"
    keys = {overload_key("DequantMatMul", **{**args, **change}) for change in
            [{}, {"has_zero_point": False}, {"has_global_scale": True}, {"has_bias": False}, {"dtype": T.FLOAT},
             {"scale_format": "bfloat16"}, {"weight_format": "uint4"}]}
    assert len(keys) == 7
    qdq = dict(weight_format="float4e2m1", scale_format="float8e8m0", has_zero_point=False, has_global_scale=False,
               has_bias=False, dtype=T.FLOAT)
    assert overload_key("QuantizeDequantize", **qdq, mode="dynamic", scale_rule="mx") == \
        "float4e2m1.float8e8m0.dynamic.mx.even.sat.f32"


def test_function_is_identical_on_every_call():
    args = dict(weight_format="float4e2m1", scale_format="bfloat16", has_zero_point=False, has_global_scale=True,
                has_bias=True, dtype=T.FLOAT16, opset=23)
    a, b = (onnx_ir.serde.serialize_function(function_for("DequantMatMul", **args)) for _ in range(2))
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)
    assert (a.domain, a.name, a.overload) == (DOMAIN, "DequantMatMul", "float4e2m1.bfloat16.gs.bias.f16")
    assert [o.version for o in a.opset_import if o.domain == ""] == [23]


@pytest.mark.parametrize("op,kwargs,code", [
    ("DequantMatMul", {"weight_format": "int3"}, "OFX210"),
    ("DequantMatMul", {"scale_format": "float64"}, "OFX201"),
    ("DequantMatMul", {"weight_format": "float4e2m1", "has_zero_point": True}, "OFX205"),
    ("DequantMatMul", {"opset": 12}, "OFX212"),
    ("QuantizeDequantize", {"opset": 18}, "OFX212"),
    ("DequantMatMul", {"dtype": T.DOUBLE}, "OFX211"),
    ("Conv", {}, "OFX211"),
    ("QuantizeDequantize", {"mode": "dynamic", "scale_rule": "mx", "scale_format": "float16"}, "OFX201"),
    ("QuantizeDequantize", {"mode": "dynamic", "scale_rule": "mx", "scale_format": "float8e8m0",
                            "weight_format": "int4"}, "OFX210"),
    ("QuantizeDequantize", {"mode": "sometimes"}, "OFX211"),
    ("QuantizeDequantize", {"rounding_mode": "stochastic"}, "OFX211"),
])
def test_function_for_refuses_with_a_diagnostic(op, kwargs, code):
    args = dict(weight_format="int4", scale_format="float32", has_zero_point=False, has_global_scale=False,
                has_bias=False, dtype=T.FLOAT)
    with pytest.raises(OnnxfuseError) as err:
        function_for(op, **{**args, **kwargs})
    assert err.value.diagnostics[0].code.id == code


def test_mxint8_clips_to_symmetric_range():
    """OCP MXINT8 codes are [-127, 127]: -127.75 (scale 2^0) rounds to -128 and clips to -127."""
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 1] = -127.75, 100.0
    model = qdq_model(x.shape, element="int8", mode="dynamic", axis=1, bs=32, scale_rule="mx")
    y = run(model, {"X": x})
    data, scale = scale_rules.mx(x, F.element_format("int8"), 1, 32)
    assert y[0, 0] == -127.0
    np.testing.assert_array_equal(y, F.dequantize_linear(data, scale, axis=1, block_size=32, output_dtype=T.FLOAT))


def test_floor_log2_is_exact_across_float32():
    """Every power of two from 2^-149 to 2^127, and its float32 neighbours: floor(log2) exact."""
    from onnxfuse.passes.function_builder import BodyBuilder
    from onnxfuse.passes.function_rounding import F32_MAX_EXP, F32_MIN_EXP, floor_log2

    powers = np.exp2(np.arange(F32_MIN_EXP, F32_MAX_EXP + 1, dtype=np.float64)).astype(np.float32)
    below = np.nextafter(powers, np.float32(0))
    above = np.nextafter(powers, np.float32(np.inf))
    a = np.concatenate([powers, below[1:], above, np.float32([0.0, 3.0, 0.75, 3.4e38])])
    b = BodyBuilder(21)
    b.identity_to(floor_log2(b, "X", F32_MIN_EXP, F32_MAX_EXP), "Y")
    fn = b.function("QuantizeDequantize", "floor_log2_test", ["X", "scale", "zero_point", "global_scale"], ["Y"],
                    ["axis", "block_size"])
    node = helper.make_node("QuantizeDequantize", ["X"], ["Y"], domain=DOMAIN, element_format="int8", axis=0,
                            block_size=1)
    model = make_model(node, [helper.make_tensor_value_info("X", T.FLOAT, [a.size])],
                       [helper.make_tensor_value_info("Y", T.FLOAT, [a.size])], [], fn)
    y = run(model, {"X": a})
    _, exp = np.frexp(a.astype(np.float64))
    expected = np.where(a == 0, F32_MIN_EXP, exp - 1).astype(np.float32)
    np.testing.assert_array_equal(y, expected)
