"""The triton backend on a CUDA GPU: IOBinding on device buffers, one stream, CUDA graphs."""

import numpy as np
import pytest
from onnx import TensorProto

from onnxfuse.runtime.reference import ReferenceRunner
from onnxfuse.runtime.session import InferenceSession
from runtime_models import qdq_matmul_pair
from zoo_runtime import QUANTIZED, mismatch, optimized, stored

pytestmark = pytest.mark.gpu

# fp16 activations: one fp16 output rounding (2^-11 relative) plus the reference's fp16 MatMul
# accumulation over K=40: rtol/atol 2e-3.
TOL = dict(rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("scheme", ["int4", "nvfp4", "mxfp4", "mxfp8"])
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_gpu_matches_the_reference_and_keeps_outputs_on_the_device(scheme, cuda_graph):
    import torch

    original, fused = qdq_matmul_pair(scheme, dtype=TensorProto.FLOAT16)
    sess = InferenceSession(fused, backend="triton", cuda_graph=cuda_graph)
    assert sess.get_providers()[0] == "CUDAExecutionProvider"
    for rows in (3, 3, 5):  # a repeated signature replays; a new one captures again
        x = np.random.default_rng(rows).standard_normal((rows, 40)).astype(np.float16)
        want = ReferenceRunner(original).run(None, {"x": x})[0]
        (got,) = sess.run(None, {"x": torch.from_numpy(x).cuda()}, output_type="torch")
        assert got.is_cuda
        np.testing.assert_allclose(got.float().cpu().numpy(), want.astype(np.float32), **TOL)


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_reused_buffers_and_bindings_give_each_run_its_own_result(cuda_graph):
    """Runs of one input signature reuse the bound buffers; every run must still read its own
    feeds (rebound when their pointer changes) and earlier results must stay intact."""
    import torch

    original, fused = qdq_matmul_pair("int4", dtype=TensorProto.FLOAT16)
    sess = InferenceSession(fused, backend="triton", cuda_graph=cuda_graph)
    xs = [np.random.default_rng(10 + i).standard_normal((3, 40)).astype(np.float16) for i in range(4)]
    outs = [sess.run(None, {"x": torch.from_numpy(x).cuda()}, output_type="torch")[0] for x in xs]
    for x, got in zip(xs, outs):
        want = ReferenceRunner(original).run(None, {"x": x})[0]
        np.testing.assert_allclose(got.float().cpu().numpy(), want.astype(np.float32), **TOL)


@pytest.mark.parametrize("name", QUANTIZED)
def test_zoo_model_on_the_gpu(name):
    """Every CI zoo model, optimized, eager and as a CUDA graph, against the stored reference
    outputs under models/regression.py's tolerances."""
    feeds, want = stored(name)
    try:
        model = optimized(name)
    except ModuleNotFoundError as e:  # e.g. a trimmed onnxruntime-gpu without onnxruntime.quantization
        pytest.skip(f"building zoo model {name} needs {e.name}")
    for cuda_graph in (False, True):
        sess = InferenceSession(model, backend="triton", cuda_graph=cuda_graph)
        for _ in range(2):  # the second run replays the captured graph
            reason = mismatch(name, sess.run(None, feeds), want)
            assert reason is None, f"{name} (cuda_graph={cuda_graph}): {reason}"


def test_gpu_breakdown_measures_every_segment():
    from onnxfuse.runtime.bench import gpu_breakdown

    _, fused = qdq_matmul_pair("int4", dtype=TensorProto.FLOAT16)
    sess = InferenceSession(fused, backend="triton")
    x = np.random.default_rng(0).standard_normal((3, 40)).astype(np.float16)
    r = gpu_breakdown(sess, {"x": x}, iters=3)
    assert len(r["segments"]) == len(sess.plan.segments)
    assert all(s["gpu_ms"] > 0 and s["host_ms"] > 0 for s in r["segments"])
    assert r["gpu_span_ms"] >= r["gpu_sum_ms"] * 0.99 > 0
