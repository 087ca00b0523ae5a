"""`onnxfuse.quantize(...)`: round-to-nearest weight-only quantization into standard Q/DQ.

The math is the formats layer's (`Scheme.quantize`); this module only decides which weights to
quantize (onnxfuse.quantize_targets), writes the DequantizeLinear subgraph exporters write
(onnxfuse.quantize_emit) and raises the opset to what the scheme needs (onnxfuse.quantize_opset).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterable, Sequence

import numpy as np
import onnx_ir as ir

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.quantize_emit import OUTPUT_DTYPE_OPSET, emit_dequantized_weight
from onnxfuse.quantize_opset import raise_opset
from onnxfuse.quantize_targets import Form, Skipped, WeightUse, find_weight_uses

# CLI / API names that are not the formats layer's scheme names.
SCHEME_ALIASES = {"mxfp6": "mxfp6e2m3", "fp8e4m3": "fp8"}
# Schemes whose scale type is fixed by the format (the rest take any float scale type).
FIXED_SCALE = {"float8e8m0": "MX formats use float8e8m0 scales", "float8e4m3fn": "NVFP4 uses float8e4m3fn block scales"}
FREE_SCALE_TYPES = ("float32", "float16", "bfloat16")
DEFAULT_OP_TYPES = ("MatMul", "Gemm", "Gather")


@dataclasses.dataclass
class QuantizedWeight:
    tensor: str  # the float initializer's name
    consumers: list[str]
    shape: tuple[int, ...]
    axis: int  # blocked axis of the stored tensor
    transposed: bool


@dataclasses.dataclass
class QuantizeSummary:
    scheme: str
    block_size: int
    scale_format: str
    layout: str
    opset: int
    quantized: list[QuantizedWeight]
    skipped: list[Skipped]
    bytes_before: int  # float bytes of the quantized weights
    bytes_after: int  # their quantized data + scales


def resolve_scheme(name: str):
    from onnxfuse import formats  # the formats layer raises SCHEME_UNKNOWN with the known names

    return formats.scheme(SCHEME_ALIASES.get(name, name))


def _natural_layout(scheme) -> str:
    # ModelOpt exports NVFP4 from torch's column-major [out, in] weights: DQ -> Transpose -> MatMul.
    return "nk" if scheme.two_level else "kn"


def _resolve_scale_format(scheme, scale_dtype: str | None, weight_dtype: ir.DataType):
    from onnxfuse import formats

    fixed = scheme.scale.name in FIXED_SCALE
    if scale_dtype is None:
        if fixed:
            return scheme.scale
        # Scales in the weight's own type, as onnxruntime's quantizer writes them: no Cast needed.
        return formats.scale_format({ir.DataType.FLOAT: "float32", ir.DataType.FLOAT16: "float16"}.get(weight_dtype, "bfloat16"))
    chosen = formats.scale_format(scale_dtype)
    if fixed and chosen.name != scheme.scale.name:
        raise OnnxfuseError.of(
            codes.SCALE_DTYPE_ILLEGAL,
            f"scheme {scheme.name} cannot use {chosen.name} scales: {FIXED_SCALE[scheme.scale.name]}",
            hint="leave --scale-dtype out for this scheme",
        )
    if not fixed and chosen.name not in FREE_SCALE_TYPES:
        raise OnnxfuseError.of(
            codes.SCALE_DTYPE_ILLEGAL,
            f"scheme {scheme.name} takes {', '.join(FREE_SCALE_TYPES)} scales, not {chosen.name}",
        )
    return chosen


def _check_block_size(block_size: int | None) -> None:
    if block_size is not None and (not isinstance(block_size, (int, np.integer)) or block_size <= 0):
        raise OnnxfuseError.of(codes.USAGE, f"block_size must be a positive integer, not {block_size!r}")


def _weight_dtype(graph: ir.Graph, uses: dict[str, list[WeightUse]]) -> ir.DataType:
    dtypes = {graph.initializers[name].dtype for name in uses}
    return dtypes.pop() if len(dtypes) == 1 else ir.DataType.FLOAT


def quantize_with_summary(
    model_or_path,
    scheme: str,
    *,
    block_size: int | None = None,
    layout: str | None = None,
    scale_dtype: str | None = None,
    op_types: Iterable[str] = DEFAULT_OP_TYPES,
    exclude: Sequence[str] = (),
    output_path: str | os.PathLike | None = None,
) -> tuple[ir.Model, QuantizeSummary]:
    """`quantize`, also returning what was quantized and skipped (the CLI prints it)."""
    from onnxfuse.model_io import check_output_path, load_model, save_model

    sch = resolve_scheme(scheme)
    _check_block_size(block_size)
    if layout not in (None, "kn", "nk"):
        raise OnnxfuseError.of(codes.USAGE, f"layout must be 'kn' or 'nk', not {layout!r}")
    layout = layout or _natural_layout(sch)
    op_types = tuple(op_types)
    exclude = tuple(exclude)
    unknown = sorted(set(op_types) - set(DEFAULT_OP_TYPES))
    if unknown:
        raise OnnxfuseError.of(codes.USAGE, f"cannot quantize weights of {', '.join(unknown)}; op types are {', '.join(DEFAULT_OP_TYPES)}")

    input_path = os.fspath(model_or_path) if isinstance(model_or_path, (str, os.PathLike)) else None
    if output_path is not None:  # refuse a bad output path before any work
        check_output_path(os.fspath(output_path), input_path)
    # An onnx_ir.Model passed in is cloned, as optimize does: the caller's model never changes.
    model = model_or_path.clone() if isinstance(model_or_path, ir.Model) else load_model(model_or_path)
    uses, _ = find_weight_uses(model.graph, op_types, exclude, layout)
    if not uses:
        raise OnnxfuseError.of(
            codes.NOTHING_TO_QUANTIZE,
            f"no 2-D float constant weight of {', '.join(op_types)} is left to quantize"
            + (f" after excluding {', '.join(exclude)}" if exclude else ""),
        )
    scale_fmt = _resolve_scale_format(sch, scale_dtype, _weight_dtype(model.graph, uses))

    # Raise the opset first: a conversion returns a new model, so the uses are found again after it.
    need = sch.min_opset
    if not sch.two_level and any(model.graph.initializers[n].dtype != ir.DataType(scale_fmt.onnx_type) for n in uses):
        need = max(need, OUTPUT_DTYPE_OPSET)
    model = raise_opset(model, need)
    graph = model.graph
    uses, skipped = find_weight_uses(graph, op_types, exclude, layout)

    quantized: list[QuantizedWeight] = []
    bytes_before = bytes_after = 0
    new_nodes: list[ir.Node] = []
    for name, weight_uses in uses.items():
        value = graph.initializers[name]
        by_form: dict[Form, list[WeightUse]] = {}
        for use in weight_uses:
            by_form.setdefault(use.form, []).append(use)
        w = value.const_value.numpy()  # memory-mapped for external data: read once, here
        bytes_before += value.const_value.nbytes
        for i, (form, form_uses) in enumerate(by_form.items()):
            stored = np.ascontiguousarray(w.T if form.transpose else w).astype(np.float32)
            qt = sch.quantize(stored, form.axis, block_size, scale_fmt)
            out_name = name if len(by_form) == 1 else f"{name}_{'nk' if form.transpose else 'kn'}{i}"
            emitted = emit_dequantized_weight(out_name, qt, scale_fmt, transpose=form.transpose, target_dtype=value.dtype)
            for init in emitted.initializers:
                graph.register_initializer(init)
                bytes_after += init.const_value.nbytes
            new_nodes += emitted.nodes
            for use in form_uses:
                use.node.replace_input_with(use.input_index, emitted.output)
            quantized.append(
                QuantizedWeight(name, [u.node.name or "" for u in form_uses], tuple(w.shape), form.axis, form.transpose)
            )
        if not value.uses() and not value.is_graph_output():
            graph.initializers.pop(name)
    graph.insert_before(graph.node(0), new_nodes)  # they read only initializers

    if output_path is not None:
        save_model(model, os.fspath(output_path), input_path=input_path)
    summary = QuantizeSummary(
        scheme=sch.name,
        block_size=block_size or sch.block_size,
        scale_format=scale_fmt.name,
        layout=layout,
        opset=model.opset_imports[""],
        quantized=quantized,
        skipped=skipped,
        bytes_before=bytes_before,
        bytes_after=bytes_after,
    )
    return model, summary


def quantize(
    model_or_path,
    scheme: str,
    *,
    block_size: int | None = None,
    layout: str | None = None,
    scale_dtype: str | None = None,
    op_types: Iterable[str] = DEFAULT_OP_TYPES,
    exclude: Sequence[str] = (),
    output_path: str | os.PathLike | None = None,
) -> ir.Model:
    """Quantize the weights of a float model's MatMul, Gemm and Gather nodes (round to nearest).

    scheme:      int4, uint4 (zero points), int8, int2, fp8 (e4m3 blocks), mxfp8, mxfp6, mxfp4, nvfp4,
                 or any other scheme name of onnxfuse.formats.
    block_size:  elements per scale along the reduction axis (default: the scheme's).
    layout:      "kn" stores W[K, N] blocked along axis 0; "nk" stores W.T [N, K] blocked along axis 1
                 followed by a Transpose, as column-major exporters do. Default "nk" for nvfp4 (the
                 ModelOpt chain), "kn" otherwise. Gather tables and Gemm(transB=1) weights are already
                 [rows, K] and keep their orientation.
    scale_dtype: float32, float16 or bfloat16 for the integer and fp8 schemes (default: the weight's
                 own type); MX schemes always use float8e8m0, NVFP4 float8e4m3fn under a float32 scalar.
    exclude:     node or initializer names (fnmatch patterns) to leave in float, e.g. the LM head.

    The model passed in is never modified (an onnx_ir.Model is cloned first). Weights
    stored as external data are read one at a time through their memory map.
    """
    model, _ = quantize_with_summary(
        model_or_path,
        scheme,
        block_size=block_size,
        layout=layout,
        scale_dtype=scale_dtype,
        op_types=op_types,
        exclude=exclude,
        output_path=output_path,
    )
    return model
