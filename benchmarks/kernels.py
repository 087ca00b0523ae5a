"""DequantMatMul on the GPU: onnxfuse vs torch, cuBLAS, onnxruntime-gpu MatMulNBits, roofline.

    python benchmarks/kernels.py [--quick] [--shapes 8192x28672,...] [--m 1,16] [--formats int4-b32,...]
                                 [--out results.md]

Columns per (shape, M, format), all in microseconds:
  (a) onnxfuse  onnxfuse.kernels.dequant_matmul (autotuned; the tuning is not timed)
  (b) torch     dequantize in torch (LUT decode, repeat_interleave scales) then matmul
  (c) cublas    torch.matmul (cuBLAS) fp16 on a pre-dequantized weight
  (d) ort       onnxruntime-gpu com.microsoft.MatMulNBits, CUDA EP, IOBinding on device buffers
                (int4/int8 formats only; wall time per run_with_iobinding, as ORT is used)
  (e) roofline  max(weight bytes / measured HBM read bandwidth, FLOPs / measured cuBLAS fp16 peak)
(a)-(c) are device time of CUDA-graph replays, rotating over enough weight copies that the
weights do not sit in the 60 MB L2 between calls. Activations are random fp16. Weights are random
codes made on the device; each row is checked against (c)'s weight, decoded by (b)'s torch ops
(not by onnxfuse), in float32.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import numpy as np

# the two large layers first: their rows carry the targets, and a run cut short still has them
SHAPES = [(8192, 28672), (28672, 8192), (4096, 4096), (4096, 14336), (14336, 4096)]
MS = [1, 2, 4, 8, 16, 32, 64, 256, 1024, 4096]
# name: (weight_format, scale_format, block_size, two-level, ORT bits or None)
FORMATS = {
    "int4-b32": ("int4", "float16", 32, False, 4),
    "int4-b128": ("int4", "float16", 128, False, 4),
    "int8-b128": ("int8", "float16", 128, False, 8),
    "fp8-b128": ("float8e4m3fn", "float16", 128, False, None),
    "mxfp4": ("float4e2m1", "float8e8m0", 32, False, None),
    "mxfp8": ("float8e4m3fn", "float8e8m0", 32, False, None),
    "nvfp4": ("float4e2m1", "float8e4m3fn", 16, True, None),
}
L2_BYTES = 60 * 2**20
SCALE_USE = [("DequantMatMul", "scale")]  # (a) gets its scales in the layout a session loads them in


def graph_time_us(torch, fns, reps=5) -> float:
    """Median device time of one fn call, replaying a CUDA graph of all fns (rotating buffers)."""
    for f in fns:
        f()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    loops = max(1, 8 // len(fns))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        for f in fns:  # warm the capture stream
            f()
        torch.cuda.synchronize()
        with torch.cuda.graph(g, stream=s):
            for _ in range(loops):
                for f in fns:
                    f()
    torch.cuda.synchronize()
    g.replay()
    torch.cuda.synchronize()
    times = []
    t0 = time.perf_counter()
    while len(times) < reps or (time.perf_counter() - t0 < 0.05 and len(times) < 200):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / (loops * len(fns)))
    del g
    return statistics.median(times)


def l2_copies(*tensors) -> list[list]:
    """For each tensor, itself and enough clones (one count for all) that a rotation over them
    reads 4x the L2's bytes: a timed call does not find its operands in L2."""
    n = max(1, math.ceil(4 * L2_BYTES / sum(t.nbytes for t in tensors)))
    return [[t] + [t.clone() for _ in range(n - 1)] for t in tensors]


def measure_hbm_read(torch):
    """(HBM read bytes/s, int32-sum bytes/s, cuBLAS fp16 GEMV bytes/s) measured here; the faster
    of the two readers is the HBM read rate."""
    x = torch.randint(0, 2**30, (2**30,), dtype=torch.int32, device="cuda")  # 4 GiB
    t = graph_time_us(torch, [lambda: x.sum()], reps=10)
    bw_sum = x.numel() * 4 / (t * 1e-6)
    w = torch.randn(28672, 8192, dtype=torch.float16, device="cuda")
    v = torch.randn(1, 8192, dtype=torch.float16, device="cuda")
    t = graph_time_us(torch, [lambda: torch.matmul(v, w.t())], reps=10)
    bw_gemv = w.numel() * 2 / (t * 1e-6)
    del x, w
    torch.cuda.empty_cache()
    return max(bw_sum, bw_gemv), bw_sum, bw_gemv


def measure_ceilings(torch):
    """(HBM read bytes/s, int32-sum bytes/s, GEMV bytes/s, cuBLAS fp16 FLOP/s) measured here."""
    bw, bw_sum, bw_gemv = measure_hbm_read(torch)
    a = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
    t = graph_time_us(torch, [lambda: torch.matmul(a, b)], reps=10)
    peak = 2 * 8192**3 / (t * 1e-6)
    return bw, bw_sum, bw_gemv, peak


def random_case(torch, N, K, wf, sf, bs, two):
    """Random codes W [N, Kb] (uint8, the row layout), scales [N, G] and the global scale, on the device."""
    from onnxfuse.kernels import inputs

    e, sc = inputs.formats(wf, sf)
    kb = math.ceil(K / e.codes_per_byte)
    G = math.ceil(K / bs)
    w = torch.randint(0, 256, (N, kb), dtype=torch.uint8, device="cuda")
    if wf == "float8e4m3fn":
        w = torch.where((w & 0x7F) == 0x7F, w - 1, w)  # no NaN codes
    if sf == "float16":
        s = (torch.rand(N, G, device="cuda") * 0.02 + 0.005).to(torch.float16)
    elif sf == "float8e8m0":
        s = torch.randint(118, 123, (N, G), dtype=torch.uint8, device="cuda")
    else:  # float8e4m3fn block scales of a two-level scheme
        s = torch.randint(0x30, 0x48, (N, G), dtype=torch.uint8, device="cuda")
    gs = torch.tensor([0.01], device="cuda") if two else None
    return e, sc, w, s, gs


def torch_decode(torch, wt, st, gs, lut, s_lut, *, K, bs, cpb, scale_format):
    """W [N, K] in float32, decoded with torch ops (unpack, LUT, repeat_interleave)."""
    if cpb == 2:
        codes = torch.stack((wt & 0xF, wt >> 4), dim=-1).reshape(wt.shape[0], -1)[:, :K]
    else:
        codes = wt
    vals = lut[codes.long()]
    if scale_format == "float16":
        s = st.float()
    else:
        s = s_lut[st.long()]
    w = vals * s.repeat_interleave(bs, dim=1)[:, :K]
    if gs is not None:
        w = w * gs
    return w


def torch_dequant_matmul(torch, a, wt, st, gs, lut, s_lut, **kw):
    """Baseline (b): decode with torch ops, then matmul."""
    return torch.matmul(a, torch_decode(torch, wt, st, gs, lut, s_lut, **kw).to(torch.float16).t())


def ort_session(ort, onnx, helper, codes_rows, scale_fp16, *, K, N, bs, bits):
    """A MatMulNBits session (A[M, K] fp16 with M symbolic, the weight as its initializer)."""
    n_blocks = K // bs
    if bits == 4:
        b = (codes_rows ^ 0x88).reshape(N, n_blocks, bs // 2)  # two's complement -> uint4 around zp 8
    else:
        b = (codes_rows ^ 0x80).reshape(N, n_blocks, bs)  # int8 -> uint8 around zp 128
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft", K=K, N=N,
                            bits=bits, block_size=bs)
    graph = helper.make_graph(
        [node], "mnb", [helper.make_tensor_value_info("A", onnx.TensorProto.FLOAT16, ["M", K])],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT16, ["M", N])],
        initializer=[onnx.numpy_helper.from_array(np.ascontiguousarray(b), "B"),
                     onnx.numpy_helper.from_array(scale_fp16.reshape(-1), "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10  # onnx 1.23 writes a newer IR than onnxruntime 1.31 loads (model.cc:256 refused it)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
    if sess.get_providers()[0] != "CUDAExecutionProvider":
        raise RuntimeError("CUDA EP not active")
    return sess


def ort_time_us(sess, torch, *, M, K, N, runs=30):
    """Wall time of one run_with_iobinding on device buffers (median of 5 runs of `runs`)."""
    a = torch.randn(M, K, dtype=torch.float16, device="cuda")
    y = torch.empty(M, N, dtype=torch.float16, device="cuda")
    io = sess.io_binding()
    io.bind_input("A", "cuda", 0, np.float16, [M, K], a.data_ptr())
    io.bind_output("Y", "cuda", 0, np.float16, [M, N], y.data_ptr())

    for _ in range(5):
        sess.run_with_iobinding(io)
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(runs):
            sess.run_with_iobinding(io)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / runs * 1e6)
    return statistics.median(samples)


def precompile(torch, fmts, ms, threads: int) -> float:
    """Compile every candidate kernel variant in a thread pool (Triton's passes and ptxas run
    outside the GIL) on a 4096x4096 layer: the five shapes share its integer specialisations."""
    from concurrent.futures import ThreadPoolExecutor

    import importlib

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")  # the module (the package exports a function)
    from onnxfuse.kernels import prepare_constant

    tasks = []
    K = N = 4096
    for fname in fmts:
        wf, sf, bs, two, _ = FORMATS[fname]
        e, sc, w, s, gs = random_case(torch, N, K, wf, sf, bs, two)
        s = prepare_constant(s, SCALE_USE)
        for M in ms:
            a = torch.randn(M, K, dtype=torch.float16, device="cuda")
            for cfg in D.tuning_candidates(M, N, w.shape[1], e, bs, a.dtype, a.device, scale_code=sc):
                out = torch.empty(M, N, dtype=torch.float16, device="cuda")
                tasks.append((a, w, s, gs, out, cfg, bs, e, sc))
    t0 = time.perf_counter()

    def one(t):
        a, w, s, gs, out, cfg, bs, e, sc = t
        try:
            D._launch(a, w, s, None, gs, None, out, K=K, N=N, block_size=bs, element=e, scale_code=sc, cfg=cfg)
        except Exception as ex:  # noqa: BLE001 - the autotuner skips configs that fail
            print(f"# precompile: {e.name} {cfg} failed: {str(ex).splitlines()[0][:160]}", flush=True)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, tasks))
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the two large layers and M in 1,16,1024,4096 only")
    p.add_argument("--shapes", default=None, help="KxN list, e.g. 8192x28672,28672x8192")
    p.add_argument("--m", default=None, help="M list, e.g. 1,16,4096")
    p.add_argument("--formats", default=None, help=f"subset of {','.join(FORMATS)}")
    p.add_argument("--no-ort", action="store_true")
    p.add_argument("--no-torch", action="store_true", help="skip baseline (b)")
    p.add_argument("--out", default=None, help="also write the table here")
    p.add_argument("--precompile-threads", type=int, default=16, help="0: compile lazily")
    args = p.parse_args(argv)

    import torch
    import triton

    from onnxfuse import formats as F
    from onnxfuse.kernels import prepare_constant
    from onnxfuse.kernels.dequant_matmul import dequant_matmul

    shapes = SHAPES if not args.quick else [(8192, 28672), (28672, 8192)]
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    ms = MS if not args.quick else [1, 16, 1024, 4096]
    if args.m:
        ms = [int(v) for v in args.m.split(",")]
    fmts = list(FORMATS) if not args.formats else args.formats.split(",")

    ort = None
    if not args.no_ort:
        try:
            import onnx
            import onnxruntime as ort
            from onnx import helper
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                print(f"# onnxruntime {ort.__version__} has no CUDA EP: column (d) skipped")
                ort = None
        except ImportError as e:
            print(f"# onnxruntime-gpu unavailable ({e}): column (d) skipped")
            ort = None

    if args.precompile_threads:
        print(f"# precompiled the kernel variants in {precompile(torch, fmts, ms, args.precompile_threads):.0f} s",
              flush=True)
    bw, bw_sum, bw_gemv, peak = measure_ceilings(torch)
    dev = torch.cuda.get_device_name()
    header = [
        f"# GPU {dev}; torch {torch.__version__}; triton {triton.__version__}; "
        f"onnxruntime {ort.__version__ if ort else 'n/a'}",
        f"# measured HBM read: {bw/1e12:.2f} TB/s (int32 sum over 4 GiB {bw_sum/1e12:.2f}, cuBLAS fp16 GEMV "
        f"28672x8192 {bw_gemv/1e12:.2f}); cuBLAS fp16 GEMM 8192^3: {peak/1e12:.0f} TFLOP/s",
        "",
        "| K x N | M | format | (a) onnxfuse us | (b) torch us | (c) cuBLAS us | (d) ORT us | (e) roofline us | "
        "(a) GB/s | c/a | d/a | e/a |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(header), flush=True)
    lines = list(header)
    for (K, N) in shapes:
        for fname in fmts:
            wf, sf, bs, two, ort_bits = FORMATS[fname]
            _, _, w, s, gs = random_case(torch, N, K, wf, sf, bs, two)
            wbytes = w.nbytes + s.nbytes
            wt, st = l2_copies(w, s)
            copies = len(wt)
            st_a = [prepare_constant(s_, SCALE_USE) for s_ in st]
            e, sfmt = F.element_format(wf), F.scale_format(sf)
            lut = torch.from_numpy(e.lut.copy()).cuda()
            s_lut = torch.from_numpy(sfmt.lut.copy()).cuda() if sfmt.lut is not None else None
            dec = dict(K=K, bs=bs, cpb=e.row_codes_per_byte, scale_format=sf)
            wdec = torch_decode(torch, w, s, gs, lut, s_lut, **dec)
            w16 = wdec.to(torch.float16)
            (w16_copies,) = l2_copies(w16)
            sess = None
            if ort is not None and ort_bits is not None:
                try:
                    sess = ort_session(ort, onnx, helper, w.cpu().numpy(), s.cpu().numpy(), K=K, N=N, bs=bs,
                                       bits=ort_bits)
                except Exception as ex:  # noqa: BLE001 - a baseline that cannot run is reported, not fatal
                    print(f"# ORT failed for {fname} {K}x{N}: {str(ex).splitlines()[0][:400]}", flush=True)
            for M in ms:
                a = torch.randn(M, K, dtype=torch.float16, device="cuda")
                outs = [torch.empty(M, N, dtype=torch.float16, device="cuda") for _ in range(copies)]
                kw = dict(K=K, N=N, block_size=bs, weight_format=wf, scale_format=sf)
                # correctness spot check against the torch-decoded weight, in float32
                y = dequant_matmul(a, wt[0], st_a[0], None, gs, None, out=outs[0], **kw)
                want = torch.matmul(a.float(), wdec.t())
                rel = ((y.float() - want).norm() / want.norm()).item()
                ta = graph_time_us(torch, [
                    (lambda i=i: dequant_matmul(a, wt[i], st_a[i], None, gs, None, out=outs[i], **kw))
                    for i in range(copies)])
                tb = float("nan")
                if not args.no_torch:
                    tb = graph_time_us(torch, [
                        (lambda i=i: torch_dequant_matmul(torch, a, wt[i], st[i], gs, lut, s_lut, **dec))
                        for i in range(min(copies, 2))])
                tc = graph_time_us(torch, [(lambda w_=w_: torch.matmul(a, w_.t())) for w_ in w16_copies])
                td = float("nan")
                if sess is not None:
                    try:
                        td = ort_time_us(sess, torch, M=M, K=K, N=N)
                    except Exception as ex:  # noqa: BLE001 - a baseline that cannot run is reported, not fatal
                        print(f"# ORT failed for {fname} M={M}: {str(ex).splitlines()[0][:400]}", flush=True)
                te = max(wbytes / bw, 2 * M * N * K / peak) * 1e6
                row = (f"| {K}x{N} | {M} | {fname} | {ta:.1f} | {tb:.1f} | {tc:.1f} | {td:.1f} | {te:.1f} | "
                       f"{wbytes / (ta * 1e-6) / 1e9:.0f} | {tc / ta:.2f} | {td / ta:.2f} | {te / ta:.2f} |")
                if rel > 2e-2:
                    row += f" WRONG rel err {rel:.2e}"
                print(row, flush=True)
                lines.append(row)
                if args.out:
                    with open(args.out, "w") as f:
                        f.write("\n".join(lines) + "\n")
            del wt, st, st_a, wdec, w16, w16_copies, sess
            torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
