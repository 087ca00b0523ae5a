"""`onnxfuse quantize IN -o OUT --scheme S`: RTN weight-only quantization into standard Q/DQ."""

from __future__ import annotations

import argparse
import sys
import time

SCHEMES = ("int4", "uint4", "int8", "int2", "fp8", "mxfp8", "mxfp6", "mxfp4", "nvfp4")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "quantize",
        help="quantize a float model's weights into standard QuantizeLinear/DequantizeLinear",
        description="Round-to-nearest weight-only quantization of MatMul, Gemm and Gather weights. "
        "The output is a standard Q/DQ model that `onnxfuse optimize` fuses.",
    )
    p.add_argument("input", metavar="IN", help="float ONNX model")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="where to write the quantized model")
    p.add_argument(
        "--scheme",
        required=True,
        help=f"one of {', '.join(SCHEMES)} (or any scheme name of onnxfuse.formats, e.g. mxfp6e3m2, uint8)",
    )
    p.add_argument("--block-size", type=int, default=None, help="elements per scale (default: the scheme's)")
    p.add_argument(
        "--layout",
        choices=("kn", "nk"),
        default=None,
        help="kn: W[K,N] blocked along axis 0; nk: W.T[N,K] blocked along axis 1 + Transpose "
        "(default: nk for nvfp4, kn otherwise)",
    )
    p.add_argument(
        "--scale-dtype",
        default=None,
        choices=("float32", "float16", "bfloat16"),
        help="block scale type for the integer and fp8 schemes (default: the weight's type)",
    )
    p.add_argument(
        "--op-types",
        default="MatMul,Gemm,Gather",
        help="comma-separated op types whose weights to quantize (default: MatMul,Gemm,Gather)",
    )
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="NAME",
        help="node or initializer name (fnmatch pattern) to keep in float; repeatable",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="list every quantized and skipped weight")
    return p


def run(args) -> int:
    from onnxfuse.quantize_api import quantize_with_summary

    start = time.perf_counter()
    _, s = quantize_with_summary(
        args.input,
        args.scheme,
        block_size=args.block_size,
        layout=args.layout,
        scale_dtype=args.scale_dtype,
        op_types=[t.strip() for t in args.op_types.split(",") if t.strip()],
        exclude=args.exclude,
        output_path=args.output,
    )
    elapsed = time.perf_counter() - start
    ratio = s.bytes_before / s.bytes_after if s.bytes_after else 0.0
    print(
        f"quantized {len(s.quantized)} weight(s) to {s.scheme} (block {s.block_size}, {s.scale_format} scales, "
        f"layout {s.layout}, opset {s.opset}): {s.bytes_before / 2**20:.2f} MiB -> {s.bytes_after / 2**20:.2f} MiB "
        f"({ratio:.1f}x) in {elapsed:.2f} s"
    )
    if args.verbose:
        for q in s.quantized:
            shape = "x".join(map(str, q.shape))
            print(f"  quantized {q.tensor} [{shape}] axis {q.axis}{' (transposed)' if q.transposed else ''} for {', '.join(q.consumers)}")
    for k in s.skipped:
        if args.verbose or k.reason == "excluded by the user":
            print(f"  kept {k.tensor} in float for node '{k.node}': {k.reason}")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0
