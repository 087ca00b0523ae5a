"""The triton backend on a CUDA GPU: IOBinding on device buffers, one stream, CUDA graphs."""

import numpy as np
import pytest
from onnx import TensorProto

from onnxfuse.runtime.reference import ReferenceRunner
from onnxfuse.runtime.session import InferenceSession
from runtime_models import qdq_matmul_pair

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
