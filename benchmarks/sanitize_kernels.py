"""Small launches of every kernel, for `compute-sanitizer --tool memcheck python benchmarks/sanitize_kernels.py [I ...]`.

I ...: only the weight formats of those indices into FORMATS (all by default), so that several
processes can share the work: one process of all took over 330 s under memcheck on an H100.

Without autotuning (timing every candidate under memcheck took over 400 s): the default configs, plus
one swap-AB config of each dot shape (CHUNK, GROUP, SCALE_W) and row tiles a program, forced."""

import itertools
import os
import sys

os.environ["ONNXFUSE_AUTOTUNE"] = "0"

import numpy as np  # noqa: E402
import torch  # noqa: E402

from onnxfuse.kernels import dequant_gather, dequant_matmul, dequantize, inputs, quantize_dequantize  # noqa: E402
from onnxfuse.kernels import reference as ref  # noqa: E402
from onnxfuse.kernels.dequant_matmul import dequant_matmul as dqmm  # noqa: E402
from onnxfuse.kernels.dequant_matmul import mma_candidates  # noqa: E402

rng = np.random.default_rng(0)
t = lambda x: None if x is None else torch.from_numpy(np.ascontiguousarray(x)).cuda()  # noqa: E731
col = lambda x: None if x is None else t(x).t().contiguous().t()  # noqa: E731 - the layout a session loads scales in
FORMATS = (("int4", "float16", 32, True, False), ("float4e2m1", "float8e4m3fn", 16, False, True),
           ("float4e2m1", "float8e8m0", 32, False, False), ("float8e4m3fn", "float8e8m0", 32, False, False),
           ("int2", "bfloat16", 64, True, False), ("int4", "float32", 3, False, False))
SHAPES = ((333, 77), (512, 64))  # (K, N): ragged, and whole tiles (the swap-AB kernel's unmasked loop)
chosen = [FORMATS[int(i)] for i in sys.argv[1:]] or FORMATS
for (wf, sf, bs, zp, two), (K, N) in itertools.product(chosen, SHAPES):
    print(f"{wf} {sf} block {bs}, K x N = {K} x {N}", flush=True)
    c = ref.random_rows(rng, N, K, weight_format=wf, scale_format=sf, block_size=bs, zero_point=zp, global_scale=two)
    e, sc = inputs.formats(wf, sf)
    for M in (1, 2, 4, 9, 70):
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        bias = torch.randn(N, device="cuda", dtype=torch.float16)
        kw = dict(K=K, N=N, block_size=bs, weight_format=wf, scale_format=sf)
        dequant_matmul(a, t(c.w), t(c.scale), t(c.zero_point), t(c.global_scale), bias, **kw)
        dequant_matmul(a, t(c.w), col(c.scale), col(c.zero_point), t(c.global_scale), bias, **kw)
        dqmm(a, t(c.w), col(c.scale), col(c.zero_point), t(c.global_scale), bias, config=dict(MATERIALISE=True), **kw)
        if bs != 3:
            split_cfg = (dict(BLOCK_N=16, BLOCK_KB=32, SPLIT_K=4, num_warps=4, num_stages=2) if M <= 4 else
                         dict(BLOCK_M=16, BLOCK_N=32, BLOCK_KB=32, SPLIT_K=3, num_warps=4, num_stages=2, GROUP_M=4))
            dqmm(a, t(c.w), t(c.scale), t(c.zero_point), t(c.global_scale), bias, config=split_cfg, **kw)
            shapes = {}
            for cfg in mma_candidates(M, N, c.w.shape[1], e, bs, a.dtype, a.device, zero_point=zp, scale_code=sc):
                shapes.setdefault((cfg["CHUNK"], cfg["GROUP"], cfg["SCALE_W"], cfg["ROW_TILES"]), cfg)
            for cfg in shapes.values():
                dqmm(a, t(c.w), col(c.scale), col(c.zero_point), t(c.global_scale), bias, config=cfg, **kw)
    rows = torch.tensor([0, N - 1, -1, 200], device="cuda")
    dequant_gather(t(c.w), t(c.scale), t(c.zero_point), t(c.global_scale), rows, D=K, block_size=bs,
                   weight_format=wf, scale_format=sf, out_dtype=torch.float16)
    dequantize(t(c.w), t(c.scale), t(c.zero_point), t(c.global_scale), shape=(N, K), axis=1, block_size=bs,
               weight_format=wf, scale_format=sf, out_dtype=torch.float32)
x = torch.randn(37, 333, device="cuda")
for el, rule in (("float4e2m1", "mx"), ("float4e2m1", "nvfp4"), ("int8", "mx"), ("float8e4m3fn", "absmax")):
    quantize_dequantize(x, None, None, None, element_format=el, axis=1, block_size=32, mode="dynamic", scale_rule=rule)
quantize_dequantize(x, torch.tensor(0.05, device="cuda"), torch.tensor(3, dtype=torch.uint8, device="cuda"), None,
                    element_format="uint8", axis=1, block_size=0, mode="static", scale_rule="")
torch.cuda.synchronize()
print("sanitize run complete")
