"""`onnxfuse verify ORIGINAL FUSED`: run both on the same inputs and compare every output."""

from __future__ import annotations

import argparse
import json
import sys

from onnxfuse import codes
from onnxfuse.diagnostics import Diagnostic

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-3


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "verify",
        help="compare a fused model's outputs with the original's",
        description="Runs ORIGINAL (onnxruntime CPU, or onnx's reference evaluator with onnxfuse's Q/DQ "
        "reference where ORT cannot run its formats) and FUSED (onnxfuse.InferenceSession) on the same inputs, "
        "and prints the max absolute and relative error and the cosine similarity of every output. "
        "An element passes when |fused - original| <= atol + rtol * |original|. Exit status 1 on a mismatch.",
    )
    p.add_argument("original", metavar="ORIGINAL", help="the model before `onnxfuse optimize`")
    p.add_argument("fused", metavar="FUSED", help="the optimized model")
    p.add_argument("--backend", choices=("auto", "ort", "triton"), default="auto",
                   help="how FUSED runs (default auto: triton on a CUDA GPU, else ort)")
    p.add_argument("--inputs", metavar="FILE.npz", help="inputs by name (default: random, from the input types)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME:DIMS",
                   help="shape of a generated input, e.g. input_ids:1x16, or a symbolic dim, e.g. batch=2; repeatable")
    p.add_argument("--rtol", action="append", default=[], metavar="[OUT:]R",
                   help=f"relative tolerance, for all outputs or one (logits:1e-2); default {DEFAULT_RTOL:g}; repeatable")
    p.add_argument("--atol", action="append", default=[], metavar="[OUT:]A",
                   help=f"absolute tolerance, for all outputs or one (logits:1e-2); default {DEFAULT_ATOL:g}; repeatable")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated inputs (default 0)")
    p.add_argument("--save-inputs", metavar="FILE.npz", help="write the inputs used, to reproduce a run")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    return p


def run(args) -> int:
    from onnxfuse.runtime.compare import format_table
    from onnxfuse.runtime.inputs import parse_per_output, parse_shape_args, random_inputs, load_npz
    from onnxfuse.runtime.feeds import graph_inputs
    from onnxfuse.runtime.model_source import load_source
    from onnxfuse.runtime.verify import verify

    shapes, dims = parse_shape_args(args.shape)
    rtol, rtol_per = parse_per_output(args.rtol, DEFAULT_RTOL, "--rtol")
    atol, atol_per = parse_per_output(args.atol, DEFAULT_ATOL, "--atol")
    original = load_source(args.original)
    if args.inputs:
        feeds = load_npz(args.inputs, graph_inputs(original.proto))
    else:
        feeds = random_inputs(original.proto, shapes=shapes, dims=dims, seed=args.seed)
    if args.save_inputs:
        save_npz(args.save_inputs, feeds, keep=[p for p in (args.original, args.fused, args.inputs) if p])
    result = verify(original, args.fused, backend=args.backend, inputs=feeds, rtol=rtol, atol=atol,
                    rtol_per=rtol_per, atol_per=atol_per)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(f"original: {args.original}  (ran in {result.reference_runner})")
        if result.fallback_reason:
            print(f"  onnxruntime could not run it: {result.fallback_reason}")
        print(f"fused:    {args.fused}  (backend {result.backend})")
        print(format_table(result.outputs))
        bad = [c.name for c in result.outputs if not c.ok]
        print(f"{'MISMATCH' if bad else 'PASSED'}: {len(result.outputs) - len(bad)}/{len(result.outputs)} output(s) within tolerance")
    if not result.ok:
        if not args.json:
            bad = ", ".join(c.name for c in result.outputs if not c.ok)
            print(Diagnostic.error(codes.VERIFY_MISMATCH, f"output(s) {bad} differ beyond the tolerance",
                                   file=args.fused).to_text(), file=sys.stderr)
        return 1
    return 0


def save_npz(path: str, feeds: dict, keep: list[str]) -> None:
    """The generated inputs as .npz, atomically, never over one of the files this run reads."""
    import io

    import numpy as np

    from onnxfuse import atomic_write
    from onnxfuse.model_io import check_output_path

    check_output_path(path, avoid=keep)
    buffer = io.BytesIO()
    np.savez(buffer, **feeds)
    atomic_write.write_bytes(path, buffer.getvalue())
