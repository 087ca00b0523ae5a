"""How long a first DequantMatMul call takes to autotune, from empty caches, on the GPU.

    python benchmarks/tuning_time.py [--m 1,16] [--formats nvfp4,mxfp4] [--shapes 8192x28672]

Both the onnxfuse tuning cache and Triton's kernel cache start empty (fresh temporary
directories), so each first call compiles and times every candidate, as a deployed process does
once per GPU and Triton version. Each row: seconds of the first call (tuning included), configs
timed, and the cached second call's time, which must be the plain launch.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
_TMP = tempfile.mkdtemp(prefix="onnxfuse-tuning-")
os.environ["ONNXFUSE_CACHE_DIR"] = os.path.join(_TMP, "onnxfuse")
os.environ["TRITON_CACHE_DIR"] = os.path.join(_TMP, "triton")  # before triton is imported

from kernels import FORMATS, SCALE_USE, random_case  # noqa: E402  (benchmarks/kernels.py)


class _Tunings(logging.Handler):
    """The autotuner's INFO lines: 'autotune KEY: N configs in S s; ...'."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.configs = []

    def emit(self, record):
        m = re.search(r": (\d+) configs in", record.getMessage())
        if m:
            self.configs.append(int(m.group(1)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--m", default="1,16")
    p.add_argument("--formats", default="nvfp4,mxfp4")
    p.add_argument("--shapes", default="8192x28672")
    args = p.parse_args(argv)
    import torch
    import triton

    from onnxfuse.kernels import dequant_matmul, prepare_constant

    tunings = _Tunings()
    log = logging.getLogger("onnxfuse.kernels.autotune")
    log.setLevel(logging.INFO)
    log.addHandler(tunings)
    print(f"# GPU {torch.cuda.get_device_name()}; torch {torch.__version__}; triton {triton.__version__}; "
          f"{os.cpu_count()} CPUs; caches under {_TMP}")
    print("| K x N | M | format | first call s | configs timed | second call ms |")
    print("|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        K, N = (int(v) for v in shape.split("x"))
        for fname in args.formats.split(","):
            wf, sf, bs, two, _ = FORMATS[fname]
            _, _, w, s, gs = random_case(torch, N, K, wf, sf, bs, two)
            s = prepare_constant(s, SCALE_USE)
            kw = dict(K=K, N=N, block_size=bs, weight_format=wf, scale_format=sf)
            for M in (int(v) for v in args.m.split(",")):
                a = torch.randn(M, K, dtype=torch.float16, device="cuda")
                times = []
                for _ in range(2):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    dequant_matmul(a, w, s, None, gs, None, **kw)
                    torch.cuda.synchronize()
                    times.append(time.perf_counter() - t0)
                timed = tunings.configs[-1] if tunings.configs else 0
                tunings.configs.clear()
                print(f"| {K}x{N} | {M} | {fname} | {times[0]:.1f} | {timed} | {1e3 * times[1]:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
