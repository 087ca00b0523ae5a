"""A small builder for model-local function bodies (onnx.FunctionProto -> onnx_ir.Function).

Bodies are written as straight-line code: every `op(...)` call appends one node and returns
the name of its output, so the decode recipes in function_decode.py read like the math they
implement. Names are generated from a counter, hence deterministic: the same format
combination always yields a byte-identical body (optimizing twice equals optimizing once).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir
from onnx import helper, numpy_helper

from onnxfuse.ops import DOMAIN


class BodyBuilder:
    def __init__(self, opset: int):
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self._count = 0

    def _fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def op(self, op_type: str, *inputs: str, hint: str | None = None, **attrs) -> str:
        """Append one single-output standard-domain node; returns its output name."""
        out = self._fresh(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def const(self, value, hint: str = "c") -> str:
        """A Constant node holding `value` (a numpy array; Python ints become int64)."""
        array = np.asarray(value)
        if array.dtype == np.int32 and not isinstance(value, np.ndarray):
            array = array.astype(np.int64)
        out = self._fresh(hint)
        self.nodes.append(helper.make_node("Constant", [], [out], value=numpy_helper.from_array(array, out)))
        return out

    def ints(self, *values: int, hint: str = "i") -> str:
        """A 1-D int64 constant."""
        return self.const(np.array(values, dtype=np.int64), hint)

    def attr_int(self, name: str) -> str:
        """The caller node's int attribute `name`, as a 1-D int64 tensor of one element."""
        scalar = self._fresh(name)
        self._constant_ref(scalar, "value_int", onnx.AttributeProto.INT, name)
        return self.op("Reshape", scalar, self.ints(1), hint=name)

    def attr_ints(self, name: str) -> str:
        """The caller node's ints attribute `name`, as a 1-D int64 tensor."""
        out = self._fresh(name)
        self._constant_ref(out, "value_ints", onnx.AttributeProto.INTS, name)
        return out

    def _constant_ref(self, out: str, field: str, attr_type, name: str) -> None:
        node = helper.make_node("Constant", [], [out])
        node.attribute.append(helper.make_attribute_ref(field, attr_type, ref_attr_name=name))
        self.nodes.append(node)

    def opaque(self, value: str) -> str:
        """Max(x, x): x itself, bit for bit (NaN and -0 included), through an op no onnxruntime
        transformer matches. Inlined bodies sit next to the model's own nodes, and onnxruntime's
        fusions would otherwise reach across the function boundary and change the numbers:
        a per-tensor DequantizeLinear feeding the body's MatMul, once the weight decode is
        constant-folded, makes WeightBiasQuantization requantize the decoded weight to per-tensor
        int8; MatMul + Add becomes Gemm (another summation); a DequantizeLinear or
        QuantizeLinear propagates into the body. Bodies pass their activation inputs and their
        outputs through this, so each body computes exactly what it computes in isolation."""
        return self.op("Max", value, value, hint="opaque")

    def identity_to(self, value: str, output: str) -> None:
        """Bind an internal value to a function output name."""
        self.nodes.append(helper.make_node("Identity", [value], [output]))

    def to_float(self, value: str, dtype: int) -> str:
        """Cast to float32 unless it already is."""
        return value if dtype == onnx.TensorProto.FLOAT else self.op("Cast", value, to=onnx.TensorProto.FLOAT)

    def function(self, name: str, overload: str, inputs: list[str], outputs: list[str],
                 attributes: list[str]) -> onnx_ir.Function:
        proto = helper.make_function(
            DOMAIN, name, inputs, outputs, self.nodes,
            opset_imports=[helper.make_opsetid("", self.opset)],
            attributes=attributes, overload=overload,
        )
        return onnx_ir.serde.deserialize_function(proto)
