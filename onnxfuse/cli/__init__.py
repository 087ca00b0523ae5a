"""The `onnxfuse` command: subcommands, exit codes, and user errors as sentences.

Exit status: 0 success, 1 invalid input or a failed check, 2 usage error (argparse's own).
Each subcommand lives in its own module exposing `add_parser(subparsers)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from onnxfuse import __version__, codes
from onnxfuse.diagnostics import Diagnostic, OnnxfuseError

SUBCOMMANDS = ("optimize", "check", "quantize", "verify", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onnxfuse",
        description="Find, validate and fuse block-scaled Q/DQ patterns in ONNX models.",
    )
    parser.add_argument("--version", action="version", version=f"onnxfuse {__version__}")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks for errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in SUBCOMMANDS:
        importlib.import_module(f"onnxfuse.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on usage errors
    try:
        return int(importlib.import_module(f"onnxfuse.cli.{args.command}").run(args) or 0)
    except OnnxfuseError as e:
        for d in e.diagnostics:
            print(d.to_text(), file=sys.stderr)
        if args.debug:
            traceback.print_exc()
        return 1
    except KeyboardInterrupt:
        print("onnxfuse: interrupted; every output is either untouched or complete", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`onnxfuse check m.onnx | head`): not an error of onnxfuse's.
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as e:  # a bug in onnxfuse: say so in one sentence, not a traceback
        if args.debug:
            traceback.print_exc()
        d = Diagnostic.error(codes.INTERNAL, f"{type(e).__name__}: {e}", file=getattr(args, "input", None),
                             hint="rerun with --debug and report the traceback")
        print(d.to_text(), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
