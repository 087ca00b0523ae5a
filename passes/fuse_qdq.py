"""Activation fake quantization  =>  QuantizeDequantize.

- static: QuantizeLinear -> DequantizeLinear with the same constant block scale (and zero point);
- dynamic, as exporters emit it: ModelOpt's trt::TRT_FP4DynamicQuantize -> DQ(scale) -> DQ(x),
  trt::TRT_MXFP8DynamicQuantize -> trt::TRT_MXFP8DequantizeLinear (or an E8M0 DQ), and AMD Quark's
  single com.amd.quark::MXQuantizeDequantize node.
The fused node takes over the final DQ's output, so the next matmul consumes it as before.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from onnxfuse import codes, ops
from onnxfuse.diagnostics import Diagnostic, OnnxfuseError
from onnxfuse.passes import match, rewrite, validate
from onnxfuse.passes.context import Fused, RunContext
from onnxfuse.passes.qdq import TRT_DOMAIN, element_of, is_dq, parse_dq
from onnxfuse.passes.trace import FLOAT_TYPES

QUARK_DOMAIN = "com.amd.quark"
QUARK_ELEMENTS = {
    "fp8_e4m3": "float8e4m3fn", "fp8_e5m2": "float8e5m2", "fp6_e3m2": "float6e3m2",
    "fp6_e2m3": "float6e2m3", "fp4_e2m1": "float4e2m1", "int8": "int8",
}
# Quark's MXQuantizeDequantize spec: rounding_mode is an INT, 0 = half away from zero (the
# default), 1 = half upward, 2 = half to even; axis defaults to 1 and element_dtype to int8.
QUARK_ROUNDING = {0: "away", 1: "up", 2: "even"}


def _single_use(value: ir.Value) -> tuple[ir.Node, int] | None:
    uses = match.consumers(value)
    if len(uses) != 1 or value.is_graph_output():
        return None
    return uses[0]


def _scalar(value: ir.Value | None) -> float | None:
    array = match.const_array(value)
    if array is None or array.size != 1:
        return None
    return float(np.asarray(array, dtype=np.float32).reshape(()))


def _qdq_node(ctx: RunContext, x: ir.Value, final: ir.Node, label: str, *, element: str, axis: int,
              block_size: int, mode: str, scale_rule: str, rounding_mode: str = "even", saturate: int = 1,
              scale: ir.Value | None = None, zero_point: ir.Value | None = None,
              global_scale: float | None = None, fmt: str, replaced: list[ir.Node],
              fallback_dtype: ir.DataType | None = None) -> rewrite.Edit | str:
    # An intermediate without value_info has no type: the DQ's output type is the activation's.
    dtype = match.elem_type(x) or match.elem_type(final.outputs[0]) or fallback_dtype
    if dtype not in FLOAT_TYPES:
        return f"the quantized activation has type {getattr(dtype, 'name', dtype)}, not a float type"
    out_dtype = match.elem_type(final.outputs[0]) or dtype
    from onnxfuse.passes.function_qdq import DYNAMIC_SCALE_FORMATS

    try:
        overload = ctx.add_function(
            "QuantizeDequantize", weight_format=element,
            scale_format="float32" if mode == "static" else DYNAMIC_SCALE_FORMATS[scale_rule],
            has_zero_point=zero_point is not None, has_global_scale=global_scale is not None, has_bias=False,
            dtype=int(dtype), mode=mode, element_format=element, scale_rule=scale_rule,
            rounding_mode=rounding_mode, saturate=saturate,
        )
    except OnnxfuseError as e:
        return e.diagnostics[0].message
    g_value = None
    if global_scale is not None:
        g_value = ctx.initializer(f"{label}.global_scale", ir.tensor(np.array(global_scale, dtype=np.float32)))
    out = ir.Value(name=ctx.name(f"{label}.qdq"), type=ir.TensorType(dtype))
    node = ir.node(
        "QuantizeDequantize", rewrite.trim_inputs([x, scale, zero_point, g_value]),
        {"element_format": element, "axis": axis, "block_size": block_size, "mode": mode,
         "scale_rule": scale_rule, "rounding_mode": rounding_mode, "saturate": saturate},
        domain=ops.DOMAIN, overload=overload, outputs=[out], name=ctx.name(f"{label}.fused"),
    )
    nodes = [node]
    if out_dtype != dtype:  # the DQ produced another float type than the activation's: keep it
        cast_out = ir.Value(name=ctx.name(f"{label}.cast"), type=ir.TensorType(out_dtype))
        nodes.append(ir.node("Cast", [out], {"to": int(out_dtype)}, outputs=[cast_out], name=ctx.name(f"{label}.cast")))
        out = cast_out
    fused = Fused(node.name, "QuantizeDequantize", fmt, [match.node_label(n) for n in replaced])
    return rewrite.Edit(anchor=final, nodes=nodes, replaces=final, outputs=[out], fused=fused)


def _same_constant(a: ir.Value | None, b: ir.Value | None) -> bool:
    if a is b:
        return True
    if a is None or b is None:
        return False
    x, y = match.const_array(a), match.const_array(b)
    return x is not None and y is not None and x.dtype == y.dtype and x.shape == y.shape and \
        np.array_equal(x.view(np.uint8) if x.dtype.itemsize == 1 else x, y.view(np.uint8) if y.dtype.itemsize == 1 else y)


def static_qdq(ctx: RunContext, qnode: ir.Node) -> rewrite.Edit | str | None:
    """QuantizeLinear(x, s, zp; block) -> DequantizeLinear(., s, zp; block). None: not this pattern."""
    use = _single_use(qnode.outputs[0])
    if use is None or not match.is_op(use[0], "DequantizeLinear") or use[1] != 0:
        return None
    dq_node = use[0]
    q = parse_dq(dq_node)
    if isinstance(q, Diagnostic):
        return q.message
    if q.element is None:  # Q's output carries no type annotation: read it from Q itself
        q_zp = qnode.inputs[2] if len(qnode.inputs) > 2 else None
        declared = match.elem_type(q_zp) or ir.DataType(qnode.attributes.get_int("output_dtype", 0) or ir.DataType.UINT8)
        q = dataclasses.replace(q, element=element_of(declared))
    if q.block_size <= 0:
        return "a per-tensor / per-axis activation Q -> DQ is left to onnxruntime, which runs it"
    rank = match.rank_of(qnode.inputs[0])
    q_axis = qnode.attributes.get_int("axis", 1)
    if rank:
        q_axis %= rank
    if (q_axis, qnode.attributes.get_int("block_size", 0)) != (q.axis, q.block_size):
        return "the QuantizeLinear and DequantizeLinear disagree on axis or block_size"
    q_zp = qnode.inputs[2] if len(qnode.inputs) > 2 else None
    if not _same_constant(qnode.inputs[1], q.scale) or not _same_constant(q_zp, q.zero_point):
        return "the QuantizeLinear and DequantizeLinear use different scales or zero points"
    if q.two_level is not None:
        return "a two-level scale on a static activation Q -> DQ is not fused"
    found = validate.check_formats(q, ctx.opset)
    if not validate.errors(found):
        found += validate.check_shapes(q) + validate.check_zero_point(q) + validate.check_scale_values(q)
    ctx.report(found)
    if validate.errors(found):
        return validate.errors(found)[0].message
    label = match.node_label(dq_node)
    scale = ctx.initializer(f"{label}.scale", ir.tensor(validate.scale_values(q)))
    zp = None
    if q.zero_point is not None and not q.element.is_float:
        codes_ = np.asarray(q.element.codes_of(match.const_array(q.zero_point)), dtype=np.uint8)
        zp = ctx.initializer(f"{label}.zero_point", ir.tensor(codes_, dtype=ir.DataType.UINT8))
    return _qdq_node(ctx, qnode.inputs[0], dq_node, label, element=q.element.name, axis=q.axis,
                     block_size=q.block_size, mode="static", scale_rule="absmax",
                     saturate=qnode.attributes.get_int("saturate", 1), scale=scale, zero_point=zp,
                     fmt=q.format_label, replaced=[qnode, dq_node], fallback_dtype=q.output_dtype)


def trt_fp4(ctx: RunContext, tnode: ir.Node) -> rewrite.Edit | str:
    """TRT_FP4DynamicQuantize(x, g) -> (xq, sq); DQ(sq, g) -> s; DQ(xq, s; block) -> y."""
    xq, sq = (list(tnode.outputs) + [None, None])[:2]
    if xq is None or sq is None:
        return "it does not have the two outputs (quantized data, block scale) ModelOpt emits"
    s_use, x_use = _single_use(sq), _single_use(xq)
    if s_use is None or x_use is None or not match.is_op(s_use[0], "DequantizeLinear") or not is_dq(x_use[0]):
        return "its outputs do not each feed one DequantizeLinear"
    dq_s, dq_x = s_use[0], x_use[0]
    s_out_use = _single_use(dq_s.outputs[0])
    if s_out_use is None or s_out_use != (dq_x, 1):
        return "the block-scale DequantizeLinear does not feed the scale of the data DequantizeLinear"
    g_quant, g_dequant = _scalar(tnode.inputs[1] if len(tnode.inputs) > 1 else None), _scalar(dq_s.inputs[1])
    if g_quant is None or g_dequant is None:
        return "the NVFP4 global scale is not a constant scalar; it is never dropped, so the pattern is refused"
    if np.float32(g_quant) != np.float32(g_dequant):
        return f"the global scale used to quantize ({g_quant}) differs from the one used to dequantize ({g_dequant})"
    if not np.isfinite(g_quant) or g_quant == 0:
        return f"the NVFP4 global scale is {g_quant}"
    if any(len(d.inputs) > 2 and d.inputs[2] is not None for d in (dq_s, dq_x)):
        return "a DequantizeLinear of the chain has a zero point, which the NVFP4 op does not have; refused so it is not dropped"
    if dq_s.attributes.get_int("block_size", 0) > 0:
        return "the block-scale DequantizeLinear is itself blocked; its outer scale must be one scalar"
    axis = tnode.attributes.get_int("axis", -1)
    block_size = tnode.attributes.get_int("block_size", 16)
    rank = match.rank_of(tnode.inputs[0])
    dq_axis = dq_x.attributes.get_int("axis", 1)
    if rank:
        axis, dq_axis = axis % rank, dq_axis % rank
    if (dq_axis, dq_x.attributes.get_int("block_size", 0)) != (axis, block_size):
        return "the quantize node and the data DequantizeLinear disagree on axis or block_size"
    return _qdq_node(ctx, tnode.inputs[0], dq_x, match.node_label(dq_x), element="float4e2m1", axis=axis,
                     block_size=block_size, mode="dynamic", scale_rule="nvfp4", global_scale=g_quant,
                     fmt="float4e2m1/float8e4m3fn*global", replaced=[tnode, dq_s, dq_x],
                     fallback_dtype=match.elem_type(dq_s.outputs[0]) or match.elem_type(dq_s.inputs[1]))


def trt_mxfp8(ctx: RunContext, tnode: ir.Node) -> rewrite.Edit | str:
    """TRT_MXFP8DynamicQuantize(x) -> (xq, s_e8m0); TRT_MXFP8DequantizeLinear(xq, s) -> y."""
    xq, sq = (list(tnode.outputs) + [None, None])[:2]
    if xq is None or sq is None:
        return "it does not have the two outputs (quantized data, E8M0 scale) ModelOpt emits"
    x_use, s_use = _single_use(xq), _single_use(sq)
    if x_use is None or s_use is None or x_use[0] is not s_use[0] or not is_dq(x_use[0]) or x_use[1] != 0 or s_use[1] != 1:
        return "its outputs do not feed one MXFP8 DequantizeLinear as data and scale"
    dq = x_use[0]
    axis = tnode.attributes.get_int("axis", -1)
    block_size = tnode.attributes.get_int("block_size", 32)
    rank = match.rank_of(tnode.inputs[0])
    dq_axis = dq.attributes.get_int("axis", -1 if dq.domain == TRT_DOMAIN else 1)
    if rank:
        axis, dq_axis = axis % rank, dq_axis % rank
    if (dq_axis, dq.attributes.get_int("block_size", 0)) != (axis, block_size):
        return "the quantize node and its DequantizeLinear disagree on axis or block_size"
    to = tnode.attributes.get_int("output_dtype", int(ir.DataType.FLOAT8E4M3FN))
    element = {int(ir.DataType.FLOAT8E4M3FN): "float8e4m3fn", int(ir.DataType.FLOAT8E5M2): "float8e5m2"}.get(to)
    if element is None:
        return f"output_dtype {to} is not an MXFP8 element type"
    return _qdq_node(ctx, tnode.inputs[0], dq, match.node_label(dq), element=element, axis=axis,
                     block_size=block_size, mode="dynamic", scale_rule="mx", fmt=f"{element}/float8e8m0",
                     replaced=[tnode, dq])


def quark_mx(ctx: RunContext, node: ir.Node) -> rewrite.Edit | str:
    element_dtype = node.attributes.get_string("element_dtype", "int8")
    element = QUARK_ELEMENTS.get(element_dtype)
    rounding = node.attributes.get("rounding_mode")
    rounding_value = 0 if rounding is None else rounding.value
    rounding_mode = QUARK_ROUNDING.get(rounding_value) if isinstance(rounding_value, int) else None
    if element is None or rounding_mode is None:
        what = f"element_dtype {element_dtype!r}" if element is None else f"rounding_mode {rounding_value!r}"
        d = Diagnostic.warning(codes.UNKNOWN_CUSTOM_OP, f"MXQuantizeDequantize has an {what} onnxfuse does not know",
                               node=match.node_label(node),
                               hint="known element_dtype: " + ", ".join(QUARK_ELEMENTS)
                               + "; rounding_mode: 0 (half away from zero), 1 (half up), 2 (half to even)")
        ctx.report([d])
        return d.message
    axis = node.attributes.get_int("axis", 1)
    rank = match.rank_of(node.inputs[0])
    if rank:
        axis %= rank
    return _qdq_node(ctx, node.inputs[0], node, match.node_label(node), element=element, axis=axis,
                     block_size=node.attributes.get_int("block_size", 32), mode="dynamic", scale_rule="mx",
                     rounding_mode=rounding_mode, fmt=f"{element}/float8e8m0", replaced=[node])


class FuseQDQPass(ir.passes.InPlacePass):
    def __init__(self, ctx: RunContext):
        super().__init__()
        self.ctx = ctx

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        ctx = self.ctx
        edits = []
        for node in list(model.graph):
            if match.is_op(node, "QuantizeLinear"):
                result = static_qdq(ctx, node)
            elif match.is_op(node, "TRT_FP4DynamicQuantize", TRT_DOMAIN):
                result = trt_fp4(ctx, node)
            elif match.is_op(node, "TRT_MXFP8DynamicQuantize", TRT_DOMAIN):
                result = trt_mxfp8(ctx, node)
            elif match.is_op(node, "MXQuantizeDequantize", QUARK_DOMAIN):
                result = quark_mx(ctx, node)
            else:
                continue
            if isinstance(result, rewrite.Edit):
                edits.append(result)
            elif isinstance(result, str):
                ctx.not_fused(node, result)
                for user, _ in match.consumers(node.outputs[0]):
                    if is_dq(user):
                        ctx.not_fused(user, f"its data comes from {node.op_type} '{match.node_label(node)}': {result}")
        return ir.passes.PassResult(model, rewrite.apply(ctx, edits))
