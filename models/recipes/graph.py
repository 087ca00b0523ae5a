"""A small onnx.helper graph builder for the zoo recipes.

Recipes describe a model as a sequence of `b.op(...)` calls; the builder names every node and
tensor after the module path it belongs to (``layers.0.attn.q_proj``), the way exporters do, so
diagnostics and golden files stay readable. Weights come from one seeded generator per model,
drawn in call order, so a recipe builds byte-identical files on every run.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Opset of the float models. 21 is the first with blocked DequantizeLinear, and every op the
# recipes use keeps its semantics up to opset 28, so the quantizer only raises the import.
FLOAT_OPSET = 21
IR_VERSION = 10

NP_OF_ONNX = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


class GraphBuilder:
    def __init__(self, name: str, seed: int, dtype: int = TensorProto.FLOAT):
        self.name = name
        self.dtype = dtype
        self.np_dtype = NP_OF_ONNX[dtype]
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._names: dict[str, int] = {}
        self.opsets: dict[str, int] = {"": FLOAT_OPSET}

    # -- names ------------------------------------------------------------------------------
    def unique(self, base: str) -> str:
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    # -- tensors ----------------------------------------------------------------------------
    def input(self, name: str, elem_type: int, shape) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def output(self, value: str, name: str, elem_type: int | None = None, shape=None) -> str:
        """Expose `value` as graph output `name` (through an Identity when the names differ)."""
        if value != name:
            self.nodes.append(helper.make_node("Identity", [value], [name], name=self.unique(f"{name}/Identity")))
        self.outputs.append(helper.make_tensor_value_info(name, elem_type or self.dtype, shape))
        return name

    def const(self, name: str, array) -> str:
        name = self.unique(name)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def ints(self, name: str, values) -> str:
        return self.const(name, np.asarray(values, dtype=np.int64))

    def weight(self, name: str, shape, std: float | None = None) -> str:
        """A normal(0, std) weight; std defaults to 1/sqrt(fan_in) (fan_in = shape[0] for [K,N])."""
        std = (1.0 / np.sqrt(shape[0])) if std is None else std
        w = (self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(self.np_dtype)
        return self.const(name, w)

    def scalar(self, name: str, value: float) -> str:
        return self.const(name, np.asarray(value, dtype=self.np_dtype))

    # -- nodes ------------------------------------------------------------------------------
    def op(self, op_type: str, inputs, name: str, *, outputs: int = 1, domain: str = "", **attrs):
        node_name = self.unique(f"{name}/{op_type}")
        outs = [node_name + (f":{i}" if outputs > 1 else "") for i in range(outputs)]
        outs = [o.replace("/", ".") + "_out" for o in outs]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=node_name, domain=domain, **attrs))
        return outs[0] if outputs == 1 else outs

    def matmul(self, x: str, k: int, n: int, name: str, bias: bool = False) -> str:
        """x @ W[k, n] (+ b): how torch.onnx exports nn.Linear on a 2-D or 3-D activation."""
        y = self.op("MatMul", [x, self.weight(f"{name}.weight", (k, n))], name)
        if bias:
            b = self.const(f"{name}.bias", (self.rng.standard_normal(n, dtype=np.float32) * 0.02).astype(self.np_dtype))
            y = self.op("Add", [y, b], name)
        return y

    def gemm(self, x: str, k: int, n: int, name: str) -> str:
        """Gemm(x, W[n, k], b, transB=1): how exporters write a Linear on a 2-D activation."""
        w = self.weight(f"{name}.weight", (n, k), std=1.0 / np.sqrt(k))
        b = self.const(f"{name}.bias", (self.rng.standard_normal(n, dtype=np.float32) * 0.02).astype(self.np_dtype))
        return self.op("Gemm", [x, w, b], name, transB=1)

    # -- model ------------------------------------------------------------------------------
    def model(self, doc: str = "") -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.initializers)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid(d, v) for d, v in self.opsets.items()],
            ir_version=IR_VERSION,
            producer_name="onnxfuse-zoo",
            doc_string=doc,
        )
        onnx.checker.check_model(model, full_check=True)
        return model
