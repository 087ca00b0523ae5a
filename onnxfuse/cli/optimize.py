"""`onnxfuse optimize IN -o OUT [--strict] [--report R.json] [--explain]`."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "optimize",
        help="find, validate and fuse block-scaled Q/DQ patterns",
        description="Rewrites block-scaled DequantizeLinear patterns (DQ->MatMul/Gemm/Gather, two-level NVFP4, "
        "activation Q->DQ, ModelOpt trt:: and Quark MX ops) into onnxfuse ops that stock onnxruntime runs through "
        "their function bodies. Prints a before/after op table, what was fused per pattern and format, what was "
        "left and why, weight bytes and time. Patterns that fail validation stay as they were. "
        "Exit status 0 on success (even when nothing fused), 1 on invalid input or, with --strict, any error.",
    )
    p.add_argument("input", metavar="IN", help="the ONNX model (never modified)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="where to write the optimized model")
    p.add_argument("--strict", action="store_true", help="exit 1 (writing nothing) if any validation error is found")
    p.add_argument("--report", metavar="R.json", help="also write the full report as JSON")
    p.add_argument("--explain", action="store_true", help="list every node left as it was with all the reasons")
    p.add_argument("--external-data", choices=("auto", "yes", "no"), default="auto",
                   help="write initializers to OUT.data (default: when large or when the input used external data)")
    return p


def run(args) -> int:
    from onnxfuse.diagnostics import OnnxfuseError
    from onnxfuse.model_io import check_output_path
    from onnxfuse.optimize_api import optimize

    external = {"auto": None, "yes": True, "no": False}[args.external_data]
    if args.report:  # refused before any work, so a bad report path never costs the model
        check_output_path(args.report, args.input, avoid=(args.output, args.output + ".data"))
    try:
        _, report = optimize(args.input, args.output, strict=args.strict, external_data=external, progress=True)
    except OnnxfuseError as e:
        if args.strict and all(d.code.id.startswith(("OFX2", "OFX3")) for d in e.diagnostics):
            print(f"onnxfuse: {len(e.diagnostics)} validation error(s); nothing written (--strict)", file=sys.stderr)
        raise
    print(report.to_text(explain=args.explain))
    if args.report:
        report.save(args.report)
    print(f"wrote {args.output}")
    return 0
