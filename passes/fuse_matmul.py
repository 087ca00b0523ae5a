"""Rules: DQ(weight) [-> Transpose / Cast / Reshape] -> MatMul or Gemm  =>  DequantMatMul.

Each rule's `rewrite` checks a Path and returns an Edit, or a reason string naming the node
when the path does not fit (the DQ then stays for that consumer, or becomes a Dequantize).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxfuse import ops
from onnxfuse.passes import match, repack
from onnxfuse.passes.context import Fused, RunContext
from onnxfuse.passes.qdq import QDQ
from onnxfuse.passes.rewrite import Edit, trim_inputs
from onnxfuse.passes.trace import FLOAT_TYPES, Path
from onnxfuse.passes.weight_view import WeightView


def _check_weight_view(view: WeightView | None, consumer: ir.Node) -> str | None:
    label = match.node_label(consumer)
    if view is None:
        return f"the weight's shape is not known at {consumer.op_type} '{label}'"
    if len(view.shape) != 2:
        return f"{consumer.op_type} '{label}' sees a weight of rank {len(view.shape)}; only a 2-D weight [K, N] is fused"
    if view.axis != 0:
        return (f"{consumer.op_type} '{label}' sees a weight blocked along N (its output axis), not the reduction "
                "axis K, so the blocks cannot be applied inside the dot products")
    return None


def _activation_dtype(a: ir.Value, path: Path, consumer: ir.Node) -> ir.DataType | str:
    dtype = match.elem_type(a) or path.dtype
    if dtype not in FLOAT_TYPES:
        return f"{consumer.op_type} '{match.node_label(consumer)}' has activations of type {getattr(dtype, 'name', dtype)}"
    if path.dtype is not None and path.dtype != dtype:
        return f"{consumer.op_type} '{match.node_label(consumer)}' mixes a {path.dtype.name} weight with {dtype.name} activations"
    return dtype


def _check_activation_width(a: ir.Value, K: int, consumer: ir.Node) -> str | None:
    if a.shape is not None and len(a.shape) > 0 and isinstance(a.shape[-1], int) and a.shape[-1] != K:
        return f"{consumer.op_type} '{match.node_label(consumer)}': activations end in {a.shape[-1]}, the weight has K={K}"
    return None


def dequant_matmul(ctx: RunContext, q: QDQ, view: WeightView, a: ir.Value, dtype: ir.DataType, *,
                   name: str, extra_global: float = 1.0, bias: ir.Value | None = None) -> tuple[ir.Node, ir.Value]:
    """A DequantMatMul node (not inserted) computing a @ W(view) [+ bias]."""
    packed = repack.pack(ctx, q, view)
    g = packed.global_scale
    if extra_global != 1.0:
        g = float(np.float32(np.float64(g if g is not None else 1.0) * np.float64(extra_global)))
    g_value = repack.global_scale_input(ctx, packed.data.name, g)
    overload = ctx.add_function(
        "DequantMatMul", weight_format=packed.weight_format, scale_format=packed.scale_format,
        has_zero_point=packed.zero_point is not None, has_global_scale=g_value is not None,
        has_bias=bias is not None, dtype=int(dtype),
    )
    out = ir.Value(name=ctx.name(f"{name}.out"), type=ir.TensorType(dtype))
    node = ir.node(
        "DequantMatMul",
        trim_inputs([a, packed.data, packed.scale, packed.zero_point, g_value, bias]),
        {"K": packed.K, "N": packed.rows, "block_size": packed.block_size,
         "weight_format": packed.weight_format, "scale_format": packed.scale_format},
        domain=ops.DOMAIN, overload=overload, outputs=[out], name=ctx.name(name),
    )
    return node, out


class MatMulRule:
    pattern = "DequantMatMul"

    def applies(self, path: Path) -> bool:
        return match.is_op(path.terminal, "MatMul") and path.index == 1

    def rewrite(self, ctx: RunContext, q: QDQ, path: Path) -> Edit | str:
        mm = path.terminal
        why = _check_weight_view(path.view, mm)
        if why:
            return why
        a = mm.inputs[0]
        dtype = _activation_dtype(a, path, mm)
        if isinstance(dtype, str):
            return dtype
        why = _check_activation_width(a, path.view.shape[0], mm)
        if why:
            return why
        node, out = dequant_matmul(ctx, q, path.view, a, dtype, name=f"{match.node_label(mm)}.fused")
        fused = Fused(node.name, self.pattern, q.format_label, [match.node_label(n) for n in [q.node, *path.chain, mm]])
        return Edit(anchor=mm, nodes=[node], replaces=mm, outputs=[out], fused=fused)


class GemmRule:
    """Gemm(A, B, C; alpha, beta, transA, transB): alpha joins global_scale, beta*C the bias."""

    pattern = "DequantMatMul(Gemm)"

    def applies(self, path: Path) -> bool:
        return match.is_op(path.terminal, "Gemm") and path.index == 1

    def rewrite(self, ctx: RunContext, q: QDQ, path: Path) -> Edit | str:
        gemm = path.terminal
        label = match.node_label(gemm)
        view = path.view
        if view is not None and gemm.attributes.get_int("transB", 0):
            view = view.transpose([1, 0]) if len(view.shape) == 2 else None
        why = _check_weight_view(view, gemm)
        if why:
            return why
        a = gemm.inputs[0]
        dtype = _activation_dtype(a, path, gemm)
        if isinstance(dtype, str):
            return dtype
        alpha = gemm.attributes.get_float("alpha", 1.0)
        beta = gemm.attributes.get_float("beta", 1.0)
        K, N = view.shape
        nodes: list[ir.Node] = []
        if gemm.attributes.get_int("transA", 0):
            a_t = ir.Value(name=ctx.name(f"{label}.A_transposed"), type=ir.TensorType(dtype))
            nodes.append(ir.node("Transpose", [a], {"perm": [1, 0]}, outputs=[a_t], name=ctx.name(f"{label}.transA")))
            a = a_t
        else:
            why = _check_activation_width(a, K, gemm)
            if why:
                return why
        c = gemm.inputs[2] if len(gemm.inputs) > 2 else None
        bias, add_c = None, None
        if c is not None and beta != 0.0:
            c_array = match.const_array(c)
            if c_array is not None and c_array.size in (1, N) and c_array.ndim <= 2 and (c_array.ndim < 2 or c_array.shape[0] == 1):
                values = np.broadcast_to(c_array.astype(np.float64).reshape(-1) * beta, (N,))
                np_dtype = ir.DataType(dtype).numpy()
                bias = ctx.initializer(f"{label}.bias", ir.tensor(np.ascontiguousarray(values.astype(np_dtype)), dtype=dtype))
            else:
                add_c = c
        node, out = dequant_matmul(ctx, q, view, a, dtype, name=f"{label}.fused", extra_global=alpha, bias=bias)
        nodes.append(node)
        if add_c is not None:  # a run-time or [M, N] C: Y = A W + beta C with standard ops
            if beta != 1.0:
                beta_value = ctx.initializer(f"{label}.beta", ir.tensor(np.array(beta, dtype=ir.DataType(dtype).numpy()), dtype=dtype))
                scaled = ir.Value(name=ctx.name(f"{label}.beta_C"), type=ir.TensorType(dtype))
                nodes.append(ir.node("Mul", [add_c, beta_value], outputs=[scaled], name=ctx.name(f"{label}.beta")))
                add_c = scaled
            summed = ir.Value(name=ctx.name(f"{label}.out"), type=ir.TensorType(dtype))
            nodes.append(ir.node("Add", [out, add_c], outputs=[summed], name=ctx.name(f"{label}.add_C")))
            out = summed
        fused = Fused(node.name, self.pattern, q.format_label, [match.node_label(n) for n in [q.node, *path.chain, gemm]])
        return Edit(anchor=gemm, nodes=nodes, replaces=gemm, outputs=[out], fused=fused)
