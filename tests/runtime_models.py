"""Tiny hand-built models for the runtime tests: a Q/DQ original and its fused counterpart.

The fused model is built directly in docs/ops.md's storage (onnxfuse.formats.pack_quantized), so
the runtime tests do not depend on the passes. Function bodies come from passes.functions when
that module exists (needed only by backend "ort"). `ReferenceKernels` implements the kernels API
with onnxfuse.formats.decode_rows in float64: a test double that lets the planner and executor be
checked apart from the Triton kernels.
"""

from __future__ import annotations

import importlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxfuse import formats

OPSET = 25  # float8e8m0 scales need 24, int2 25
IR_VERSION = 11  # onnx 1.23 writes 14 by default; onnxruntime-gpu 1.31 reads up to 13

FLOAT_TYPES = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


def _scheme_quantized(w: np.ndarray, scheme: str, block_size: int, scale_format: str | None):
    """W [K, N] quantized along K (axis 0), as the ORT quantizer and ModelOpt INT4 export it."""
    scale = formats.scale_format(scale_format) if scale_format else None
    return formats.scheme(scheme).quantize(w, axis=0, block_size=block_size, scale=scale)


def _const(name: str, array: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def qdq_matmul_pair(scheme: str = "int4", *, K: int = 40, N: int = 24, block_size: int = 16, dtype=TensorProto.FLOAT,
                    bias: bool = True, seed: int = 0, batch=("batch", 3), scale_format: str | None = None):
    """(original Q/DQ model, fused model) of y = Relu(x) @ DQ(W) + b, followed by a Tanh.

    Relu and Tanh keep standard ops on both sides of the fused node, so the triton backend's
    plan has an ORT segment, a kernel and an ORT segment.
    """
    rng = np.random.default_rng(seed)
    npt = FLOAT_TYPES[dtype]
    w = rng.standard_normal((K, N)).astype(np.float32)
    q = _scheme_quantized(w, scheme, block_size, scale_format)
    rows = formats.pack_quantized(q.data, q.scale, q.zero_point, axis=0, block_size=q.block_size,
                                  global_scale=q.global_scale)
    b = (rng.standard_normal(N) * 0.1).astype(npt)

    # -- original: DQ(W) [-> two-level scale] -> MatMul (+ Add bias) ------------------------
    inits = [_const("W_q", q.data)]
    nodes = [helper.make_node("Relu", ["x"], ["xr"], name="relu")]
    if q.global_scale is not None:
        inits += [_const("W_s_q", q.scale), _const("W_gs", np.asarray(q.global_scale, np.float32))]
        nodes.append(helper.make_node("DequantizeLinear", ["W_s_q", "W_gs"], ["W_s"], name="dq_scale", axis=0))
        scale_name = "W_s"
    else:
        inits.append(_const("W_s", q.scale))
        scale_name = "W_s"
    dq_inputs = ["W_q", scale_name] + (["W_zp"] if q.zero_point is not None else [])
    if q.zero_point is not None:
        inits.append(_const("W_zp", q.zero_point))
    dq_attrs = dict(axis=0, block_size=q.block_size)
    if formats.scale_format(np.asarray(q.scale).dtype).name in ("float8e8m0",) or q.global_scale is not None:
        dq_attrs["output_dtype"] = dtype
    elif np.asarray(q.scale).dtype != npt:
        dq_attrs["output_dtype"] = dtype
    nodes.append(helper.make_node("DequantizeLinear", dq_inputs, ["W"], name="dq_w", **dq_attrs))
    mm_out = "mm" if bias else "y0"
    nodes.append(helper.make_node("MatMul", ["xr", "W"], [mm_out], name="matmul"))
    if bias:
        inits.append(_const("b", b))
        nodes.append(helper.make_node("Add", ["mm", "b"], ["y0"], name="add_bias"))
    nodes.append(helper.make_node("Tanh", ["y0"], ["y"], name="tanh"))
    x_info = helper.make_tensor_value_info("x", dtype, [batch[0], K])
    y_info = helper.make_tensor_value_info("y", dtype, [batch[0], N])
    original = helper.make_model(helper.make_graph(nodes, "qdq_matmul", [x_info], [y_info], inits),
                                 opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)

    # -- fused: Relu -> DequantMatMul -> Tanh ---------------------------------------------------
    f_inits = [_const("W_rows", rows.data), _const("W_rscale", rows.scale)]
    names = ["xr", "W_rows", "W_rscale", "", "", ""]
    if rows.zero_point is not None:
        f_inits.append(_const("W_rzp", rows.zero_point))
        names[3] = "W_rzp"
    if rows.global_scale is not None:
        f_inits.append(_const("W_rgs", np.asarray(rows.global_scale, np.float32)))
        names[4] = "W_rgs"
    if bias:
        f_inits.append(_const("b", b))
        names[5] = "b"
    while names and not names[-1]:
        names.pop()
    attrs = dict(K=K, N=N, block_size=rows.block_size, weight_format=rows.element.name, scale_format=rows.scale_format.name)
    fused_node = helper.make_node("DequantMatMul", names, ["y0"], name="dqmm", domain="onnxfuse", **attrs)
    f_nodes = [helper.make_node("Relu", ["x"], ["xr"], name="relu"), fused_node,
               helper.make_node("Tanh", ["y0"], ["y"], name="tanh")]
    fused = helper.make_model(helper.make_graph(f_nodes, "fused_matmul", [x_info], [y_info], f_inits),
                              opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("onnxfuse", 1)],
                              ir_version=IR_VERSION)
    attach_functions(fused)
    return original, fused


def attach_functions(model: onnx.ModelProto) -> bool:
    """Add each fused node's model-local function (passes.functions), if that module exists."""
    try:
        functions = importlib.import_module("onnxfuse.passes.functions")
    except ImportError:
        return False
    import onnx_ir as ir

    init_types = {t.name: t.data_type for t in model.graph.initializer}
    seen = set()
    for node in model.graph.node:
        if node.domain != "onnxfuse":
            continue
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in a.items()}
        inputs = list(node.input) + [""] * 6
        dtype = a.get("output_dtype") or init_types.get("b") or TensorProto.FLOAT
        if node.op_type == "DequantMatMul":
            dtype = _input_elem_type(model, node.input[0])
        fn = functions.function_for(
            node.op_type, weight_format=a.get("weight_format", a.get("element_format")),
            scale_format=a.get("scale_format", "float32"), has_zero_point=bool(inputs[3]),
            has_global_scale=bool(inputs[4]), has_bias=bool(inputs[5]) if node.op_type == "DequantMatMul" else False,
            dtype=dtype,
        )
        proto = ir.serde.serialize_function(fn)
        node.overload = proto.overload
        if (proto.domain, proto.name, proto.overload) not in seen:
            seen.add((proto.domain, proto.name, proto.overload))
            model.functions.append(proto)
            for imp in proto.opset_import:
                if imp.domain not in {o.domain for o in model.opset_import}:
                    model.opset_import.append(imp)
    return True


def _input_elem_type(model: onnx.ModelProto, name: str) -> int:
    for vi in model.graph.input:
        if vi.name == "x":
            return vi.type.tensor_type.elem_type
    return TensorProto.FLOAT


class ReferenceKernels:
    """The onnxfuse.kernels API in NumPy/torch float64 (decode_rows): a test double."""

    def supported(self, op_type, **attrs):
        return None if op_type == "DequantMatMul" else f"ReferenceKernels covers DequantMatMul only, not {op_type}"

    def dequant_matmul(self, a, w, scale, zero_point, global_scale, bias, *, K, N, block_size, weight_format,
                       scale_format, out=None):
        import torch

        from onnxfuse.runtime.torch_dtypes import to_numpy

        W = formats.decode_rows(to_numpy(w), to_numpy(scale), None if zero_point is None else to_numpy(zero_point),
                                K=K, block_size=block_size, element=weight_format, scale=scale_format,
                                global_scale=None if global_scale is None else to_numpy(global_scale))
        y = torch.from_numpy(to_numpy(a).astype(np.float64) @ W.T.astype(np.float64))
        if bias is not None:
            y = y + bias.double()
        y = y.to(a.dtype)
        if out is not None:
            out.copy_(y)
            return out
        return y
