"""The standard Q/DQ subgraph that stands in for one quantized weight.

Only DequantizeLinear (and Transpose/Cast) appear: the weights are constants, so the Q half of a
Q/DQ pair is folded away, as onnxruntime's and ModelOpt's exporters do. Shapes written:

- layout "kn":   DQ(W[K,N], axis 0, block)                        -> consumer
- layout "nk":   DQ(W[N,K], axis 1, block) -> Transpose            -> consumer
- NVFP4:         DQ(e4m3 scale, fp32 scalar) -> DQ(fp4, axis -1, block 16) [-> Transpose] [-> Cast]
- MX:            DQ(elements, float8e8m0 scale, output_dtype=the model's float type)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

# DequantizeLinear gained `output_dtype` in opset 23; before that its output has the scale's type.
OUTPUT_DTYPE_OPSET = 23


@dataclasses.dataclass
class Emitted:
    nodes: list[ir.Node]
    initializers: list[ir.Value]
    output: ir.Value


def _initializer(name: str, array: np.ndarray, onnx_type: int) -> ir.Value:
    array = np.asarray(array)
    if not array.flags.c_contiguous:  # (np.ascontiguousarray would turn a scalar into shape [1])
        array = array.copy(order="C")
    tensor = ir.Tensor(array, dtype=ir.DataType(onnx_type), name=name)
    return ir.Value(name=name, shape=tensor.shape, type=ir.TensorType(tensor.dtype), const_value=tensor)


def _dq(name: str, inputs, *, axis: int | None, block_size: int | None, output_dtype: ir.DataType | None) -> ir.Node:
    attrs = []
    if axis is not None:
        attrs.append(ir.AttrInt64("axis", axis))
    if block_size:
        attrs.append(ir.AttrInt64("block_size", block_size))
    if output_dtype is not None:
        attrs.append(ir.AttrInt64("output_dtype", int(output_dtype)))
    node = ir.Node("", "DequantizeLinear", inputs, attrs, name=name)
    node.outputs[0].name = f"{name}_output"
    return node


def emit_dequantized_weight(name: str, qt, scale_fmt, *, transpose: bool, target_dtype: ir.DataType) -> Emitted:
    """Initializers and nodes computing the float weight `name` from QuantizedTensor `qt`.

    `qt` is the formats layer's QuantizedTensor of the *stored* tensor (already transposed for
    layout "nk") and `scale_fmt` the ScaleFormat of its block scale; the output has the
    consumer's dtype and orientation.
    """
    element = qt.scheme.element
    rank = qt.data.ndim
    inits = [_initializer(f"{name}_quantized", qt.data, element.onnx_type)]
    nodes: list[ir.Node] = []

    if qt.global_scale is not None:
        # Two-level (NVFP4): the block scale is itself dequantized by the per-tensor scale.
        inner_scale = _initializer(f"{name}_scale", qt.scale, scale_fmt.onnx_type)
        global_scale = _initializer(f"{name}_global_scale", np.asarray(qt.global_scale, dtype=np.float32), ir.DataType.FLOAT)
        inits += [inner_scale, global_scale]
        inner = _dq(f"{name}/scale/DequantizeLinear", [inner_scale, global_scale], axis=None, block_size=None, output_dtype=None)
        axis = -1 if qt.axis == rank - 1 else qt.axis  # ModelOpt writes axis=-1 on [N, K]
        outer = _dq(f"{name}/DequantizeLinear", [inits[0], inner.outputs[0]], axis=axis, block_size=qt.block_size, output_dtype=None)
        nodes += [inner, outer]
        produced = ir.DataType.FLOAT
    else:
        scale = _initializer(f"{name}_scale", qt.scale, scale_fmt.onnx_type)
        inits.append(scale)
        dq_inputs = [inits[0], scale]
        if qt.zero_point is not None:
            zp = _initializer(f"{name}_zero_point", qt.zero_point, element.onnx_type)
            inits.append(zp)
            dq_inputs.append(zp)
        scale_type = ir.DataType(scale_fmt.onnx_type)
        needs_output_dtype = scale_type != target_dtype  # the caller raised the opset to OUTPUT_DTYPE_OPSET
        nodes.append(
            _dq(
                f"{name}/DequantizeLinear",
                dq_inputs,
                axis=qt.axis,
                block_size=qt.block_size,
                output_dtype=target_dtype if needs_output_dtype else None,
            )
        )
        produced = target_dtype

    out = nodes[-1].outputs[0]
    if transpose:
        t = ir.Node("", "Transpose", [out], [ir.AttrInt64s("perm", [1, 0])], name=f"{name}/Transpose")
        t.outputs[0].name = f"{name}_transposed"
        nodes.append(t)
        out = t.outputs[0]
    if produced != target_dtype:
        c = ir.Node("", "Cast", [out], [ir.AttrInt64("to", int(target_dtype))], name=f"{name}/Cast")
        c.outputs[0].name = f"{name}_cast"
        nodes.append(c)
        out = c.outputs[0]
    return Emitted(nodes, inits, out)
