"""How a fused node maps onto the onnxfuse.kernels API (docs/kernels.md, docs/ops.md)."""

from __future__ import annotations


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


def constant_uses(nodes) -> dict[str, list[tuple[str, str]]]:
    """value name -> the (op_type, input role) pairs under which the fused nodes read it."""
    uses: dict[str, list[tuple[str, str]]] = {}
    for node in nodes:
        for name, role in zip(node.input, _INPUTS.get(node.op_type, ())):
            if name:
                uses.setdefault(name, []).append((node.op_type, role))
    return uses


def kernel_keywords(node: onnx.NodeProto) -> dict:
    """The kernel function's keyword arguments for a node's attributes (docs/kernels.md)."""
    from onnxfuse.runtime.torch_dtypes import torch_dtype_of_onnx

    attrs = node_attributes(node)
    kw = {k: attrs[k] for k in _ATTRS[node.op_type] if k in attrs}
    if "output_dtype" in kw:
        kw["out_dtype"] = torch_dtype_of_onnx(kw.pop("output_dtype"))
    if "shape" in kw:
        kw["shape"] = tuple(kw["shape"])
    if "saturate" in kw:
        kw["saturate"] = bool(kw["saturate"])
    return kw


class PreparedKernel:
    """One fused node's kernel call with everything static resolved at session creation: the
    function, its keyword arguments, and the constant inputs as device tensors (a global scale
    already the 1-element float32 tensor the kernels load). A run only fills in the inputs that
    earlier segments computed."""

    def __init__(self, node: onnx.NodeProto, constants: dict, kernels):
        self.node = node
        self.op_type = node.op_type
        self.output = node.output[0]
        self.fn = getattr(kernels, _FUNCTIONS[node.op_type])
        self.kw = kernel_keywords(node)
        names = list(node.input) + [""] * (len(_INPUTS[node.op_type]) - len(node.input))
        self.args = [None] * len(names)
        self.dynamic: list[tuple[int, str]] = []  # (argument position, value name) filled per run
        for i, (n, role) in enumerate(zip(names, _INPUTS[node.op_type])):
            if not n:
                continue
            if n in constants:
                t = constants[n]
                if role == "global_scale":
                    t = t.reshape(1).float()
                self.args[i] = t
            else:
                self.dynamic.append((i, n))
        self.accepts_out = accepts_out(node)

    def __call__(self, env: dict, out=None):
        args = self.args.copy()
        for i, n in self.dynamic:
            args[i] = env[n]
        if out is not None:
            return self.fn(*args, out=out, **self.kw)
        return self.fn(*args, **self.kw)


def accepts_out(node: onnx.NodeProto) -> bool:
    return node.op_type == "DequantMatMul"
