"""onnxfuse.InferenceSession on the CPU: backend "ort" (function bodies) and "triton" (interpreter)."""

import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto

from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.runtime.reference import ReferenceRunner
from onnxfuse.runtime.session import InferenceSession
from runtime_models import ReferenceKernels, qdq_matmul_pair

# (scheme, scale format, activation dtype). The fused result and the reference decode the same
# codes exactly; they differ only in float32 summation order over K=40 (|err| <~ 40 * 2^-24 *
# sum|a||w| ~ 1e-5) and, for float16 activations, one rounding of the fp16 output (2^-11 relative)
# plus the fp16 rounding of the reference's own MatMul accumulation: rtol 2e-3 / atol 2e-3 for fp16.
CASES = [
    ("int4", "float32", TensorProto.FLOAT),
    ("uint4", "float16", TensorProto.FLOAT16),
    ("int8", "bfloat16", TensorProto.FLOAT),
    ("nvfp4", None, TensorProto.FLOAT),
    ("mxfp4", None, TensorProto.FLOAT16),
    ("mxfp8", None, TensorProto.FLOAT),
]


def _tol(dtype):
    return dict(rtol=2e-3, atol=2e-3) if dtype == TensorProto.FLOAT16 else dict(rtol=1e-5, atol=1e-5)


def _x(dtype, rows=3, K=40, seed=1):
    np_t = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    return np.random.default_rng(seed).standard_normal((rows, K)).astype(np_t)


@pytest.mark.parametrize("scheme,scale,dtype", CASES)
def test_ort_backend_matches_the_reference(scheme, scale, dtype):
    original, fused = qdq_matmul_pair(scheme, scale_format=scale, dtype=dtype)
    x = _x(dtype)
    want = ReferenceRunner(original).run(None, {"x": x})[0]
    sess = InferenceSession(fused, backend="ort")
    assert sess.get_providers() == ["CPUExecutionProvider"]
    got = sess.run(None, {"x": x})[0]
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **_tol(dtype))


@pytest.mark.parametrize("scheme,scale,dtype", CASES)
def test_triton_backend_in_the_interpreter_matches_the_reference(scheme, scale, dtype):
    original, fused = qdq_matmul_pair(scheme, scale_format=scale, dtype=dtype)
    x = _x(dtype)
    want = ReferenceRunner(original).run(None, {"x": x})[0]
    sess = InferenceSession(fused, backend="triton")
    assert [s.kind for s in sess.plan.segments] == ["ort", "kernel", "ort"], sess.plan.fallbacks
    got = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **_tol(dtype))


def test_dequant_matmul_scales_are_loaded_column_major():
    """kernels.prepare_constant: the session keeps a DequantMatMul's scales and zero points
    column-major (the layout its kernels read fastest), its weight rows as stored."""
    _, fused = qdq_matmul_pair("uint4", scale_format="float16", dtype=TensorProto.FLOAT16)
    sess = InferenceSession(fused, backend="triton")
    (node,) = [n for n in fused.graph.node if n.op_type == "DequantMatMul"]
    consts = sess._backend._constants
    w, s, z = (consts[name] for name in node.input[1:4])
    assert s.shape[1] > 1 and s.stride() == (1, s.shape[0]) and z.stride() == (1, z.shape[0])
    assert w.is_contiguous()


def test_triton_executor_with_reference_kernels_and_torch_io():
    import torch

    original, fused = qdq_matmul_pair("nvfp4")
    x = _x(TensorProto.FLOAT)
    want = ReferenceRunner(original).run(None, {"x": x})[0]
    sess = InferenceSession(fused, backend="triton", kernels=ReferenceKernels())
    (got,) = sess.run(["y"], {"x": torch.from_numpy(x)}, output_type="torch")
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    # a second run with another batch reuses nothing stale
    x2 = _x(TensorProto.FLOAT, rows=5, seed=2)
    np.testing.assert_allclose(sess.run(None, {"x": x2})[0], ReferenceRunner(original).run(None, {"x": x2})[0],
                               rtol=1e-5, atol=1e-6)


def test_fused_op_without_a_kernel_runs_its_function_body_with_a_warning():
    class NoKernels(ReferenceKernels):
        def supported(self, op_type, **attrs):
            return "not covered in this test"

    original, fused = qdq_matmul_pair("int4", scale_format="float32")
    with pytest.warns(UserWarning, match="OFX402"):
        sess = InferenceSession(fused, backend="triton", kernels=NoKernels())
    assert [s.kind for s in sess.plan.segments] == ["ort"]
    assert sess.diagnostics[0].code.id == "OFX402" and sess.diagnostics[0].node == "dqmm"
    x = _x(TensorProto.FLOAT)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ReferenceRunner(original).run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)


def test_io_metadata_matches_onnxruntime():
    original, fused = qdq_matmul_pair("int4", scale_format="float32")
    mine = InferenceSession(fused, backend="ort")
    theirs = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"])
    for a, b in zip(mine.get_inputs() + mine.get_outputs(), theirs.get_inputs() + theirs.get_outputs()):
        assert (a.name, a.type, a.shape) == (b.name, b.type, b.shape)


@pytest.mark.parametrize("backend", ["ort", "triton"])
@pytest.mark.parametrize("feeds,message", [
    ({"z": np.zeros((3, 40), np.float32)}, "Invalid input name: z"),
    ({}, "Required inputs (x) are missing"),
    ({"x": np.zeros((3, 40), np.float64)}, "Actual: (tensor(double)), expected: (tensor(float))"),
    ({"x": np.zeros((3, 41), np.float32)}, "index: 1 Got: 41 Expected: 40"),
    ({"x": np.zeros((40,), np.float32)}, "Invalid rank for input: x Got: 1 Expected: 2"),
])
def test_bad_feeds_are_refused_like_onnxruntime(backend, feeds, message):
    _, fused = qdq_matmul_pair("int4", scale_format="float32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(fused, backend=backend, kernels=ReferenceKernels() if backend == "triton" else None)
    with pytest.raises(OnnxfuseError) as e:
        sess.run(None, feeds)
    assert e.value.diagnostics[0].code.id == "OFX403"
    assert message in str(e.value)


def test_unknown_backend_output_name_and_output_type_are_usage_errors():
    _, fused = qdq_matmul_pair("int4", scale_format="float32")
    with pytest.raises(OnnxfuseError, match="unknown backend 'cuda'"):
        InferenceSession(fused, backend="cuda")
    sess = InferenceSession(fused, backend="ort")
    x = _x(TensorProto.FLOAT)
    with pytest.raises(OnnxfuseError, match="Invalid output name: nope"):
        sess.run(["nope"], {"x": x})
    with pytest.raises(OnnxfuseError, match="output_type"):
        sess.run(None, {"x": x}, output_type="list")


def test_auto_backend_is_ort_without_cuda():
    import torch

    _, fused = qdq_matmul_pair("int4", scale_format="float32")
    sess = InferenceSession(fused)
    assert sess.backend_name == ("triton" if torch.cuda.is_available() else "ort")


def test_a_missing_file_is_an_onnxfuse_error(tmp_path):
    with pytest.raises(OnnxfuseError) as e:
        InferenceSession(str(tmp_path / "missing.onnx"))
    assert e.value.diagnostics[0].code.id == "OFX101"


def test_lazy_export_from_the_package():
    import onnxfuse.runtime as rt

    assert rt.InferenceSession is InferenceSession
