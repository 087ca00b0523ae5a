"""`onnxfuse bench MODEL`: latency and throughput of a fused model, against ORT on the original."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "bench",
        help="time a fused model against onnxruntime on the original",
        description="Times MODEL under onnxfuse.InferenceSession (p50/p90 latency, throughput, a per-segment "
        "breakdown on the triton backend). If MODEL has no fused ops it is optimized in memory first and the "
        "comparison runs against MODEL itself under onnxruntime; otherwise give the original with --original.",
    )
    p.add_argument("model", metavar="MODEL", help="a fused model, or an original to optimize in memory")
    p.add_argument("--original", metavar="ORIGINAL", help="the unfused model, timed under onnxruntime for comparison")
    p.add_argument("--backend", choices=("auto", "ort", "triton"), default="auto")
    p.add_argument("--warmup", type=int, default=10, help="untimed runs first (default 10)")
    p.add_argument("--iters", type=int, default=100, help="timed runs (default 100)")
    p.add_argument("--inputs", metavar="FILE.npz", help="inputs by name (default: random)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME:DIMS",
                   help="shape of a generated input (input_ids:1x512) or a symbolic dim (seq=512); repeatable")
    p.add_argument("--cuda-graph", action="store_true", help="triton backend on a GPU: replay a captured CUDA graph")
    p.add_argument("--no-original", action="store_true", help="skip timing the original")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    return p


def run(args) -> int:
    from onnxfuse import codes
    from onnxfuse.diagnostics import OnnxfuseError
    from onnxfuse.runtime.bench import segment_breakdown, time_ort_original, time_session
    from onnxfuse.runtime.feeds import graph_inputs
    from onnxfuse.runtime.inputs import load_npz, parse_shape_args, random_inputs
    from onnxfuse.runtime.model_source import ModelSource, load_source
    from onnxfuse.runtime.plan import is_fused
    from onnxfuse.runtime.session import InferenceSession

    if args.iters < 1 or args.warmup < 0:
        raise OnnxfuseError.of(codes.USAGE, "--iters must be >= 1 and --warmup >= 0")
    model = load_source(args.model)
    original = load_source(args.original) if args.original else None
    fused = model
    if not any(is_fused(n) for n in model.proto.graph.node):
        try:
            from onnxfuse.optimize_api import optimize
        except ImportError as e:
            raise OnnxfuseError.of(codes.USAGE, f"{args.model} has no fused ops and onnxfuse.optimize is unavailable: {e}") from e
        import onnx_ir as ir

        optimized, _ = optimize(args.model)
        fused = ModelSource(ir.serde.serialize_model(optimized), None, f"{args.model} (optimized in memory)")
        original = original or model
    shapes, dims = parse_shape_args(args.shape)
    src_for_inputs = original or fused
    if args.inputs:
        feeds = load_npz(args.inputs, graph_inputs(src_for_inputs.proto))
    else:
        feeds = random_inputs(src_for_inputs.proto, shapes=shapes, dims=dims)

    session = InferenceSession(fused.proto, backend=args.backend, cuda_graph=args.cuda_graph)
    result = {"model": args.model, "backend": session.backend_name, "providers": session.get_providers(),
              "inputs": {k: list(v.shape) for k, v in feeds.items()}}
    fused_t = time_session(session, feeds, warmup=args.warmup, iters=args.iters,
                           label=f"onnxfuse ({session.backend_name}{', CUDA graph' if args.cuda_graph else ''})")
    result["fused"] = fused_t.to_json()
    if session.plan is not None:
        result["plan"] = session.plan.summary()
        result["segments"] = segment_breakdown(session, feeds, iters=min(args.iters, 20))
        if getattr(session._backend, "cuda", False):
            from onnxfuse.runtime.bench import gpu_breakdown

            gpu = gpu_breakdown(session, feeds, iters=min(args.iters, 10))
            result["gpu"] = {k: v for k, v in gpu.items() if k != "segments"}
    if original is not None and not args.no_original:
        orig_t = time_ort_original(original, feeds, warmup=args.warmup, iters=args.iters)
        if isinstance(orig_t, str):
            result["original"] = {"unavailable": orig_t}
        else:
            result["original"] = orig_t.to_json()
            result["speedup"] = orig_t.p50_ms / fused_t.p50_ms
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"model: {args.model}   backend: {session.backend_name}   providers: {', '.join(result['providers'])}")
    print("inputs: " + ", ".join(f"{k} {'x'.join(map(str, s))}" for k, s in result["inputs"].items()))
    rows = [("", "p50 ms", "p90 ms", "mean ms", "items/s")]
    for key in ("fused", "original"):
        t = result.get(key)
        if t and "p50_ms" in t:
            rows.append((t["label"], f"{t['p50_ms']:.4f}", f"{t['p90_ms']:.4f}", f"{t['mean_ms']:.4f}", f"{t['throughput_per_s']:.1f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    if "original" in result and "unavailable" in result["original"]:
        print(f"onnxruntime on the original: not run ({result['original']['unavailable']})")
    if "speedup" in result:
        print(f"speedup over onnxruntime: {result['speedup']:.2f}x")
    if result.get("gpu"):
        g = result["gpu"]
        print(f"GPU time per run {g['gpu_sum_ms']:.4f} ms (kernels {g['kernel_gpu_ms']:.4f}, ORT {g['ort_gpu_ms']:.4f}); "
              f"p50 / GPU time {fused_t.p50_ms / max(g['gpu_sum_ms'], 1e-9):.2f}; host enqueue {g['host_enqueue_ms']:.4f} ms")
    if result.get("segments"):
        print(f"per segment ({result['plan']}; medians, bracketed by events):")
        for r in result["segments"]:
            print(f"  {r['median_ms']:9.4f} ms  {100 * r['share']:5.1f}%  {r['segment']}")
    return 0
