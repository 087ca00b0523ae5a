"""Optimize time and peak memory on a synthetic model with large external-data int4 weights.

    python benchmarks/optimize_memory.py [--gb 4.0] [--k 8192] [--n 8192] [--dir /tmp/x] [--keep]

Writes a model of int4 DQ(W[K, N], axis 0, block 128) -> MatMul layers whose packed weights total
`--gb` GB in one external-data file (random bytes streamed to disk, never held in memory), then
runs `onnxfuse.optimize` + save in a fresh subprocess and reports its wall time and peak RSS
(ru_maxrss of the child) against the weight size. The optimize path keeps the weights memory-
mapped and repacks them lazily, one tensor at a time, while the output is written.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper


def write_model(folder: str, total_bytes: float, K: int, N: int, block: int = 128) -> tuple[str, int, int]:
    per_layer = K * N // 2
    layers = max(1, math.ceil(total_bytes / per_layer))
    data_name = "weights.bin"
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    offset = 0
    with open(os.path.join(folder, data_name), "wb") as f:
        chunk = rng.integers(0, 256, size=per_layer, dtype=np.uint8).tobytes()  # one layer's bytes, reused
        for i in range(layers):
            f.write(chunk)
            t = TensorProto(name=f"w{i}", data_type=TensorProto.INT4, dims=[K, N], data_location=TensorProto.EXTERNAL)
            for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(per_layer))):
                entry = t.external_data.add()
                entry.key, entry.value = key, value
            offset += per_layer
            scale = np.full((K // block, N), 0.01, np.float16)
            inits += [t, onnx.numpy_helper.from_array(scale, f"s{i}")]
            nodes.append(helper.make_node("DequantizeLinear", [f"w{i}", f"s{i}"], [f"wd{i}"], axis=0, block_size=block,
                                          output_dtype=TensorProto.FLOAT, name=f"dq{i}"))
            nodes.append(helper.make_node("MatMul", ["x", f"wd{i}"], [f"y{i}"], name=f"mm{i}"))
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, K])],
                              [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, N]) for i in range(layers)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    path = os.path.join(folder, "big.onnx")
    onnx.save(model, path)
    return path, layers, offset


def child(src: str, dst: str) -> None:
    import onnxfuse

    start = time.perf_counter()
    _, report = onnxfuse.optimize(src, dst)
    elapsed = time.perf_counter() - start
    print(json.dumps({"seconds": elapsed, "fused": sum(sum(v.values()) for v in report.counts.values()),
                      "passes": {p.name: round(p.seconds, 3) for p in report.passes},
                      "weight_bytes_after": report.weight_bytes_after}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=4.0)
    ap.add_argument("--k", type=int, default=8192)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--dir")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("SRC", "DST"))
    args = ap.parse_args()
    if args.child:
        return child(*args.child)
    folder = args.dir or tempfile.mkdtemp(prefix="onnxfuse-bench-")
    os.makedirs(folder, exist_ok=True)
    t0 = time.perf_counter()
    src, layers, nbytes = write_model(folder, args.gb * 1e9, args.k, args.n)
    written = time.perf_counter() - t0
    dst = os.path.join(folder, "big.fused.onnx")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--child", src, dst], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode:
        sys.exit(out.stderr)
    info = json.loads(out.stdout.strip().splitlines()[-1])
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    result = {
        "layers": layers, "K": args.k, "N": args.n, "weight_bytes": nbytes,
        "input_written_s": round(written, 1), "optimize_and_save_s": round(info["seconds"], 1),
        "child_wall_s": round(wall, 1), "peak_rss_bytes": peak, "peak_rss_over_weights": round(peak / nbytes, 3),
        "fused": info["fused"], "passes_s": info["passes"],
        "output_bytes": sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.startswith("big.fused")),
    }
    print(json.dumps(result, indent=2))
    if not args.keep and not args.dir:
        for f in os.listdir(folder):
            os.unlink(os.path.join(folder, f))
        os.rmdir(folder)


if __name__ == "__main__":
    main()
