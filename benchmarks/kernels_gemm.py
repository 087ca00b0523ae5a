"""Quick large-M DequantMatMul check on the GPU: every GEMM config against cuBLAS fp16, side by side.

    python benchmarks/kernels_gemm.py [--m 1024,4096] [--formats int4-b32,int8-b128,fp8-b128,mxfp4,nvfp4,...]
                                      [--shapes 8192x28672,28672x8192]

For each (shape, M, format) it times cuBLAS fp16 on the pre-decoded weight, then each of the
autotuner's GEMM candidates (`gemm_candidates`: A @ W^T, W @ A^T with the codes of a byte as one
dot each, "materialise") and the W @ A^T tiles with the weight in the row's K order
(`natural_k_configs`, not yet candidates), all by the autotuner's own clean-flush timing. Each config's
output is checked against the decoded weight (float32 matmul): rel err. x cuBLAS = cuBLAS time /
config time. Random row-layout weights are made on the device, as benchmarks/kernels_gemv.py does.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kernels import FORMATS, SCALE_USE, random_case  # noqa: E402  (benchmarks/kernels.py)

SHOWN = ("BLOCK_M", "BLOCK_N", "BLOCK_KB", "num_warps", "num_stages", "SPLIT_K")


def describe(cfg: dict) -> str:
    if cfg.get("MATERIALISE"):
        return "materialise"
    kind = "W @ A^T, natural K" if cfg.get("NATURAL_K") else ("W @ A^T" if cfg.get("SWAP_AB") else "A @ W^T")
    return f"{kind} {'/'.join(str(cfg[k]) for k in SHOWN)}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--m", default="1024,4096")
    p.add_argument("--formats", default="int4-b32,int4-b128,int8-b128,fp8-b128,mxfp4,mxfp8,nvfp4")
    p.add_argument("--shapes", default="8192x28672,28672x8192")
    args = p.parse_args(argv)
    import torch

    from onnxfuse.kernels import prepare_constant
    from onnxfuse.kernels.dequant_rows import decode_rows_device

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")  # the module (the package exports a function)
    dev = torch.device("cuda")
    print(f"# GPU {torch.cuda.get_device_name()}; torch {torch.__version__}; triton {D.triton.__version__}", flush=True)
    print("| K x N | M | format | config | us | x cuBLAS | rel err |")
    print("|---|---|---|---|---|---|---|")
    for K, N in (tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")):
        for fname in args.formats.split(","):
            wf, sf, bs, two, _ = FORMATS[fname]
            e, sc, w, s, gs = random_case(torch, N, K, wf, sf, bs, two)
            s = prepare_constant(s, SCALE_USE)  # the layout a session loads
            wdec = decode_rows_device(w, s, None, gs, K=K, block_size=bs, element=e, scale_code=sc,
                                      out_dtype=torch.float32)
            w16 = wdec.to(torch.float16)
            lk = dict(K=K, N=N, block_size=bs, element=e, scale_code=sc)
            for M in (int(v) for v in args.m.split(",")):
                a = torch.randn(M, K, dtype=torch.float16, device=dev)
                out = torch.empty(M, N, dtype=torch.float16, device=dev)
                cfgs = D.gemm_candidates(M, N, w.shape[1], e, dev) + D.natural_k_configs(
                    M, N, w.shape[1], e, dev, block_size=bs, scale_code=sc)

                def launch(cfg, compile_only=False):
                    return D._launch(a, w, s, None, gs, None, out, cfg=cfg, compile_only=compile_only, **lk)

                t0 = time.perf_counter()
                with ThreadPoolExecutor(16) as pool:
                    list(pool.map(lambda c: launch(c, compile_only=True), cfgs))
                torch.cuda.synchronize()
                print(f"# {fname} M = {M}: compiled {len(cfgs)} configs in {time.perf_counter() - t0:.0f} s",
                      flush=True)
                want = a.float() @ wdec.t()
                tc = 1e3 * D._time_config(lambda: torch.matmul(a, w16.t()))  # timed as the configs are
                print(f"| {K}x{N} | {M} | {fname} | cuBLAS fp16 | {tc:.1f} | 1.00 | - |", flush=True)
                for cfg in cfgs:
                    try:
                        launch(cfg)
                        rel = ((out.float() - want).norm() / want.norm()).item()
                        t = 1e3 * D._time_config(lambda: launch(cfg))
                    except Exception as ex:  # noqa: BLE001 - a config that fails is reported, not fatal
                        print(f"# {describe(cfg)} failed: {str(ex).splitlines()[0][:200]}", flush=True)
                        continue
                    print(f"| {K}x{N} | {M} | {fname} | {describe(cfg)} | {t:.1f} | {tc / t:.2f} | {rel:.1e} |",
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
