"""How close the autotuner's pick comes to the fastest DequantMatMul config, on the GPU.

    python benchmarks/tuning_fidelity.py [--m 1,4,16] [--formats nvfp4,mxfp4,int4-b32,mxfp8]
                                         [--shapes 8192x28672] [--repeats 3]

The autotuner times each candidate on one weight (`dequant_matmul._time_config`); a deployed layer
runs between other layers' kernels, its weight not in L2. Here every first-round candidate, and
the split-K variants of the fastest few (the autotuner's own two rounds), is also timed as
kernels_gemv.py times the chosen config: CUDA-graph replay over rotating weight copies. Then the
package's autotuner picks --repeats times, each from an empty cache. Each row: the fastest config
by replay (and its share of the HBM read rate measured first, for weight and scale bytes), each
pick's replay time and its multiple of that (1.00: the best pick there is; below it, a split
variant of a config this script's own top few did not include), the rank
correlation between the autotuner's timings and the replay times over the first round, and the
median of (autotuner's time - replay time), the cost its measurement adds. After the table, each
case's three fastest first-round configs by the autotuner's timing, with both times: where a pick
replays slower than the fastest, these show which config the autotuner's timing favours.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kernels import (  # noqa: E402  (benchmarks/kernels.py)
    FORMATS, SCALE_USE, graph_time_us, l2_copies, measure_hbm_read, random_case)


def short(cfg: dict) -> str:
    """A config in a few letters: kernel, BLOCK_N, BLOCK_KB, warps, loop stages, row tiles, split."""
    kind = "mma" if cfg.get("MMA") else ("mat" if cfg.get("MATERIALISE") else ("gemm" if "BLOCK_M" in cfg else "gemv"))
    parts = [kind, f"n{cfg.get('BLOCK_N', '-')}", f"kb{cfg.get('BLOCK_KB', '-')}", f"w{cfg.get('num_warps', '-')}"]
    parts += [f"ls{cfg.get('LOOP_STAGES', 1)}", f"rt{cfg.get('ROW_TILES', 1)}", f"s{cfg.get('SPLIT_K', 1)}"]
    if cfg.get("MMA"):
        parts.insert(1, f"c{cfg['CHUNK']}g{cfg['GROUP']}{'w' if cfg.get('SCALE_W') else ''}")
    return " ".join(parts)


def rank_correlation(xs, ys) -> float:
    """Spearman's rho: the correlation of the two lists' ranks (ties broken by order)."""
    if len(xs) < 2:
        return float("nan")
    ranks = [np.argsort(np.argsort(v, kind="stable")) for v in (xs, ys)]
    return float(np.corrcoef(*ranks)[0, 1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--m", default="1,4,16")
    p.add_argument("--formats", default="nvfp4,mxfp4,int4-b32,mxfp8")
    p.add_argument("--shapes", default="8192x28672")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    import torch

    from onnxfuse.kernels import autotune, prepare_constant

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")  # the module (the package exports a function)
    tmp = tempfile.mkdtemp(prefix="onnxfuse-fidelity-")
    hbm = measure_hbm_read(torch)[0]
    print(f"# GPU {torch.cuda.get_device_name()}; measured HBM read {hbm / 1e12:.2f} TB/s; {args.repeats} picks a "
          "case, each from an empty cache", flush=True)
    print("| K x N | M | format | configs | fastest us (% of HBM) | fastest config | picks us (x fastest) | "
          "picked configs | rank corr. | tuner - replay us |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    details = []
    for shape in args.shapes.split(","):
        K, N = (int(v) for v in shape.split("x"))
        for fname in args.formats.split(","):
            wf, sf, bs, two, _ = FORMATS[fname]
            e, sc, w, s, gs = random_case(torch, N, K, wf, sf, bs, two)
            s = prepare_constant(s, SCALE_USE)  # the layout a session loads
            wbytes = w.numel() + s.numel() * s.element_size()
            ws = list(zip(*l2_copies(w, s)))
            for M in (int(v) for v in args.m.split(",")):
                row, favoured = _case(torch, D, autotune, ws, gs, M=M, K=K, N=N, bs=bs, e=e, sc=sc,
                                      repeats=args.repeats, cache_root=os.path.join(tmp, f"{fname}-{shape}-M{M}"), hbm_us=1e6 * wbytes / hbm)
                print(f"| {K}x{N} | {M} | {fname} | {row}", flush=True)
                details.append(f"- {K}x{N}, M = {M}, {fname}: {favoured}")
            del ws, w, s
            torch.cuda.empty_cache()
    print("\nThe autotuner's three fastest first-round configs, its us / replay us:\n")
    print("\n".join(details))
    return 0


def _case(torch, D, autotune, ws, gs, *, M, K, N, bs, e, sc, repeats, cache_root, hbm_us) -> str:
    a = torch.randn(M, K, dtype=torch.float16, device="cuda")
    outs = [torch.empty(M, N, dtype=torch.float16, device="cuda") for _ in ws]
    w, s = ws[0]
    kw = dict(K=K, N=N, block_size=bs, element=e, scale_code=sc)

    def launcher(cfg, w_, s_, out):
        return lambda: D._launch(a, w_, s_, None, gs, None, out, cfg=cfg, **kw)

    cands = D.tuning_candidates(M, N, w.shape[1], e, bs, a.dtype, a.device, scale_code=sc)
    with ThreadPoolExecutor(16) as pool:  # Triton compiles in threads; the timings below then find them built
        list(pool.map(lambda c: _try(launcher(c, w, s, outs[0])), cands))
    torch.cuda.synchronize()
    replay = {}

    def replay_us(cfg):
        key = json.dumps(cfg, sort_keys=True)
        if key not in replay:
            try:
                replay[key] = graph_time_us(torch, [launcher(cfg, w_, s_, o) for (w_, s_), o in zip(ws, outs)])
            except Exception:  # noqa: BLE001 - a config that does not run here (shared memory) is no candidate
                replay[key] = float("inf")
        return replay[key]

    first = [(c, replay_us(c)) for c in cands]
    top = sorted(first, key=lambda ct: ct[1])[:autotune.REFINE_TOP]
    timed = first + [(v, replay_us(v)) for c, _ in top for v in D.split_variants(c, M)]
    best, best_t = min(timed, key=lambda ct: ct[1])
    tuner = [(c, _try(lambda c=c: 1e3 * D._time_config(launcher(c, w, s, outs[0]))), t) for c, t in first]
    ok = [(x, y) for _, x, y in tuner if x is not None and math.isfinite(y)]
    fastest = sorted((ct for ct in tuner if ct[1] is not None), key=lambda ct: ct[1])[:3]
    favoured = "; ".join(f"{short(c)}: {x:.1f} / {y:.1f}" for c, x, y in fastest)
    picks = []
    for r in range(repeats):
        os.environ["ONNXFUSE_CACHE_DIR"] = f"{cache_root}-{r}"
        picks.append(D._pick_config(a, w, s, None, gs, None, outs[0], **kw))
    ratios = ", ".join(f"{replay_us(c):.1f} ({replay_us(c) / best_t:.2f})" for c in picks)
    picked = "; ".join(short(c) for c in picks)
    corr = rank_correlation([x for x, _ in ok], [y for _, y in ok])
    offset = statistics.median(x - y for x, y in ok) if ok else float("nan")
    return (f"{len(timed)} | {best_t:.1f} ({100 * hbm_us / best_t:.0f}%) | {short(best)} | {ratios} | {picked} | "
            f"{corr:.2f} | {offset:.1f} |"), favoured


def _try(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - the autotuner skips configs that fail; so does this script
        return None


if __name__ == "__main__":
    sys.exit(main())
