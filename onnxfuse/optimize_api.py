"""`onnxfuse.optimize` and `onnxfuse.check`: the Python entry points of the fusion passes.

optimize never modifies its input: a path is read (external data memory-mapped), an in-memory
onnx_ir.Model is cloned (tensors shared, never copied) before the passes run on the clone.
"""

from __future__ import annotations

import os
import time

import onnx_ir as ir

from onnxfuse import model_io
from onnxfuse.diagnostics import Diagnostic, OnnxfuseError
from onnxfuse.passes import manager, report as report_mod
from onnxfuse.passes.context import RunContext
from onnxfuse.passes.report import Report


def _load(model_or_path) -> tuple[ir.Model, str | None]:
    if isinstance(model_or_path, ir.Model):
        return model_or_path.clone(), None
    file = os.fspath(model_or_path) if isinstance(model_or_path, (str, os.PathLike)) else None
    return model_io.load_model(model_or_path), file


def _run(model: ir.Model, file: str | None, progress) -> tuple[RunContext, Report]:
    import onnxfuse.ops  # noqa: F401  (registers the fused ops' schemas)

    start = time.perf_counter()
    rep = Report(file=file, ops_before=report_mod.op_counts(model), weight_bytes_before=report_mod.weight_bytes(model))
    ctx = RunContext(model)
    if progress is True:
        progress = manager.stderr_progress(len(model.graph))
    rep.passes = manager.run_passes(ctx, progress or None)
    rep.skipped = manager.leftovers(ctx)
    rep.fused = list(ctx.fused)
    rep.diagnostics = [d.with_file(file) for d in ctx.diagnostics]
    rep.ops_after = report_mod.op_counts(model)
    rep.weight_bytes_after = report_mod.weight_bytes(model)
    rep.elapsed_s = time.perf_counter() - start
    return ctx, rep


def optimize(model_or_path, output_path: str | os.PathLike | None = None, strict: bool = False, *,
             external_data: bool | None = None, progress=False) -> tuple[ir.Model, Report]:
    """Find, validate and fuse the block-scaled Q/DQ patterns of a model.

    model_or_path: a path, onnx.ModelProto, onnx_ir.Model or onnx_graphsurgeon.Graph (never modified).
    output_path: where to save the optimized model (atomically), if given.
    strict: raise OnnxfuseError (carrying the errors) when any validation error was found; nothing
        is written then. Without strict, a pattern that fails validation stays as it was and is
        reported in Report.diagnostics.
    progress: True for a progress line on stderr (on a terminal or for a large model), or a
        callable(pass_name, index, total).
    Returns the optimized onnx_ir.Model and a Report (.counts, .diagnostics, .save(path)).
    """
    model, file = _load(model_or_path)
    if output_path is not None:
        model_io.check_output_path(os.fspath(output_path), file)
    if external_data is None and model_io.has_external_data(model):
        external_data = True  # repacked weights are lazy tensors now: keep the output's weights external too
    _, rep = _run(model, file, progress)
    if strict and rep.has_errors:
        raise OnnxfuseError([d for d in rep.diagnostics if d.is_error])
    if output_path is not None:
        model_io.save_model(model, os.fspath(output_path), external_data=external_data, input_path=file)
        rep.output = os.fspath(output_path)
    return model, rep


def check(model_or_path) -> list[Diagnostic]:
    """Validate without writing anything: every diagnostic optimize would report."""
    model, file = _load(model_or_path)
    _, rep = _run(model, file, None)
    return rep.diagnostics
