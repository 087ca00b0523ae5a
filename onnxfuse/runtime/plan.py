"""Split a fused model into segments: runs of standard ops for onnxruntime, fused ops for kernels.

The plan is made once per session. It works on an `onnx.ModelProto` and imports neither torch
nor triton, so it can be inspected (and tested) anywhere.

A node goes to a kernel when it is in the onnxfuse domain and `kernel_reason(node)` returns None;
every other node (standard ops, and fused ops without a kernel, which then run through their
function body) joins an ORT segment. Nodes are scheduled with Kahn's algorithm preferring the
kind of the segment being built, so independent standard ops gather into one ORT call instead
of splitting it at every fused node, and ready kernels (q/k/v projections reading one input)
run back to back before the standard ops that consume them.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

import onnx

from onnxfuse.ops import DOMAIN


@dataclasses.dataclass(frozen=True)
class Segment:
    kind: str  # "ort" or "kernel"
    nodes: tuple[onnx.NodeProto, ...]
    inputs: tuple[str, ...]  # values read from earlier segments or graph inputs (not initializers)
    outputs: tuple[str, ...]  # values later segments or the graph outputs read
    initializers: tuple[str, ...]  # initializers the nodes read

    @property
    def label(self) -> str:
        if self.kind == "kernel":
            n = self.nodes[0]
            return f"kernel {n.op_type} '{n.name or n.output[0]}'"
        return f"ort segment of {len(self.nodes)} node(s)"


@dataclasses.dataclass(frozen=True)
class Fallback:
    """A fused node that runs through its function body in ORT, and why."""

    node: str
    op_type: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Plan:
    segments: tuple[Segment, ...]
    fallbacks: tuple[Fallback, ...]
    # last segment index reading each value, so the executor can drop it after that
    last_use: dict[str, int]

    def summary(self) -> str:
        kinds = [s.kind for s in self.segments]
        return f"{kinds.count('kernel')} kernel call(s), {kinds.count('ort')} ORT segment(s)"


def is_fused(node: onnx.NodeProto) -> bool:
    return node.domain == DOMAIN


def node_reads(node: onnx.NodeProto) -> list[str]:
    """Every value a node reads, including outer-scope values read inside its subgraphs."""
    names = [i for i in node.input if i]
    for attr in node.attribute:
        graphs = [attr.g] if attr.HasField("g") else list(attr.graphs)
        for g in graphs:
            names.extend(_outer_reads(g))
    return names


def _outer_reads(graph: onnx.GraphProto) -> list[str]:
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    reads = []
    for node in graph.node:
        for name in node_reads(node):
            if name not in local:
                reads.append(name)
        local.update(o for o in node.output if o)
    return reads


def make_plan(model: onnx.ModelProto, kernel_reason: Callable[[onnx.NodeProto], str | None]) -> Plan:
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    fallbacks: list[Fallback] = []
    kinds: list[str] = []
    for node in graph.node:
        if is_fused(node):
            reason = kernel_reason(node)
            if reason is None:
                kinds.append("kernel")
                continue
            fallbacks.append(Fallback(node.name or node.output[0], node.op_type, reason))
        kinds.append("ort")

    order = _schedule(graph.node, kinds)
    groups: list[tuple[str, list[int]]] = []
    for i in order:
        kind = kinds[i]
        if kind == "ort" and groups and groups[-1][0] == "ort":
            groups[-1][1].append(i)
        else:
            groups.append((kind, [i]))

    graph_outputs = [o.name for o in graph.output]
    reads_after: list[set[str]] = [set() for _ in groups]
    running: set[str] = set(graph_outputs)
    for g in range(len(groups) - 1, -1, -1):
        reads_after[g] = set(running)
        for i in groups[g][1]:
            running.update(node_reads(graph.node[i]))

    segments = []
    last_use: dict[str, int] = {}
    for g, (kind, idx) in enumerate(groups):
        nodes = tuple(graph.node[i] for i in idx)
        produced: set[str] = set()
        inputs: list[str] = []
        inits: list[str] = []
        for n in nodes:
            for name in node_reads(n):
                if name in produced:
                    continue
                target = inits if name in initializers else inputs
                if name not in target:
                    target.append(name)
            produced.update(o for o in n.output if o)
        outputs = [o for n in nodes for o in n.output if o and o in reads_after[g]]
        for name in inputs:
            last_use[name] = g
        segments.append(Segment(kind, nodes, tuple(inputs), tuple(outputs), tuple(inits)))
    return Plan(tuple(segments), tuple(fallbacks), last_use)


def _schedule(nodes: Iterable[onnx.NodeProto], kinds: list[str]) -> list[int]:
    """A topological order that keeps nodes of one kind together where dependencies allow."""
    nodes = list(nodes)
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer[o] = i
    deps: list[set[int]] = []
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        d = {producer[name] for name in node_reads(n) if name in producer and producer[name] != i}
        deps.append(d)
        for j in d:
            users[j].append(i)
    pending = [len(d) for d in deps]
    ready = {"ort": [], "kernel": []}
    for i in range(len(nodes)):
        if pending[i] == 0:
            ready[kinds[i]].append(i)
    order: list[int] = []
    current = kinds[0] if nodes else "ort"
    while ready["ort"] or ready["kernel"]:
        if not ready[current]:
            current = "kernel" if current == "ort" else "ort"
        # lowest original index first: stable and close to the author's order
        ready[current].sort()
        i = ready[current].pop(0)
        order.append(i)
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                ready[kinds[u]].append(u)
    if len(order) != len(nodes):
        raise ValueError("the graph has a cycle or a node reads a value nothing produces")
    return order


def submodel(model: onnx.ModelProto, segment: Segment, value_types: dict[str, onnx.TypeProto]) -> onnx.ModelProto:
    """A standalone model running one ORT segment (its model-local functions; the model's opsets,
    the standard one lowered as far as every node keeps its schema: see _lowest_same_opset)."""
    inits = {t.name: t for t in model.graph.initializer}

    def info(name: str) -> onnx.ValueInfoProto:
        vi = onnx.ValueInfoProto(name=name)
        if name in value_types:
            vi.type.CopyFrom(value_types[name])
        return vi

    graph = onnx.GraphProto(name=f"{model.graph.name or 'graph'}_segment")
    graph.node.extend(segment.nodes)
    graph.input.extend(info(n) for n in segment.inputs)
    graph.output.extend(info(n) for n in segment.outputs)
    graph.initializer.extend(inits[n] for n in segment.initializers)
    sub = onnx.ModelProto(ir_version=model.ir_version, producer_name="onnxfuse-runtime", graph=graph)
    sub.functions.extend(_functions_used(model, segment.nodes))
    for imp in model.opset_import:
        version = imp.version
        if imp.domain in ("", "ai.onnx") and not sub.functions:  # function bodies keep the model's opset
            version = _lowest_same_opset(imp.version, segment.nodes)
        sub.opset_import.append(onnx.helper.make_opsetid(imp.domain, version))
    return sub


def _lowest_same_opset(current: int, nodes) -> int:
    """The lowest standard opset at which every node resolves to the schema it has at `current`
    (so the segment means exactly the same), or `current` where that cannot be told. An
    onnxruntime older than the model's opset still runs such a segment: ORT 1.31 refuses opset 28,
    which models with FLOAT6 weights carry, even around plain Add and Relu nodes."""
    lowest = min(current, 11)  # a floor every onnxruntime in use loads (ORT supports opset 7 and up)
    for n in nodes:
        if n.domain not in ("", "ai.onnx"):
            continue
        if any(a.HasField("g") or len(a.graphs) for a in n.attribute):
            return current  # subgraph bodies: keep the model's opset rather than walk them
        try:
            since = onnx.defs.get_schema(n.op_type, current, "").since_version
        except onnx.defs.SchemaError:
            return current
        lowest = max(lowest, since)
    return lowest


def _functions_used(model: onnx.ModelProto, nodes) -> list[onnx.FunctionProto]:
    """The model-local functions the nodes call, directly or from other functions' bodies."""
    table = {(f.domain, f.name, f.overload): f for f in model.functions}
    used: dict = {}
    stack = list(nodes)
    while stack:
        n = stack.pop()
        key = (n.domain, n.op_type, n.overload)
        if key in table and key not in used:
            used[key] = table[key]
            stack.extend(table[key].node)
        for attr in n.attribute:
            for g in ([attr.g] if attr.HasField("g") else list(attr.graphs)):
                stack.extend(g.node)
    return [f for k, f in table.items() if k in used]
