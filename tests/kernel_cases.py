"""Kernel cases and their check, shared by the interpreter tests and the GPU tests.

Error bound (rigorous, per output element): with fp32 accumulation over K terms the sum error is
at most (K + 4) * u32 * sum_k |a_k w_k| (the +4 covers the scale and global-scale multiplies); the
tl.dot path also rounds each decoded weight to the operand dtype (u of dot_dtype: 2^-11 for fp16,
2^-8 for bf16, 2^-24 for the fp32 GEMV); the output cast adds u of y's dtype times |y|.
"""

from __future__ import annotations

import numpy as np
import torch

from onnxfuse.kernels import reference as ref


def assert_close_to_reference(y, case, a, bias, *, dot_dtype, u):
    """y (the kernel's [M, N] or [..., N] output, any device) against decode + float64 matmul of the
    activation a (float32 NumPy) as the kernel saw it (cast to y's dtype); u: unit roundoff by dtype."""
    a64 = torch.from_numpy(a).to(y.dtype).to(torch.float64).numpy()
    b64 = None if bias is None else torch.from_numpy(bias).to(y.dtype).to(torch.float64).numpy()
    want = ref.dequant_matmul_ref(a64, case.w, case.scale, case.zero_point, case.global_scale, b64, K=case.K,
                                  N=case.w.shape[0], block_size=case.block_size, weight_format=case.weight_format,
                                  scale_format=case.scale_format)
    wd = np.abs(case.decoded().astype(np.float64))
    absdot = (np.abs(a64.reshape(-1, case.K)) @ wd.T).reshape(want.shape)
    if b64 is not None:
        absdot = absdot + np.abs(b64)
    bound = ((case.K + 4) * u[torch.float32] + u[dot_dtype]) * absdot + u[y.dtype] * np.abs(want) + 1e-30
    got = y.detach().cpu().to(torch.float64).numpy()
    assert got.shape == want.shape
    assert np.all(np.isfinite(got))
    err = np.abs(got - want)
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert np.all(err <= bound), f"err {err[worst]:.3g} > bound {bound[worst]:.3g} at {worst}"


def widely_spread_mx_case(rng, wf, N, K):
    """An E8M0-scaled (block 32) case whose rows spread their scales over 0-60 binades below the row's
    largest, placed anywhere; rows 0-2 hold one large scale first, last and in every fourth block
    (each split half); rows 3 and 4 hold code 0 (2^-127). Outputs stay within fp16's normal range."""
    case = ref.random_rows(rng, N, K, weight_format=wf, scale_format="float8e8m0", block_size=32)
    spreads = [0, 1, 14, 15, 16, 22, 23, 24, 30, 60]
    for r in range(N):
        top = int(rng.integers(118, 128))
        case.scale[r] = [max(top - int(rng.choice(spreads)), 0) for _ in range(case.scale.shape[1])]
        case.scale[r, rng.integers(0, case.scale.shape[1])] = top
    g = np.arange(case.scale.shape[1])
    case.scale[:3] = 95
    case.scale[0, 0] = case.scale[1, -1] = 125
    case.scale[2, g % 4 == 2] = 125
    case.scale[3, 1] = 0
    case.scale[4, :4] = 0
    return case
