"""Quick small-M DequantMatMul check on the GPU: achieved weight bandwidth vs cuBLAS fp16.

    python benchmarks/kernels_gemv.py [--m 1,4,16] [--formats int4-b32,int8-b128,mxfp4,nvfp4]

Random row-layout weights are made on the device (seconds, not the minutes of benchmarks/kernels.py's
host-side cases); every candidate config is compiled first in a thread pool; each row is checked
against the decoded weight (float32 matmul) and timed by CUDA-graph replay over enough weight
copies to defeat the L2. TB/s = (weight + scale bytes) / time; cuBLAS's is its fp16 weight bytes. % of HBM
is against the HBM read rate measured on this GPU first (benchmarks/kernels.py's ceiling). The
fastest swap-AB config is given for each number of row tiles a program its candidates have
(ROW_TILES; 1 where they have none), by the autotuner's own timing. `--wide` adds the fastest of the
same pipelined swap-AB configs on 4 and 8 warps (64 and 128 rows a tile, compiled to mma.sync), at
their split and twice it: not candidates (0.88-0.98x at M = 16 on an H100, benchmarks/RESULTS.md,
stop 39), but fewer activation bytes through the L2 a weight byte.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kernels import (  # noqa: E402  (benchmarks/kernels.py)
    FORMATS, SCALE_USE, graph_time_us, l2_copies, measure_hbm_read, random_case)


def best_us(D, cfgs, a, w, s, gs, out, **kw) -> float:
    """The fastest of cfgs by the autotuner's own timing (its clean-flush graph, us); nan if none applies."""
    times = [1e3 * D._time_config(lambda: D._launch(a, w, s, None, gs, None, out, cfg=cfg, **kw)) for cfg in cfgs]
    return min(times, default=float("nan"))


def wide_configs(cands) -> list[dict]:
    """The pipelined 1- and 2-warp swap-AB candidates on 4 and 8 warps (16 rows a warp), at their
    split and twice it (the programs hold 2-8x the rows)."""
    out = {}
    for c in cands:
        if c.get("MMA") and c["num_warps"] <= 2 and c.get("LOOP_STAGES", 1) > 1:
            for warps in (4, 8):
                for split in (c["SPLIT_K"], 2 * c["SPLIT_K"]):
                    wide = dict(c, num_warps=warps, BLOCK_N=16 * warps, SPLIT_K=split)
                    out[tuple(sorted(wide.items()))] = wide
    return list(out.values())


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--m", default="1,4,16")
    p.add_argument("--formats", default="int4-b32,int8-b128,mxfp4,nvfp4")
    p.add_argument("--shapes", default="8192x28672,28672x8192")
    p.add_argument("--wide", action="store_true", help="also time 4- and 8-warp swap-AB programs")
    args = p.parse_args(argv)
    import torch

    import importlib

    from onnxfuse.kernels import prepare_constant
    from onnxfuse.kernels.dequant_rows import decode_rows_device

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")  # the module (the package exports a function)

    ms = [int(v) for v in args.m.split(",")]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    cases = {}
    for K, N in shapes:
        for fname in args.formats.split(","):
            wf, sf, bs, two, _ = FORMATS[fname]
            e, sc, w, s, gs = random_case(torch, N, K, wf, sf, bs, two)
            cases[(K, N, fname)] = (e, sc, w, prepare_constant(s, SCALE_USE), gs)  # the layout a session loads
    tasks = []
    for (K, N, fname), (e, sc, w, s, gs) in cases.items():
        bs = FORMATS[fname][2]
        for M in ms:
            a = torch.randn(M, K, dtype=torch.float16, device="cuda")
            cands = D.tuning_candidates(M, N, w.shape[1], e, bs, a.dtype, a.device, scale_code=sc)
            for cfg in cands + (wide_configs(cands) if args.wide else []):
                out = torch.empty(M, N, dtype=torch.float16, device="cuda")
                tasks.append((a, w, s, gs, out, cfg, K, N, bs, e, sc))

    def compile_one(t):
        a, w, s, gs, out, cfg, K, N, bs, e, sc = t
        try:
            D._launch(a, w, s, None, gs, None, out, K=K, N=N, block_size=bs, element=e, scale_code=sc, cfg=cfg)
        except Exception as ex:  # noqa: BLE001 - the autotuner skips configs that fail
            print(f"# compile failed: {e.name} {cfg}: {str(ex).splitlines()[0][:200]}", flush=True)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(compile_one, tasks))
    torch.cuda.synchronize()
    print(f"# compiled {len(tasks)} variants in {time.perf_counter() - t0:.0f} s", flush=True)
    hbm = measure_hbm_read(torch)[0] / 1e12
    print(f"# GPU {torch.cuda.get_device_name()}; measured HBM read {hbm:.2f} TB/s", flush=True)
    print("| K x N | M | format | onnxfuse us | TB/s | % of HBM | cuBLAS fp16 us | cuBLAS TB/s | rel err | "
          "best GEMV/GEMM us | best MMA us by row tiles |" + (" best 4/8-warp MMA us (config) |" if args.wide else "")
          + " config |")
    print("|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if args.wide else "") + "---|")
    for (K, N, fname), (e, sc, w, s, gs) in cases.items():
        bs = FORMATS[fname][2]
        wbytes = w.numel() + s.numel() * s.element_size()
        ws, ss = l2_copies(w, s)
        copies = len(ws)
        wdec = decode_rows_device(w, s, None, gs, K=K, block_size=bs, element=e, scale_code=sc,
                                  out_dtype=torch.float32)
        w16 = wdec.to(torch.float16)
        (w16s,) = l2_copies(w16)
        kw = dict(K=K, N=N, block_size=bs, weight_format=FORMATS[fname][0], scale_format=FORMATS[fname][1])
        for M in ms:
            a = torch.randn(M, K, dtype=torch.float16, device="cuda")
            outs = [torch.empty(M, N, dtype=torch.float16, device="cuda") for _ in range(copies)]
            y = D.dequant_matmul(a, w, s, None, gs, None, out=outs[0], **kw)
            want = a.float() @ wdec.t()
            rel = ((y.float() - want).norm() / want.norm()).item()
            cfg = D._pick_config(a, w, s, None, gs, None, outs[0], K=K, N=N, block_size=bs, element=e, scale_code=sc)
            ta = graph_time_us(torch, [(lambda i=i: D.dequant_matmul(a, ws[i], ss[i], None, gs, None, out=outs[i],
                                                                     **kw)) for i in range(copies)])
            tc = graph_time_us(torch, [(lambda w_=w_: torch.matmul(a, w_.t())) for w_ in w16s])
            tbs = wbytes / ta / 1e6
            cands = D.tuning_candidates(M, N, w.shape[1], e, bs, a.dtype, a.device, scale_code=sc)
            lk = dict(K=K, N=N, block_size=bs, element=e, scale_code=sc)
            t_old = best_us(D, [c for c in cands if not c.get("MMA")], a, w, s, gs, outs[0], **lk)
            mma = [c for c in cands if c.get("MMA")]
            by_tiles = {}
            for c in mma:
                by_tiles.setdefault(c.get("ROW_TILES", 1), []).append(c)
            t_mma = ", ".join(f"{rt}: {best_us(D, cs, a, w, s, gs, outs[0], **lk):.1f}"
                              for rt, cs in sorted(by_tiles.items())) or "-"
            t_wide = ""
            if args.wide:
                times = [(best_us(D, [c], a, w, s, gs, outs[0], **lk), c) for c in wide_configs(cands)]
                t, c = min(times, key=lambda tc_: tc_[0], default=(float("nan"), None))
                t_wide = f" {t:.1f} ({c and {k: c[k] for k in ('num_warps', 'ROW_TILES', 'LOOP_STAGES', 'SPLIT_K')}}) |"
            print(f"| {K}x{N} | {M} | {fname} | {ta:.1f} | {tbs:.2f} | {100 * tbs / hbm:.0f} | {tc:.1f} | "
                  f"{w16.nbytes / tc / 1e6:.2f} | {rel:.1e} | {t_old:.1f} | {t_mma} |{t_wide} {cfg} |", flush=True)
        del ws, ss, wdec, w16, w16s
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
