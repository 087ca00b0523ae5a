"""End-to-end benchmark: a 2-layer Llama-style decoder stack (hidden 4096, MLP 11008, fp16
activations) with int4 / NVFP4 / MXFP4 weights, run by onnxfuse.InferenceSession (triton backend)
against onnxruntime-gpu on the original Q/DQ int4 model (which ORT rewrites to MatMulNBits).

Each layer: RMSNorm -> q/k/v projections -> an elementwise stand-in for attention
(q * sigmoid(k) + v: attention itself is not what this measures) -> o projection + residual ->
RMSNorm -> SwiGLU MLP (gate, up, down) + residual. Standard ops run in ORT segments, the seven
projections per layer in DequantMatMul kernels.

Weights are random codes with realistic scales, built directly in the fused row layout (and,
for int4, the same codes in the original's DQ(W[K,N], axis 0, block 32) layout), because
quantizing 400M float weights in NumPy would take minutes. The int4 fused model is checked
against ORT on the original before it is timed.

    python benchmarks/e2e.py [--seq 1 512] [--iters 50] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN, MLP, LAYERS = 4096, 11008, 2
OPSET = 25
rng = np.random.default_rng(0)

# block size, weight format, scale format, has global scale
SCHEMES = {
    "int4": (32, "int4", "float16", False),
    "nvfp4": (16, "float4e2m1", "float8e4m3fn", True),
    "mxfp4": (32, "float4e2m1", "float8e8m0", False),
}


def _scales(fmt: str, shape) -> np.ndarray:
    if fmt == "float16":  # int4 codes in [-8, 7] times ~0.01: activations stay O(1)
        return (rng.random(shape, dtype=np.float32) * 0.004 + 0.002).astype(np.float16)
    if fmt == "float8e4m3fn":  # E4M3 codes for ~0.5..1.0 (times the global scale below)
        return rng.integers(0x30, 0x38, size=shape, dtype=np.uint8)
    return rng.integers(118, 121, size=shape, dtype=np.uint8)  # E8M0: 2^-9 .. 2^-7


def _nibbles_to_kn(rows_codes: np.ndarray) -> np.ndarray:
    """codes [N, K] -> ONNX int4 raw bytes of W[K, N] (flat, low nibble first)."""
    flat = np.ascontiguousarray(rows_codes.T).reshape(-1)
    if flat.size % 2:
        flat = np.concatenate([flat, [0]])
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)


class Builder:
    def __init__(self, scheme: str, original: bool):
        self.scheme, self.original = scheme, original
        self.nodes, self.inits = [], []
        self.n = 0

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
        G = -(-K // bs)
        codes = rng.integers(0, 16, size=(N, K), dtype=np.uint8)
        scale = _scales(sf, (N, G))
        if self.original:  # int4 only: DQ(W[K,N], axis 0) -> MatMul, as ORT's quantizer writes it
            w = numpy_helper.from_array(np.zeros((K, N), np.int8), self.name("wq"))
            w.data_type = TensorProto.INT4
            w.raw_data = _nibbles_to_kn(codes).tobytes()
            self.inits.append(w)
            s = self.const(np.ascontiguousarray(scale.T), "ws")
            dq = self.op("DequantizeLinear", [w.name, s], "w", axis=0, block_size=bs)
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
        sq = self.op("Mul", [x, x])
        mean = self.op("ReduceMean", [sq, self.const(np.array([-1], np.int64))], keepdims=1)
        inv = self.op("Reciprocal", [self.op("Sqrt", [self.op("Add", [mean, self.const(np.float16(1e-5))])])])
        return self.op("Mul", [self.op("Mul", [x, inv]), self.const(np.ones(HIDDEN, np.float16))])

    def layer(self, h):
        n = self.rmsnorm(h)
        q, k, v = (self.linear(n, HIDDEN, HIDDEN) for _ in range(3))
        a = self.op("Add", [self.op("Mul", [q, self.op("Sigmoid", [k])]), v])
        h = self.op("Add", [h, self.linear(a, HIDDEN, HIDDEN)])
        n = self.rmsnorm(h)
        g, u = self.linear(n, HIDDEN, MLP), self.linear(n, HIDDEN, MLP)
        s = self.op("Mul", [self.op("Mul", [g, self.op("Sigmoid", [g])]), u])
        return self.op("Add", [h, self.linear(s, MLP, HIDDEN)])

    def model(self) -> onnx.ModelProto:
        h = "hidden"
        for _ in range(LAYERS):
            h = self.layer(h)
        self.nodes.append(helper.make_node("Identity", [h], ["out"], name="out_node"))
        g = helper.make_graph(
            self.nodes, f"decoder_{self.scheme}",
            [helper.make_tensor_value_info("hidden", TensorProto.FLOAT16, [1, "seq", HIDDEN])],
            [helper.make_tensor_value_info("out", TensorProto.FLOAT16, [1, "seq", HIDDEN])], self.inits)
        opsets = [helper.make_opsetid("", OPSET)] + ([] if self.original else [helper.make_opsetid("onnxfuse", 1)])
        return helper.make_model(g, opset_imports=opsets, ir_version=11)


def build(scheme: str, original: bool) -> onnx.ModelProto:
    global rng
    rng = np.random.default_rng(0)  # same codes and scales for the original and the fused int4 model
    return Builder(scheme, original).model()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, nargs="+", default=[1, 512])
    ap.add_argument("--schemes", nargs="+", default=list(SCHEMES))
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args(argv)

    import torch

    from onnxfuse.runtime.bench import segment_breakdown, time_ort_original, time_session
    from onnxfuse.runtime.model_source import ModelSource
    from onnxfuse.runtime.session import InferenceSession

    results = []
    t0 = time.time()
    original = build("int4", True)
    fused = {s: build(s, False) for s in args.schemes}
    print(f"built models in {time.time() - t0:.1f}s", flush=True)
    orig_src = ModelSource(original, None, "int4 QDQ original")
    for seq in args.seq:
        x = (rng.standard_normal((1, seq, HIDDEN)) * 0.5).astype(np.float16)
        feeds = {"hidden": x}
        base = time_ort_original(orig_src, feeds, warmup=args.warmup, iters=args.iters)
        row = {"seq": seq, "ort_original_int4": base if isinstance(base, str) else base.to_json()}
        for scheme, model in fused.items():
            for graph in (False, True):
                sess = InferenceSession(model, backend="triton", cuda_graph=graph)
                if scheme == "int4" and not graph:  # correctness before timing
                    import onnxruntime as ort

                    ref = ort.InferenceSession(original.SerializeToString(), providers=["CUDAExecutionProvider"])
                    want = ref.run(None, feeds)[0].astype(np.float32)
                    got = sess.run(None, feeds)[0].astype(np.float32)
                    row["int4_vs_ort_rel_l2"] = float(np.linalg.norm(got - want) / np.linalg.norm(want))
                t = time_session(sess, feeds, warmup=args.warmup, iters=args.iters,
                                 label=f"{scheme}{' graph' if graph else ''}")
                key = f"{scheme}{'_graph' if graph else ''}"
                row[key] = t.to_json()
                if not graph:
                    segs = segment_breakdown(sess, feeds, iters=10)
                    kern = sum(r["median_ms"] for r in segs if r["segment"].startswith("kernel"))
                    ortt = sum(r["median_ms"] for r in segs if not r["segment"].startswith("kernel"))
                    row[key]["kernel_ms_sum"] = kern
                    row[key]["ort_segments_ms_sum"] = ortt
                    row[key]["segments"] = len(segs)
                del sess
                torch.cuda.empty_cache()
            print(json.dumps({k: v for k, v in row.items()}, default=str)[:2000], flush=True)
        results.append(row)

    print("\n| seq | model | p50 ms | p90 ms | kernels sum ms | ORT segs ms | vs ORT int4 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in results:
        base = row["ort_original_int4"]
        bp = base["p50_ms"] if isinstance(base, dict) else None
        if bp:
            print(f"| {row['seq']} | ORT MatMulNBits (original int4) | {bp:.3f} | {base['p90_ms']:.3f} | | | 1.00x |")
        for key, t in row.items():
            if not isinstance(t, dict) or key == "ort_original_int4":
                continue
            ks = f"{t['kernel_ms_sum']:.3f}" if "kernel_ms_sum" in t else ""
            os_ = f"{t['ort_segments_ms_sum']:.3f}" if "ort_segments_ms_sum" in t else ""
            sp = f"{bp / t['p50_ms']:.2f}x" if bp else ""
            print(f"| {row['seq']} | onnxfuse {key} | {t['p50_ms']:.3f} | {t['p90_ms']:.3f} | {ks} | {os_} | {sp} |")
        if "int4_vs_ort_rel_l2" in row:
            print(f"seq {row['seq']}: fused int4 vs ORT original, relative L2 error {row['int4_vs_ort_rel_l2']:.2e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
