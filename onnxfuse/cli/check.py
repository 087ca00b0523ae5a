"""`onnxfuse check IN [--json]`: validation only, nothing written; exit 1 on any error."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "check",
        help="validate the Q/DQ patterns of a model without writing anything",
        description="Runs every validation optimize runs (scale types against the opset, shapes, NaN/Inf/zero "
        "scales, zero points, two-level chains, dynamic and shared weights) and prints the diagnostics. "
        "Exit status 1 if any is an error.",
    )
    p.add_argument("input", metavar="IN", help="the ONNX model")
    p.add_argument("--json", action="store_true", help='print {"diagnostics": [...]} as JSON')
    p.add_argument("--all", action="store_true", help="also print info diagnostics (what would fuse, and why not)")
    return p


def run(args) -> int:
    from onnxfuse.diagnostics import OnnxfuseError, Severity, diagnostics_to_json, has_errors
    from onnxfuse.optimize_api import check

    try:
        diagnostics = check(args.input)
    except OnnxfuseError as e:
        if not args.json:
            raise
        # A model that cannot even be loaded is still answered in the promised format.
        diagnostics = [d.with_file(args.input) for d in e.diagnostics]
    if args.json:
        print(diagnostics_to_json(diagnostics))
    else:
        shown = [d for d in diagnostics if args.all or d.severity is not Severity.INFO]
        for d in shown:
            print(d.to_text())
        errors = sum(d.is_error for d in diagnostics)
        warnings = sum(d.severity is Severity.WARNING for d in diagnostics)
        print(f"{args.input}: {errors} error(s), {warnings} warning(s)")
    return 1 if has_errors(diagnostics) else 0
