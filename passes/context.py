"""State one optimize run shares between its passes: findings, counts, names, packed weights.

Created per run (never global), so two optimize calls never see each other's state.
"""

from __future__ import annotations

import collections
import dataclasses

import onnx_ir as ir

from onnxfuse import codes
from onnxfuse.diagnostics import Diagnostic
from onnxfuse.passes import match


@dataclasses.dataclass
class Fused:
    node: str  # the fused node's name
    pattern: str  # "DequantMatMul", "DequantMatMul(Gemm)", "DequantGather", "Dequantize", "QuantizeDequantize"
    format: str  # e.g. "int4/float16"
    replaced: list[str]  # names of the nodes it replaced
    note: str | None = None  # for a standalone Dequantize: why its consumers were not fused


@dataclasses.dataclass
class RunContext:
    model: ir.Model
    diagnostics: list[Diagnostic] = dataclasses.field(default_factory=list)
    fused: list[Fused] = dataclasses.field(default_factory=list)
    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    # node name -> why it was left as it was (best partial match first)
    reasons: dict[str, list[Diagnostic]] = dataclasses.field(default_factory=dict)
    packed: dict = dataclasses.field(default_factory=dict)  # cache key -> PackedWeight
    functions: set = dataclasses.field(default_factory=set)
    created: list = dataclasses.field(default_factory=list)  # initializers this run added
    _names: set = dataclasses.field(default_factory=set)

    @property
    def graph(self) -> ir.Graph:
        return self.model.graph

    @property
    def opset(self) -> int:
        return match.onnx_opset(self.model)

    def name(self, base: str) -> str:
        return match.unique_name(self.graph, base, self._names)

    def report(self, diagnostics: list[Diagnostic]) -> None:
        for d in diagnostics:
            if d not in self.diagnostics:
                self.diagnostics.append(d)

    def explain(self, node: ir.Node, diagnostic: Diagnostic) -> None:
        """Record why `node` (a DQ or Q) was not fused by some rule."""
        self.reasons.setdefault(match.node_label(node), [])
        if diagnostic not in self.reasons[match.node_label(node)]:
            self.reasons[match.node_label(node)].append(diagnostic)

    def not_fused(self, node: ir.Node, message: str, code=codes.NOT_FUSED, tensor: str | None = None) -> Diagnostic:
        d = Diagnostic.info(code, message, node=match.node_label(node), tensor=tensor)
        self.explain(node, d)
        return d

    def record(self, fused: Fused) -> None:
        self.fused.append(fused)
        self.counts[(fused.pattern, fused.format)] += 1

    def initializer(self, base: str, tensor: ir.TensorProtocol) -> ir.Value:
        value = ir.Value(name=self.name(base), shape=ir.Shape(tensor.shape), type=ir.TensorType(tensor.dtype),
                         const_value=tensor)
        self.graph.register_initializer(value)
        self.created.append(value)
        return value

    def drop_unused_created(self) -> None:
        """Remove what this run added but no fusion kept (a rewrite refused after repacking);
        the model's own initializers are never touched."""
        for value in self.created:
            if not value.uses() and not value.is_graph_output() and value.name in self.graph.initializers:
                self.graph.initializers.pop(value.name)

    def add_function(self, op_type: str, **key) -> str:
        """Add the model-local function for this format combination once; return its overload."""
        from onnxfuse import ops
        from onnxfuse.passes import functions

        overload = functions.overload_key(op_type, **key)
        if (op_type, overload) not in self.functions:
            identifier = (ops.DOMAIN, op_type, overload)
            if identifier not in self.model.functions:
                function = functions.function_for(op_type, opset=self.opset, **key)
                self.model.functions[function.identifier()] = function
            self.functions.add((op_type, overload))
        self.model.opset_imports[ops.DOMAIN] = ops.VERSION
        return overload
