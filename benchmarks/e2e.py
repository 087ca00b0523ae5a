"""End-to-end benchmark: a 2-layer hidden-4096 decoder with int4 / NVFP4 / MXFP4 weights, run by
onnxfuse.InferenceSession (triton backend, eager and CUDA graph) against onnxruntime-gpu on the
original Q/DQ int4 model (which ORT rewrites to MatMulNBits), at batch 1, seq 1 and 512.

Two model sources:
- `--source zoo` (default): the zoo's llama_4096_int4 / _nvfp4 / _mxfp4 (models/zoo.py:
  LLAMA_4096, two Llama-3-8B-shaped layers with rotary, GQA attention and a tied 32000-token
  embedding/LM head, quantized by onnxfuse.quantize), each optimized by onnxfuse.optimize; the
  int4 zoo model itself is ORT's original. Building the float base and the three quantized
  models took ~2 minutes on a 2-core CPU (about 30 s each; here the three quantized ones are
  built in parallel processes); `--zoo-cache DIR` (or ONNXFUSE_CACHE_DIR) keeps them between runs.
- `--source synth`: a Llama-shaped stack built in seconds: per layer RMSNorm -> q/k/v
  projections -> an elementwise stand-in for attention (q * sigmoid(k) + v) -> o projection +
  residual -> RMSNorm -> SwiGLU MLP (4096x11008) + residual, random codes with realistic
  scales; the int4 original is DQ(int4 W[K,N], axis 0, block 32, fp16 scales) -> MatMul and its
  fused model comes from onnxfuse.optimize; NVFP4/MXFP4 are written in the fused row layout.

Per model and sequence length it reports p50/p90 wall time per run (feeds already on the GPU,
outputs left there, synchronized after each run), the sum of the segments' GPU times measured
with CUDA events inside single runs queued behind a GPU sleep (so host launch gaps are not
counted; onnxfuse.runtime.bench.gpu_breakdown), and the ratio p50 / GPU sum (target <= 1.5).
A cProfile of eager int4 seq-1 runs shows where the host time goes (skipped with --quick).

    python benchmarks/e2e.py [--quick] [--seq 1 512] [--schemes int4 nvfp4 mxfp4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN, MLP, LAYERS = 4096, 11008, 2
OPSET = 25
IR_VERSION = 10  # onnxruntime-gpu 1.31 refuses onnx 1.23's default IR version
SCHEMES = {  # block size, weight format, scale format, has a global scale
    "int4": (32, "int4", "float16", False),
    "nvfp4": (16, "float4e2m1", "float8e4m3fn", True),
    "mxfp4": (32, "float4e2m1", "float8e8m0", False),
}
ZOO_NAMES = {"int4": "llama_4096_int4", "nvfp4": "llama_4096_nvfp4", "mxfp4": "llama_4096_mxfp4"}


# -- synthesized models -------------------------------------------------------------------
def _scales(rng, fmt: str, shape) -> np.ndarray:
    if fmt == "float16":  # int4 codes in [-8, 7] times ~0.004: activations stay O(1)
        return (rng.random(shape, dtype=np.float32) * 0.004 + 0.002).astype(np.float16)
    if fmt == "float8e4m3fn":  # E4M3 codes for ~0.5..1.0 (times the global scale 1/64)
        return rng.integers(0x30, 0x38, size=shape, dtype=np.uint8)
    return rng.integers(118, 121, size=shape, dtype=np.uint8)  # E8M0: 2^-9 .. 2^-7


def _int4_kn_bytes(codes_nk: np.ndarray) -> bytes:
    """Two's-complement int4 codes [N, K] -> ONNX int4 raw bytes of W[K, N] (low nibble first)."""
    flat = np.ascontiguousarray(codes_nk.T).reshape(-1)
    if flat.size % 2:
        flat = np.concatenate([flat, np.zeros(1, flat.dtype)])
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()


class SynthDecoder:
    """original=True: the int4 Q/DQ model; else the fused model of `scheme` in the row layout."""

    def __init__(self, scheme: str, original: bool, hidden: int, mlp: int):
        self.scheme, self.original, self.hidden, self.mlp = scheme, original, hidden, mlp
        self.rng = np.random.default_rng(0)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, p):
        self.n += 1
        return f"{p}{self.n}"

    def const(self, array, p="c"):
        n = self.name(p)
        self.inits.append(numpy_helper.from_array(np.asarray(array), n))
        return n

    def op(self, op_type, inputs, p=None, **attrs):
        out = self.name(p or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out + "_node", **attrs))
        return out

    def linear(self, x, K, N):
        bs, wf, sf, two_level = SCHEMES[self.scheme]
        codes = self.rng.integers(0, 16, size=(N, K), dtype=np.uint8)  # 4-bit codes (int4: two's complement)
        scale = _scales(self.rng, sf, (N, -(-K // bs)))
        if self.original:  # int4 only: DQ(W[K,N], axis 0) -> MatMul, as ORT's quantizer writes it
            w = numpy_helper.from_array(np.zeros((K, N), np.int8), self.name("wq"))
            w.data_type = TensorProto.INT4
            w.raw_data = _int4_kn_bytes(codes)
            self.inits.append(w)
            dq = self.op("DequantizeLinear", [w.name, self.const(np.ascontiguousarray(scale.T), "ws")], "w",
                         axis=0, block_size=bs)
            return self.op("MatMul", [x, dq], "mm")
        packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
        inputs = [x, self.const(packed, "wr"), self.const(scale, "wrs"), ""]
        inputs.append(self.const(np.float32(1 / 64), "gs") if two_level else "")
        while inputs[-1] == "":
            inputs.pop()
        out = self.name("dqmm")
        self.nodes.append(helper.make_node("DequantMatMul", inputs, [out], name=out, domain="onnxfuse",
                                           K=K, N=N, block_size=bs, weight_format=wf, scale_format=sf))
        return out

    def rmsnorm(self, x):
        mean = self.op("ReduceMean", [self.op("Mul", [x, x]), self.const(np.array([-1], np.int64))], keepdims=1)
        inv = self.op("Reciprocal", [self.op("Sqrt", [self.op("Add", [mean, self.const(np.float16(1e-5))])])])
        return self.op("Mul", [self.op("Mul", [x, inv]), self.const(np.ones(self.hidden, np.float16))])

    def layer(self, h):
        d, f = self.hidden, self.mlp
        n = self.rmsnorm(h)
        q, k, v = (self.linear(n, d, d) for _ in range(3))
        a = self.op("Add", [self.op("Mul", [q, self.op("Sigmoid", [k])]), v])
        h = self.op("Add", [h, self.linear(a, d, d)])
        n = self.rmsnorm(h)
        g, u = self.linear(n, d, f), self.linear(n, d, f)
        s = self.op("Mul", [self.op("Mul", [g, self.op("Sigmoid", [g])]), u])
        return self.op("Add", [h, self.linear(s, f, d)])

    def model(self, layers: int) -> onnx.ModelProto:
        h = "hidden"
        for _ in range(layers):
            h = self.layer(h)
        self.nodes.append(helper.make_node("Identity", [h], ["out"], name="out_node"))
        g = helper.make_graph(
            self.nodes, f"decoder_{self.scheme}",
            [helper.make_tensor_value_info("hidden", TensorProto.FLOAT16, [1, "seq", self.hidden])],
            [helper.make_tensor_value_info("out", TensorProto.FLOAT16, [1, "seq", self.hidden])], self.inits)
        opsets = [helper.make_opsetid("", OPSET)] + ([] if self.original else [helper.make_opsetid("onnxfuse", 1)])
        return helper.make_model(g, opset_imports=opsets, ir_version=IR_VERSION)


def _optimized_proto(model) -> onnx.ModelProto:
    """onnxfuse.optimize(model) as a ModelProto with every initializer in memory."""
    import os

    import onnx_ir as ir

    import onnxfuse

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fused, report = onnxfuse.optimize(model)
    proto = ir.to_proto(fused)
    if isinstance(model, (str, os.PathLike)):  # tensors optimize left alone still point into the zoo file
        onnx.external_data_helper.load_external_data_for_model(proto, os.path.dirname(os.path.abspath(model)))
    proto.ir_version = min(proto.ir_version, IR_VERSION)
    print(f"  optimize: {report.counts}", flush=True)
    return proto


def synth_models(schemes, hidden: int, mlp: int, layers: int):
    """(original int4 Q/DQ proto, {scheme: fused proto}, feeds(seq))."""
    original = SynthDecoder("int4", True, hidden, mlp).model(layers)
    fused = {}
    for s in schemes:
        # same seed: the fused int4 model decodes exactly the original's codes and scales
        fused[s] = _optimized_proto(original) if s == "int4" else SynthDecoder(s, False, hidden, mlp).model(layers)
    rng = np.random.default_rng(1)

    def feeds(seq: int) -> dict:
        return {"hidden": (rng.standard_normal((1, seq, hidden)) * 0.5).astype(np.float16)}

    return original, fused, feeds


ROOT = Path(__file__).resolve().parents[1]


def _zoo():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from models import zoo

    return zoo


def _build(name: str, cache_dir: str | None) -> tuple[str, float]:
    t0 = time.time()
    return _zoo().build(name, cache_dir), time.time() - t0


def zoo_models(schemes, cache_dir: str | None):
    """The zoo's float llama_4096 first, then its quantized variants in parallel processes
    (each reads the float base; the zoo writes every file atomically)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    zoo = _zoo()
    base, dt = _build("llama_4096", cache_dir)
    print(f"  zoo llama_4096: {dt:.0f}s", flush=True)
    names = sorted({ZOO_NAMES["int4"]} | {ZOO_NAMES[s] for s in schemes})
    with ProcessPoolExecutor(len(names), mp_context=multiprocessing.get_context("spawn")) as pool:
        built = dict(zip(names, pool.map(_build, names, [cache_dir] * len(names))))
    for name, (_, dt) in built.items():
        print(f"  zoo {name}: {dt:.0f}s", flush=True)
    original = onnx.load(built[ZOO_NAMES["int4"]][0])
    original.ir_version = min(original.ir_version, IR_VERSION)
    fused = {s: _optimized_proto(built[ZOO_NAMES[s]][0]) for s in schemes}
    entry = zoo.entry(ZOO_NAMES["int4"])
    return original, fused, lambda seq: zoo.feeds(entry, batch=1, seq=seq)


# -- measuring ----------------------------------------------------------------------------
def host_profile(sess, feeds, runs: int = 20, top: int = 18) -> str:
    """cProfile of eager runs (after warm-up): the functions where the host time goes."""
    import cProfile
    import io
    import pstats

    backend = sess._backend
    dev = {k: backend._to_device(v) for k, v in feeds.items()}
    names = [o.name for o in sess.get_outputs()]
    for _ in range(3):
        backend.run_torch(names, dev)
    backend.torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(runs):
        backend.run_torch(names, dev)
    backend.torch.cuda.synchronize()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return f"host profile of {runs} eager runs (tottime order):\n" + out.getvalue()


def rel_l2(got, want) -> float:
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs, no host profile (about 2 minutes on an H200)")
    ap.add_argument("--source", choices=("zoo", "synth"), default="zoo")
    ap.add_argument("--zoo-cache", default=None, help="zoo cache folder (default: the zoo's)")
    ap.add_argument("--seq", type=int, nargs="+", default=[1, 512])
    ap.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=list(SCHEMES))
    ap.add_argument("--iters", type=int, default=None, help="timed runs (default 50, --quick 15)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up runs (default 10, --quick 3)")
    ap.add_argument("--hidden", type=int, default=HIDDEN, help="synth only (smaller for a smoke test)")
    ap.add_argument("--mlp", type=int, default=MLP, help="synth only")
    ap.add_argument("--layers", type=int, default=LAYERS, help="synth only")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    iters = args.iters or (15 if args.quick else 50)
    warmup = args.warmup or (3 if args.quick else 10)

    import torch

    if not torch.cuda.is_available():
        print("e2e.py needs a CUDA GPU (the triton backend's GPU path)", file=sys.stderr)
        return 2
    import onnxruntime as ort

    from onnxfuse.runtime.bench import gpu_breakdown, time_ort_original, time_session
    from onnxfuse.runtime.model_source import ModelSource
    from onnxfuse.runtime.session import InferenceSession

    t0 = time.time()
    print(f"building models ({args.source})", flush=True)
    if args.source == "zoo":
        original, fused, make_feeds = zoo_models(args.schemes, args.zoo_cache)
    else:
        original, fused, make_feeds = synth_models(args.schemes, args.hidden, args.mlp, args.layers)
    print(f"built in {time.time() - t0:.0f}s", flush=True)

    t1 = time.time()
    sessions = {}
    for s, model in fused.items():
        for graph in (False, True):
            sessions[(s, graph)] = InferenceSession(model, backend="triton", cuda_graph=graph)
    plan = sessions[(args.schemes[0], False)].plan.summary()
    print(f"sessions in {time.time() - t1:.0f}s; plan: {plan}", flush=True)
    ref = ort.InferenceSession(original.SerializeToString(), providers=["CUDAExecutionProvider"])
    orig_src = ModelSource(original, None, "int4 Q/DQ original")

    results, profile = [], None
    for seq in args.seq:
        feeds = make_feeds(seq)
        row = {"seq": seq, "models": []}
        base = time_ort_original(orig_src, feeds, warmup=warmup, iters=iters)
        row["ort"] = base if isinstance(base, str) else base.to_json()
        want = ref.run(None, feeds)[0]
        for s in args.schemes:
            eager, graph = sessions[(s, False)], sessions[(s, True)]
            got = eager.run(None, feeds)[0]
            err = rel_l2(got, want) if s == "int4" else None
            gb = gpu_breakdown(eager, feeds, iters=max(3, iters // 5))
            for mode, sess in (("eager", eager), ("CUDA graph", graph)):
                t = time_session(sess, feeds, warmup=warmup, iters=iters, label=f"{s} {mode}")
                if mode == "CUDA graph" and not sess._backend.cuda_graph:
                    mode = "CUDA graph capture FAILED, eager"  # the session warned why
                row["models"].append({"scheme": s, "mode": mode, **t.to_json(), "gpu": gb, "int4_rel_l2": err})
            if s == "int4" and seq == min(args.seq) and not args.quick:
                profile = host_profile(eager, feeds)
            print(f"seq {seq} {s}: eager {row['models'][-2]['p50_ms']:.3f} ms, graph {row['models'][-1]['p50_ms']:.3f} ms, "
                  f"GPU sum {gb['gpu_sum_ms']:.3f} ms (kernels {gb['kernel_gpu_ms']:.3f}, ORT {gb['ort_gpu_ms']:.3f}, "
                  f"gaps {gb['gaps_ms']:.3f}), host enqueue {gb['host_enqueue_ms']:.3f} ms"
                  + (f", rel L2 vs ORT {err:.2e}" if err is not None else ""), flush=True)
        results.append(row)

    print(f"\nonnxfuse e2e ({args.source}, {args.layers if args.source == 'synth' else 2} layers, hidden "
          f"{args.hidden if args.source == 'synth' else 4096}, batch 1, fp16 activations); plan: {plan}; "
          f"{iters} runs after {warmup} warm-up; total {time.time() - t0:.0f}s")
    print("| seq | model | p50 ms | p90 ms | GPU sum ms | p50 / GPU sum | host enqueue ms | vs ORT int4 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in results:
        base = row["ort"]
        bp = base["p50_ms"] if isinstance(base, dict) else None
        if bp:
            print(f"| {row['seq']} | ORT CUDA EP, original int4 Q/DQ (MatMulNBits) | {bp:.3f} | {base['p90_ms']:.3f} "
                  f"| | | | 1.00x |")
        else:
            print(f"| {row['seq']} | ORT CUDA EP, original int4 Q/DQ | not run: {base} | | | | | |")
        for m in row["models"]:
            g = m["gpu"]
            ratio = m["p50_ms"] / g["gpu_sum_ms"] if g["gpu_sum_ms"] > 0 else float("nan")
            host = f"{g['host_enqueue_ms']:.3f}" if m["mode"] == "eager" else ""
            vs = f"{bp / m['p50_ms']:.2f}x" if bp else ""
            print(f"| {row['seq']} | onnxfuse {m['scheme']}, {m['mode']} | {m['p50_ms']:.3f} | {m['p90_ms']:.3f} "
                  f"| {g['gpu_sum_ms']:.3f} | {ratio:.2f} | {host} | {vs} |")
    for row in results:
        for m in row["models"]:
            if m["int4_rel_l2"] is not None and m["mode"] == "eager":
                print(f"seq {row['seq']}: fused int4 vs ORT on the original, relative L2 error {m['int4_rel_l2']:.2e}")
    if results:
        gb = results[0]["models"][0]["gpu"]
        print(f"\nper segment, seq {results[0]['seq']} {results[0]['models'][0]['scheme']} eager (GPU ms / host ms):")
        for r in gb["segments"]:
            print(f"  {r['gpu_ms']:8.4f} {r['host_ms']:8.4f}  {r['segment']}")
    if profile:
        print("\n" + profile)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "plan": plan}, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
