"""Kernels and runtime on odd input (issue 7): degenerate shapes, NaN/Inf, wrong feeds.

Kernels run in Triton's interpreter here (tiny shapes: it is slow) and are compared with
onnxfuse.formats.decode_rows + a float64 matmul. Bound per output element, as in
tests/test_kernels_dequant_matmul.py: fp32 accumulation over K terms errs by at most
(K + 4) * 2^-24 * sum|a w| (+4 for the scale and global-scale multiplies), and the output cast
adds half an ulp of |y|.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxfuse.kernels.triton_env").load()  # sets TRITON_INTERPRET before triton without CUDA

import onnxfuse  # noqa: E402
from onnxfuse import formats  # noqa: E402
from onnxfuse.diagnostics import OnnxfuseError  # noqa: E402
from onnxfuse.kernels import reference as kref  # noqa: E402
from tests.qdq_builders import make_weight, matmul_model  # noqa: E402

U32 = 2.0**-24


def _t(x):
    return None if x is None else torch.from_numpy(np.ascontiguousarray(x))


def _dequant_matmul(case, a: np.ndarray, N: int):
    # The implementation module itself: the package-level name is shadowed by it after one call
    # (see test_public_kernel_functions_stay_callable).
    from onnxfuse.kernels.dequant_matmul import dequant_matmul

    return dequant_matmul(
        _t(a), _t(case.w), _t(case.scale), _t(case.zero_point), _t(case.global_scale), None,
        K=case.K, N=N, block_size=case.block_size, weight_format=case.weight_format, scale_format=case.scale_format)


def _want(case, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w = formats.decode_rows(case.w, case.scale, case.zero_point, K=case.K, block_size=case.block_size,
                            element=case.weight_format, scale=case.scale_format,
                            global_scale=case.global_scale).astype(np.float64)
    a64 = a.astype(np.float64)
    with np.errstate(all="ignore"):
        want = a64.reshape(-1, case.K) @ w.T
        mag = np.abs(a64.reshape(-1, case.K)) @ np.abs(w).T
    shape = (*a.shape[:-1], w.shape[0])
    return want.reshape(shape), ((case.K + 4) * U32 * mag + U32 * np.abs(want) + 1e-30).reshape(shape)


import onnxfuse.kernels  # noqa: E402


def test_public_kernel_functions_stay_callable():
    """`from onnxfuse.kernels.X import X` inside onnxfuse.kernels.X() makes the package attribute
    the submodule after the first call: every later call is "'module' object is not callable"."""
    rng = np.random.default_rng(0)
    case = kref.random_rows(rng, 4, 16, weight_format="int4", scale_format="float16", block_size=16)
    for _ in range(2):
        y = onnxfuse.kernels.dequant_matmul(torch.ones(1, 16), _t(case.w), _t(case.scale), None, None, None, K=16, N=4,
                                            block_size=16, weight_format="int4", scale_format="float16")
        assert tuple(y.shape) == (1, 4)
    x = torch.ones(2, 32)
    for _ in range(2):
        onnxfuse.kernels.quantize_dequantize(x, None, None, None, element_format="float8e4m3fn", axis=-1,
                                             block_size=32, mode="dynamic", scale_rule="mx")


@pytest.mark.parametrize("weight_format, scale_format, K, N, block, M", [
    ("int4", "float16", 5, 3, 32, 1),         # K smaller than one block
    ("float4e2m1", "float8e8m0", 7, 13, 32, 2),  # K < block, N odd
    ("uint4", "float32", 37, 13, 16, 3),      # ragged last block, N not a multiple of any tile
    ("float8e4m3fn", "bfloat16", 1, 1, 32, 1),  # a single element
    ("int2", "float32", 3, 17, 2, 5),         # tiny blocks, sub-byte rows of one byte
])
def test_odd_shapes_match_the_reference(weight_format, scale_format, K, N, block, M):
    rng = np.random.default_rng(K * 100 + N)
    case = kref.random_rows(rng, N, K, weight_format=weight_format, scale_format=scale_format, block_size=block,
                            zero_point=weight_format.startswith("u"))
    a = rng.standard_normal((M, K)).astype(np.float32)
    y = _dequant_matmul(case, a, N).to(torch.float64).numpy()
    want, bound = _want(case, a)
    assert y.shape == want.shape
    assert (np.abs(y - want) <= bound).all()


@pytest.mark.parametrize("M, K, N", [(0, 16, 4), (2, 16, 0), (2, 0, 4)])
def test_zero_sized_dimensions(M, K, N):
    """Empty activations, no output features or an empty reduction: an empty or zero result, or a
    clear OnnxfuseError; never a crash or a garbage value."""
    rng = np.random.default_rng(0)
    case = kref.random_rows(rng, N, max(K, 1), weight_format="int4", scale_format="float16", block_size=16)
    if K == 0:
        case = kref.RowCase(np.zeros((N, 0), np.uint8), np.zeros((N, 0), np.float16), None, None, 0, 16, "int4", "float16")
    a = rng.standard_normal((M, K)).astype(np.float32)
    try:
        y = _dequant_matmul(case, a, N)
    except OnnxfuseError:
        return
    assert tuple(y.shape) == (M, N)
    assert (y.to(torch.float64).numpy() == 0).all()  # an empty sum is 0


def test_nan_and_inf_activations_propagate_like_the_reference():
    rng = np.random.default_rng(3)
    K, N = 40, 6
    case = kref.random_rows(rng, N, K, weight_format="int4", scale_format="float32", block_size=16)
    a = rng.standard_normal((4, K)).astype(np.float32)
    a[1, 5] = np.nan
    a[2, 7] = np.inf
    a[3, 8] = -np.inf
    y = _dequant_matmul(case, a, N).to(torch.float64).numpy()
    want, bound = _want(case, a)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(want))
    np.testing.assert_array_equal(np.sign(y[np.isinf(want)]), np.sign(want[np.isinf(want)]))
    finite = np.isfinite(want)
    assert (np.abs(y[finite] - want[finite]) <= bound[finite]).all()


def test_dequantize_kernel_with_k_smaller_than_block():
    rng = np.random.default_rng(5)
    case = kref.random_rows(rng, 3, 5, weight_format="float4e2m1", scale_format="float8e8m0", block_size=32)
    y = onnxfuse.kernels.dequantize(_t(case.w), _t(case.scale), None, None, shape=[3, 5], axis=1, block_size=32,
                                    weight_format="float4e2m1", scale_format="float8e8m0", out_dtype=torch.float32)
    np.testing.assert_array_equal(y.numpy(), case.decoded())


# --- InferenceSession fed the wrong things -------------------------------------------------
@pytest.fixture(scope="module")
def fused_model():
    w = make_weight("int4", (20, 6), axis=0, block_size=8, scale_format="float16", seed=1)
    model, _ = matmul_model(w, lead=("M",))
    fused, report = onnxfuse.optimize(model)
    assert report.fused, "the fixture model must fuse"
    import onnx_ir as ir

    return ir.serde.serialize_model(fused)


def _ort_error(model: onnx.ModelProto, feeds) -> str:
    import onnxruntime as ort

    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception) as info:
        s.run(None, feeds)
    return str(info.value)


GOOD = {"a": np.ones((2, 20), np.float32)}
BAD_FEEDS = {
    "unknown name": ({"b": np.ones((2, 20), np.float32)}, ["b"]),
    "missing input": ({}, ["a"]),
    "wrong dtype": ({"a": np.ones((2, 20), np.float64)}, ["a", "double"]),
    "wrong rank": ({"a": np.ones((2, 20, 1), np.float32)}, ["a"]),
    "wrong dim": ({"a": np.ones((2, 21), np.float32)}, ["a", "21"]),
}


@pytest.mark.parametrize("backend", ["ort", "triton"])
@pytest.mark.parametrize("what", list(BAD_FEEDS))
def test_wrong_feeds_get_clear_errors_like_onnxruntime(fused_model, backend, what):
    feeds, words = BAD_FEEDS[what]
    session = onnxfuse.InferenceSession(fused_model, backend=backend)
    assert session.run(None, GOOD)[0].shape == (2, 6)
    with pytest.raises(OnnxfuseError) as info:
        session.run(None, feeds)
    text = str(info.value)
    assert "Traceback" not in text
    assert info.value.diagnostics[0].code.id == "OFX403"
    for word in words:
        assert word in text, f"{word!r} not in {text!r}"
    _ort_error(fused_model, feeds)  # onnxruntime refuses the same feed too


def test_unknown_output_name_is_refused(fused_model):
    session = onnxfuse.InferenceSession(fused_model, backend="ort")
    with pytest.raises(OnnxfuseError) as info:
        session.run(["nope"], GOOD)
    assert "nope" in str(info.value)


def test_session_on_a_bad_file_is_a_clear_error(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"\x00garbage")
    with pytest.raises(OnnxfuseError) as info:
        onnxfuse.InferenceSession(str(path), backend="ort")
    assert "m.onnx" in str(info.value)


def test_nan_activation_through_the_session_matches_onnxruntime_on_the_original(fused_model):
    w = make_weight("int4", (20, 6), axis=0, block_size=8, scale_format="float16", seed=1)
    original, _ = matmul_model(w, lead=("M",))
    a = np.ones((2, 20), np.float32)
    a[0, 3] = np.nan
    import onnxruntime as ort

    want = ort.InferenceSession(original.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    W = w.dequantized()
    # The original rounds each weight to float16 (its DQ's output type); the fused op decodes in
    # float32: half an fp16 ulp per weight on each side, plus fp32 accumulation of 20 terms.
    bound = np.abs(a[1].astype(np.float64)) @ np.abs(W) * (2 * 2.0**-11 + 20 * 2.0**-23)
    for backend in ("ort", "triton"):
        got = onnxfuse.InferenceSession(fused_model, backend=backend).run(None, {"a": a})[0]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert np.isnan(got[0]).all()  # one NaN in a row reaches every output of that row
        assert (np.abs(got[1] - want[1]) <= 2 * bound).all()
