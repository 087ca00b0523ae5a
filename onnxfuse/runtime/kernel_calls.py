"""How a fused node maps onto the onnxfuse.kernels API (docs/kernels.md, docs/ops.md)."""

from __future__ import annotations

import inspect

import onnx

# Node input positions per op (docs/ops.md); absent optional inputs are empty names.
_INPUTS = {
    "DequantMatMul": ("a", "w", "scale", "zero_point", "global_scale", "bias"),
    "DequantGather": ("table", "scale", "zero_point", "global_scale", "indices"),
    "Dequantize": ("x", "scale", "zero_point", "global_scale"),
    "QuantizeDequantize": ("x", "scale", "zero_point", "global_scale"),
}
_FUNCTIONS = {
    "DequantMatMul": "dequant_matmul",
    "DequantGather": "dequant_gather",
    "Dequantize": "dequantize",
    "QuantizeDequantize": "quantize_dequantize",
}
_ATTRS = {
    "DequantMatMul": ("K", "N", "block_size", "weight_format", "scale_format"),
    "DequantGather": ("D", "block_size", "weight_format", "scale_format", "output_dtype"),
    "Dequantize": ("shape", "axis", "block_size", "weight_format", "scale_format", "output_dtype"),
    "QuantizeDequantize": ("element_format", "axis", "block_size", "mode", "scale_rule", "rounding_mode", "saturate"),
}


def node_attributes(node: onnx.NodeProto) -> dict:
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else (list(v) if a.type == onnx.AttributeProto.INTS else v)
    return out


def kernel_reason(node: onnx.NodeProto, kernels) -> str | None:
    """None when a kernel runs this fused node, else a sentence saying why not."""
    if node.op_type not in _FUNCTIONS:
        return f"onnxfuse.kernels has no kernel for the op type {node.op_type}"
    fn = _FUNCTIONS[node.op_type]
    if kernels is None or not hasattr(kernels, fn) or not hasattr(kernels, "supported"):
        return f"onnxfuse.kernels does not provide {fn}() here"
    try:
        return kernels.supported(node.op_type, **node_attributes(node))
    except TypeError as e:
        return f"onnxfuse.kernels.supported() refused the node's attributes: {e}"


def call_kernel(node: onnx.NodeProto, values: dict, kernels, *, out=None):
    """Run one fused node. `values` maps input names to torch tensors."""
    from onnxfuse.runtime.torch_dtypes import torch_dtype_of_onnx

    names = list(node.input) + [""] * (len(_INPUTS[node.op_type]) - len(node.input))
    args = [values[n] if n else None for n in names]
    attrs = node_attributes(node)
    kw = {k: attrs[k] for k in _ATTRS[node.op_type] if k in attrs}
    if "output_dtype" in kw:
        kw["out_dtype"] = torch_dtype_of_onnx(kw.pop("output_dtype"))
    if "shape" in kw:
        kw["shape"] = tuple(kw["shape"])
    if "saturate" in kw:
        kw["saturate"] = bool(kw["saturate"])
    fn = kernel_function(kernels, _FUNCTIONS[node.op_type])
    if out is not None:
        kw["out"] = out
    return fn(*args, **kw)


def kernel_function(kernels, name: str):
    fn = getattr(kernels, name)
    if inspect.ismodule(fn):
        # onnxfuse.kernels has a submodule named like the function; importing it rebinds the
        # package attribute to the module (reported to the kernels owner). Take its function.
        fn = getattr(fn, name)
    return fn


def accepts_out(node: onnx.NodeProto) -> bool:
    return node.op_type == "DequantMatMul"
