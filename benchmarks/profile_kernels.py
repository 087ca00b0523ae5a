"""One autotuned DequantMatMul launch per case inside an NVTX range, for Nsight Compute.

    ncu --clock-control none --profile-from-start off --nvtx \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \\
        --section SchedulerStats \\
        --metrics lts__t_bytes.sum.per_second,dram__bytes_read.sum.per_second \\
        python3 benchmarks/profile_kernels.py nvfp4:16 mxfp4:16 int4-b32:1 [--shape 8192x28672]

Run it once without ncu first, with the same ONNXFUSE_CACHE_DIR, so the autotuner's choices are
made outside the profiler: three cases tuned under ncu replayed 1.03-1.34x slower than the same
cases tuned without it (H100, benchmarks/RESULTS.md, stop 35).

A case is FORMAT:M (FORMAT as in benchmarks/kernels.py). Each is tuned first, then its one launch
runs between cudaProfilerStart and Stop (ncu's --profile-from-start off), so ncu sees only the chosen
config's launches (a split-K call shows its partial-sum kernel too), named by the NVTX range. The
L2 figure tells whether a small-M kernel is bound by the activation tile each program re-reads
from L2 (weight bytes x 64 / (BLOCK_N x ROW_TILES) for 4-bit codes at M = 16) rather than by HBM;
SchedulerStats' issue-slot use whether it is bound by instruction issue.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kernels import FORMATS, SCALE_USE, random_case  # noqa: E402  (benchmarks/kernels.py)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("cases", nargs="+", help="FORMAT:M, e.g. nvfp4:16")
    p.add_argument("--shape", default="8192x28672", help="K x N")
    args = p.parse_args(argv)
    import torch

    from onnxfuse.kernels import prepare_constant

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")  # the module (the package exports a function)
    K, N = (int(v) for v in args.shape.split("x"))
    for case in args.cases:
        fname, m = case.split(":")
        wf, sf, bs, two, _ = FORMATS[fname]
        e, sc, w, s, gs = random_case(torch, N, K, wf, sf, bs, two)
        s = prepare_constant(s, SCALE_USE)  # the layout a session loads
        a = torch.randn(int(m), K, dtype=torch.float16, device="cuda")
        out = torch.empty(int(m), N, dtype=torch.float16, device="cuda")
        kw = dict(K=K, N=N, block_size=bs, weight_format=wf, scale_format=sf)
        D.dequant_matmul(a, w, s, None, gs, None, out=out, **kw)  # tunes (or reads the cache)
        cfg = D._pick_config(a, w, s, None, gs, None, out, K=K, N=N, block_size=bs, element=e, scale_code=sc)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        with torch.cuda.nvtx.range(f"prof_{fname}_M{m}"):
            D.dequant_matmul(a, w, s, None, gs, None, out=out, **kw)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        print(f"prof_{fname}_M{m} {K}x{N}: {cfg}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
