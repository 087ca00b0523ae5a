"""The NumPy Q/DQ reference against onnx.reference.ReferenceEvaluator and onnxruntime CPU.

Bit for bit: every element format x scale format x granularity (per-tensor, per-axis,
blocked, negative axis, ragged last block), with and without zero points. Where a reference
cannot run a combination the test asserts that it fails, so it notices when one gains it.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.formats import (
    ELEMENT_FORMATS,
    block_broadcast,
    dequantize_linear,
    element_format,
    quantize_linear,
    scale_format,
)

ort = pytest.importorskip("onnxruntime")
# onnx.reference warns on the overflow/NaN cases these tests feed it on purpose
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SCALES = ["float32", "float16", "bfloat16", "float8e8m0"]
# What onnxruntime 1.32 CPU runs (measured): DQ and Q of these element types with these scales.
ORT_ELEMENTS = {"int2", "uint2", "int4", "uint4", "int8", "uint8", "float8e4m3fn", "float8e5m2"}
ORT_SCALES = {"float32", "float16"}

# (id, data shape, axis, block_size); the scale shape follows from them.
MODES = [
    ("per_tensor", (6, 10), 1, 0),
    ("per_axis", (6, 10), 1, 0),
    ("per_axis_neg", (3, 4, 5), -2, 0),
    ("blocked", (6, 16), 1, 4),
    ("blocked_ragged", (5, 11), 1, 4),
    ("blocked_axis0_neg", (10, 3, 2), -3, 4),
]


def scale_shape(mode_id, shape, axis, block_size):
    if mode_id == "per_tensor":
        return ()
    axis %= len(shape)
    if block_size == 0:
        return (shape[axis],)
    s = list(shape)
    s[axis] = -(-s[axis] // block_size)
    return tuple(s)


def opset_for(element) -> int:
    return 28 if element.bits == 6 else 25


def one_node_model(op, inits, attrs, out_type, opset, cast_to=None):
    """A model without inputs: every operand is an initializer (ORT cannot feed int4 etc. from numpy)."""
    names = [n if a is not None else "" for n, a in inits]
    nodes = [helper.make_node(op, names, ["y"], **attrs)]
    out = "y"
    if cast_to is not None:
        nodes.append(helper.make_node("Cast", ["y"], ["y_cast"], to=cast_to))
        out, out_type = "y_cast", cast_to
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info(out, out_type, None)],
                              initializer=[numpy_helper.from_array(a, n) for n, a in inits if a is not None])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=11)


def run_reference(model):
    return ReferenceEvaluator(model).run(None, {})[0]


def run_ort(model):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {})[0]


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.shape != b.shape or a.dtype.itemsize != b.dtype.itemsize:
        return False
    ua, ub = a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}")
    nan_a = np.isnan(a.astype(np.float32)) if a.dtype.kind in "fV" else np.zeros(a.shape, bool)
    nan_b = np.isnan(b.astype(np.float32)) if b.dtype.kind in "fV" else np.zeros(b.shape, bool)
    return bool(np.all((ua == ub) | (nan_a & nan_b)))


def ort_readable_type(element) -> int | None:
    """ORT's Python API cannot return int4/int2/float8e5m2 arrays: a Cast after Q makes them readable
    (exact: every code of these formats is a float32 or an int8/uint8 value)."""
    if element.is_float:
        return TensorProto.FLOAT
    if element.bits < 8:
        return TensorProto.INT8 if element.signed else TensorProto.UINT8
    return None


def assert_ort_codes(got: np.ndarray, element, mine: np.ndarray) -> None:
    """ORT's (cast) Q output against ours: codes for integers, float32 bits (NaN-aware) for floats."""
    if element.is_float:
        assert same_bits(got, element.decode(element.codes_of(mine)))
    else:
        np.testing.assert_array_equal(element.encode(got), element.codes_of(mine))


def random_codes(element, shape, rng):
    return element.from_codes(rng.integers(0, 1 << element.bits, shape).astype(np.uint8))


def random_scale(sfmt, shape, rng):
    if sfmt.name == "float8e8m0":
        return sfmt.from_storage(rng.integers(0, 255, shape).astype(np.uint8))  # every finite code
    values = rng.uniform(-2, 2, shape).astype(np.float32) * np.float32(2.0) ** rng.integers(-12, 12, shape)
    return sfmt.encode(values.astype(np.float32))


CASES = [(e, s, m) for e in ELEMENT_FORMATS for s in SCALES for m in MODES]


def case_id(case):
    e, s, m = case
    return f"{e.name}-{s}-{m[0]}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_dequantize_linear_matches_references(case):
    element, sname, (mode_id, shape, axis, block_size) = case
    sfmt = scale_format(sname)
    rng = np.random.default_rng(abs(hash(case_id(case))) % 2**32)
    x = random_codes(element, shape, rng)
    s = random_scale(sfmt, scale_shape(mode_id, shape, axis, block_size), rng)
    zp = random_codes(element, s.shape, rng) if not element.is_float else None
    out_type = TensorProto.FLOAT if sname == "float8e8m0" else None
    attrs = {"axis": axis, "block_size": block_size}
    if out_type:
        attrs["output_dtype"] = out_type
    mine = dequantize_linear(x, s, zp, axis=axis, block_size=block_size, output_dtype=out_type)
    assert mine.shape == shape
    assert mine.dtype == (np.float32 if out_type else sfmt.np_dtype)
    model = one_node_model("DequantizeLinear", [("x", x), ("s", s), ("zp", zp)], attrs,
                           out_type or sfmt.onnx_type, opset_for(element))
    assert same_bits(mine, run_reference(model))
    if element.name in ORT_ELEMENTS and sname in ORT_SCALES:
        assert same_bits(mine, run_ort(model))
    else:
        with pytest.raises(Exception):  # ORT 1.32 CPU: NOT_IMPLEMENTED / invalid graph
            run_ort(model)


@pytest.mark.parametrize("sname,out_type", [("float16", TensorProto.FLOAT), ("float32", TensorProto.FLOAT16),
                                            ("float32", TensorProto.BFLOAT16), ("float8e8m0", TensorProto.FLOAT16),
                                            ("float8e8m0", TensorProto.BFLOAT16), ("bfloat16", TensorProto.FLOAT)])
@pytest.mark.parametrize("ename", ["int4", "uint8", "float8e4m3fn", "float4e2m1"])
def test_dequantize_output_dtype(ename, sname, out_type):
    element, sfmt = element_format(ename), scale_format(sname)
    rng = np.random.default_rng(7)
    x = random_codes(element, (4, 12), rng)
    s = random_scale(sfmt, (4, 3), rng)
    mine = dequantize_linear(x, s, axis=1, block_size=4, output_dtype=out_type)
    assert mine.dtype == helper.tensor_dtype_to_np_dtype(out_type)
    model = one_node_model("DequantizeLinear", [("x", x), ("s", s)],
                           {"axis": 1, "block_size": 4, "output_dtype": out_type}, out_type, 25)
    assert same_bits(mine, run_reference(model))
    ort_runs = ename in ORT_ELEMENTS and sname in ORT_SCALES and out_type != TensorProto.BFLOAT16
    if ort_runs:
        assert same_bits(mine, run_ort(model))
    else:
        with pytest.raises(Exception):
            run_ort(model)


# --- QuantizeLinear --------------------------------------------------------------------

def quantize_inputs(element, sfmt, shape, s_shape, axis, block_size, rng, x_dtype):
    # positive scales, small enough that x stays finite in float16
    if sfmt.name == "float8e8m0":
        s = sfmt.from_storage(rng.integers(118, 130, s_shape).astype(np.uint8))
    else:
        s = sfmt.encode((rng.uniform(0.5, 1, s_shape) * 2.0 ** rng.integers(-8, 2, s_shape)).astype(np.float32))
    full = block_broadcast(sfmt.decode(s), shape, axis, block_size).astype(np.float64)
    top = element.max_value
    # half of x: exact ties (k + 1/2) * scale, the rest random and beyond the range
    k = rng.integers(int(element.min_value) - 2, int(top) + 2, shape) if not element.is_float else \
        rng.choice(element.lut[np.isfinite(element.lut)], shape)
    ties = (k + (0.5 if not element.is_float else 0.0)) * full
    noise = rng.uniform(-1.3 * top, 1.3 * top, shape) * full
    x = np.where(rng.random(shape) < 0.5, ties, noise)
    return x.astype(x_dtype), s


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_quantize_linear_matches_references(case):
    element, sname, (mode_id, shape, axis, block_size) = case
    sfmt = scale_format(sname)
    rng = np.random.default_rng(abs(hash("q" + case_id(case))) % 2**32)
    x_dtype = np.float16 if sname == "float16" and mode_id.startswith("blocked") else np.float32
    x, s = quantize_inputs(element, sfmt, shape, scale_shape(mode_id, shape, axis, block_size), axis, block_size,
                           rng, x_dtype)
    zp = random_codes(element, s.shape, rng) if not element.is_float else None
    attrs = {"axis": axis, "block_size": block_size, "output_dtype": element.onnx_type}
    mine = quantize_linear(x, s, zp, axis=axis, block_size=block_size, output_dtype=element.onnx_type)
    assert mine.dtype == element.np_dtype and mine.shape == shape
    model = one_node_model("QuantizeLinear", [("x", x), ("s", s), ("zp", zp)], attrs, element.onnx_type,
                           opset_for(element))
    # onnx.reference divides in numpy's promotion of x's and the scale's types; the spec and
    # ORT in the scale's type. They differ only for a float32 x with a 16-bit scale.
    promoted = np.result_type(x.dtype, s.dtype) if sname != "float8e8m0" else np.dtype(np.float32)
    ref_precision = helper.np_dtype_to_tensor_dtype(promoted)
    as_reference = quantize_linear(x, s, zp, axis=axis, block_size=block_size, output_dtype=element.onnx_type,
                                   precision=ref_precision)
    np.testing.assert_array_equal(element.codes_of(as_reference), element.codes_of(run_reference(model)))
    if promoted == (s.dtype if sname != "float8e8m0" else promoted):
        np.testing.assert_array_equal(element.codes_of(mine), element.codes_of(as_reference))
    ort_model = one_node_model("QuantizeLinear", [("x", x), ("s", s), ("zp", zp)], attrs, element.onnx_type,
                               opset_for(element), cast_to=ort_readable_type(element))
    if element.name in ORT_ELEMENTS and sname in ORT_SCALES:
        assert_ort_codes(run_ort(ort_model), element, mine)
    else:
        with pytest.raises(Exception):
            run_ort(ort_model)


@pytest.mark.parametrize("ename", ["float8e4m3fn", "float8e5m2"])
def test_quantize_float8_saturate_attribute(ename):
    element = element_format(ename)
    x = np.float32([1e6, -1e6, 3.0, np.inf])
    s = np.float32(1.0)
    for sat in (0, 1):
        mine = quantize_linear(x, s, output_dtype=element.onnx_type, saturate=bool(sat))
        model = one_node_model("QuantizeLinear", [("x", x), ("s", s)],
                               {"output_dtype": element.onnx_type, "saturate": sat}, element.onnx_type, 25)
        assert same_bits(element.decode(element.codes_of(mine)),
                         element.decode(element.codes_of(run_reference(model))))
        ort_model = one_node_model("QuantizeLinear", [("x", x), ("s", s)],
                                   {"output_dtype": element.onnx_type, "saturate": sat}, element.onnx_type, 25,
                                   cast_to=ort_readable_type(element))
        assert_ort_codes(run_ort(ort_model), element, mine)


def test_quantize_default_output_is_uint8_and_zero_point_sets_type():
    x = np.float32([0.0, 1.0, 300.0, -5.0])
    assert quantize_linear(x, np.float32(1.0)).dtype == np.uint8
    zp = np.int8(3)
    y = quantize_linear(x, np.float32(1.0), np.asarray(zp))
    assert y.dtype == np.int8 and y.tolist() == [3, 4, 127, -2]


# --- errors ------------------------------------------------------------------------------

def _code_of(excinfo):
    return excinfo.value.diagnostics[0].code


def test_errors_are_onnxfuse_errors():
    x = element_format("int4").from_codes(np.zeros((4, 8), np.uint8))
    with pytest.raises(OnnxfuseError) as e:
        dequantize_linear(x, np.ones((4, 3), np.float32), axis=1, block_size=4)
    assert _code_of(e) is codes.SCALE_SHAPE_MISMATCH
    with pytest.raises(OnnxfuseError) as e:
        dequantize_linear(x, np.ones((4, 2), np.float32), axis=2, block_size=4)
    assert _code_of(e) is codes.ATTRIBUTE_INVALID
    with pytest.raises(OnnxfuseError) as e:
        dequantize_linear(x, np.ones(7, np.float32), axis=1)
    assert _code_of(e) is codes.SCALE_SHAPE_MISMATCH
    with pytest.raises(OnnxfuseError) as e:
        dequantize_linear(x, scale_format("float8e8m0").encode(np.ones((4, 2))), axis=1, block_size=4)
    assert _code_of(e) is codes.ATTRIBUTE_INVALID  # e8m0 needs output_dtype
    with pytest.raises(OnnxfuseError) as e:
        dequantize_linear(x, scale_format("float8e4m3fn").encode(np.ones((4, 2))), axis=1, block_size=4)
    assert _code_of(e) is codes.SCALE_DTYPE_ILLEGAL
    with pytest.raises(OnnxfuseError) as e:
        dequantize_linear(x, np.ones((4, 2), np.float32), np.zeros((4, 2), np.int8), axis=1, block_size=4)
    assert _code_of(e) is codes.ZERO_POINT_SHAPE_MISMATCH
    fp8 = element_format("float8e4m3fn")
    with pytest.raises(OnnxfuseError) as e:
        dequantize_linear(fp8.from_codes(np.zeros(4, np.uint8)), np.float32(1), fp8.from_codes(np.uint8(0x38)))
    assert _code_of(e) is codes.ZERO_POINT_FLOAT_FORMAT
    with pytest.raises(OnnxfuseError) as e:
        dequantize_linear(np.zeros(3, np.int64), np.float32(1))
    assert _code_of(e) is codes.ELEMENT_TYPE_UNSUPPORTED
    with pytest.raises(OnnxfuseError) as e:
        quantize_linear(np.zeros(3, np.float32), np.float32(1), np.asarray(np.int8(0)), output_dtype=TensorProto.UINT8)
    assert _code_of(e) is codes.ZERO_POINT_SHAPE_MISMATCH


def test_block_broadcast():
    s = np.arange(6, dtype=np.float32).reshape(2, 3)
    full = block_broadcast(s, (2, 7), axis=1, block_size=3)
    assert full.tolist() == [[0, 0, 0, 1, 1, 1, 2], [3, 3, 3, 4, 4, 4, 5]]
    assert block_broadcast(np.float32(2), (2, 2), 0, 0).tolist() == [[2, 2], [2, 2]]
    assert block_broadcast(np.float32([1, 2]), (2, 3), -2, 0).tolist() == [[1, 1, 1], [2, 2, 2]]


@pytest.mark.parametrize("dtype", [np.int32, np.int16, np.uint16])
def test_wide_integer_dequantize_and_quantize(dtype):
    """A QDQ model's int32 bias and int16 activations: not element formats, still references."""
    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, (4, 6), endpoint=True).astype(dtype)
    s = rng.uniform(0.001, 2, 6).astype(np.float32)
    zp = rng.integers(info.min // 4, info.max // 4, 6).astype(dtype)
    if dtype is np.int32:
        # an int32 bias has zero point 0. With a non-zero one ORT subtracts in (wrapping) int32,
        # onnx.reference in float after rounding x to float32: they disagree beyond 2^24; we follow onnx.reference.
        zp = np.zeros(6, np.int32)
    mine = dequantize_linear(x, s, zp, axis=1)
    model = one_node_model("DequantizeLinear", [("x", x), ("s", s), ("zp", zp)], {"axis": 1}, TensorProto.FLOAT, 25)
    assert same_bits(mine, run_reference(model))
    assert same_bits(mine, run_ort(model))
    if dtype is np.int32:
        return  # QuantizeLinear has no int32 output
    onnx_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    xf = (rng.standard_normal((4, 6)) * 3e4 * s).astype(np.float32)
    mine_q = quantize_linear(xf, s, zp, axis=1)
    assert mine_q.dtype == dtype
    model = one_node_model("QuantizeLinear", [("x", xf), ("s", s), ("zp", zp)], {"axis": 1}, onnx_type, 25)
    np.testing.assert_array_equal(mine_q, run_reference(model))
    np.testing.assert_array_equal(mine_q, run_ort(model))


def test_per_tensor_zero_point_shape_spellings():
    """Exporters write a per-tensor scale and zero point as [] or [1] independently."""
    x = np.array([1, 2, 250], np.uint8)
    for s, zp in [(np.float32(0.5), np.array([2], np.uint8)), (np.array([0.5], np.float32), np.array(2, np.uint8))]:
        assert dequantize_linear(x, s, zp).tolist() == [-0.5, 0.0, 124.0]
        assert quantize_linear(np.float32([-0.5, 0.0, 124.0]), s, zp).tolist() == [1, 2, 250]
