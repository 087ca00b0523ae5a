"""Structural checks on a ModelProto before it becomes onnx-ir: what the passes may assume.

onnx-ir reads a graph with a cycle, a dangling input or a missing opset import without a word
(it invents placeholder values), and a matcher walking such a graph could loop or misread it.
These checks run on the proto, so each problem is reported as a sentence naming the graph, the
node and the tensor. Unsorted graphs are accepted (the passes sort them); duplicate node *names*
are accepted too (onnx.checker and onnxruntime accept them; the passes' clean-up renames).

Every check returns diagnostics (a reason), never a bool.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Iterator

import onnx
import onnx.defs

from onnxfuse import codes
from onnxfuse.diagnostics import Diagnostic

# Domains whose operators onnx.defs knows: an op missing from these is a typo or a wrong opset.
# (The onnxfuse domain is registered by onnxfuse.ops on import.)
_SCHEMA_DOMAINS = frozenset({"", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training", "onnxfuse"})
# Reporting stops here: one broken export can repeat the same fault thousands of times.
MAX_DIAGNOSTICS = 20


def _domain(name: str) -> str:
    return "" if name == "ai.onnx" else name


def _label(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"#{index} ({node.op_type})"


@dataclasses.dataclass
class _Scope:
    """Where a graph sits: its readable place and the names its outer graphs define."""

    where: str  # "graph 'main'", "node 'If_3' attribute 'then_branch'", "function 'onnxfuse.F'"
    outer: tuple[set[str], ...]  # the names of each enclosing graph, innermost last (shared, not copied)
    opsets: dict[str, int]
    local_functions: frozenset[tuple[str, str]]
    schemas: dict = dataclasses.field(default_factory=dict)  # (op, version, domain) -> schema or None, per check

    def schema(self, op_type: str, domain: str):
        key = (op_type, self.opsets[domain], domain)
        if key not in self.schemas:
            known = onnx.defs.has(op_type, key[1], domain)
            self.schemas[key] = onnx.defs.get_schema(op_type, key[1], domain) if known else None
        return self.schemas[key]


def opset_problems(model: onnx.ModelProto, file: str | None = None) -> list[Diagnostic]:
    """Opset imports: present, one version per domain, a default-domain version onnx knows."""
    out: list[Diagnostic] = []
    if not model.opset_import:
        return [Diagnostic.error(codes.OPSET_INVALID, "the model has no opset_import", file=file,
                                 hint="add an opset import for the default domain, e.g. version 21")]
    seen: dict[str, int] = {}
    for op in model.opset_import:
        dom = _domain(op.domain)
        if dom in seen and seen[dom] != op.version:
            out.append(Diagnostic.error(
                codes.OPSET_INVALID,
                f"the model imports domain '{dom or 'ai.onnx'}' twice, at versions {seen[dom]} and {op.version}",
                file=file))
        seen[dom] = op.version
    newest = onnx.defs.onnx_opset_version()
    if "" in seen and not 1 <= seen[""] <= newest:
        out.append(Diagnostic.error(
            codes.OPSET_INVALID,
            f"the model imports the default domain at version {seen['']}; this onnx ({onnx.__version__}) "
            f"knows versions 1..{newest}",
            file=file, hint="re-export the model at a released opset, or upgrade onnx" if seen[""] > newest else None))
    return out


def _opsets(imports: Iterable[onnx.OperatorSetIdProto]) -> dict[str, int]:
    return {_domain(op.domain): op.version for op in imports}


def graph_problems(model: onnx.ModelProto, file: str | None = None) -> list[Diagnostic]:
    """Every structural problem of the model: opsets, unknown ops, SSA, dangling names, cycles."""
    out = opset_problems(model, file)
    if any(d.is_error for d in out) and not model.opset_import:
        return out
    local = frozenset((_domain(f.domain), f.name) for f in model.functions)
    opsets = _opsets(model.opset_import)
    out.extend(_graph(model.graph, _Scope(f"graph '{model.graph.name}'", (), opsets, local), file))
    for f in model.functions:
        f_opsets = {**opsets, **_opsets(f.opset_import)}
        scope = _Scope(f"function '{f.domain}.{f.name}'", (), f_opsets, local)
        out.extend(_body(list(f.node), list(f.input), list(f.output), [], scope, file))
    out.extend(_function_recursion(model, file))
    return out[:MAX_DIAGNOSTICS]


def _graph(graph: onnx.GraphProto, scope: _Scope, file: str | None) -> list[Diagnostic]:
    inputs = [v.name for v in graph.input]
    defined_by_data = [t.name for t in graph.initializer] + [t.values.name for t in graph.sparse_initializer]
    # onnx-ir drops sparse initializers without a word: refusing beats losing a weight.
    sparse = [Diagnostic.error(codes.MODEL_INVALID, f"{scope.where}: sparse initializer '{t.values.name}' is not "
                               "supported (it would be lost)", tensor=t.values.name, file=file,
                               hint="store it as a dense initializer")
              for t in graph.sparse_initializer]
    return sparse + _body(list(graph.node), inputs, [v.name for v in graph.output], defined_by_data, scope, file)


def _subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.name, attr.g
        for i, g in enumerate(attr.graphs):
            yield f"{attr.name}[{i}]", g


def _free_names(graph: onnx.GraphProto) -> set[str]:
    """Names a subgraph reads from its outer scopes (its implicit inputs)."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    used: set[str] = set()
    for node in graph.node:
        defined.update(o for o in node.output if o)
        used.update(i for i in node.input if i)
        for _, g in _subgraphs(node):
            used |= _free_names(g)
    used.update(v.name for v in graph.output)
    return used - defined


def _body(nodes: list[onnx.NodeProto], inputs: list[str], outputs: list[str], data: list[str],
          scope: _Scope, file: str | None) -> list[Diagnostic]:
    out: list[Diagnostic] = []

    def err(code, message, node=None, tensor=None, hint=None):
        out.append(Diagnostic.error(code, f"{scope.where}: {message}", node=node, tensor=tensor, hint=hint, file=file))

    # Single static assignment: a name is defined once (an initializer may repeat an input: IR < 4).
    producer: dict[str, int] = {}
    defined = set(inputs) | set(data)
    for name in inputs:
        if inputs.count(name) > 1 and name not in producer:
            producer[name] = -1
            err(codes.MODEL_INVALID, f"the input '{name}' is declared more than once", tensor=name)
    for i, node in enumerate(nodes):
        for name in node.output:
            if not name:
                continue
            if name in defined or name in producer:
                err(codes.MODEL_INVALID, f"the value '{name}' is defined twice (graphs must be in SSA form)",
                    node=_label(node, i), tensor=name)
            producer[name] = i
    defined |= set(producer)

    for i, node in enumerate(nodes):
        out.extend(_op_problems(node, i, scope, file))
        for name in node.input:
            if name and name not in defined and not _in_outer(name, scope):
                err(codes.MODEL_INVALID, f"input '{name}' of the node is not defined by any node, input or initializer",
                    node=_label(node, i), tensor=name)
        for attr_name, g in _subgraphs(node):
            sub = _Scope(f"node '{_label(node, i)}' attribute '{attr_name}'", (*scope.outer, defined),
                         scope.opsets, scope.local_functions, scope.schemas)
            out.extend(_graph(g, sub, file))
    for name in outputs:
        if name not in defined and not _in_outer(name, scope):
            err(codes.MODEL_INVALID, f"the output '{name}' is not produced by any node, input or initializer", tensor=name)
    if not out:
        out.extend(_cycle_problems(nodes, producer, scope, file))
    return out


def _in_outer(name: str, scope: _Scope) -> bool:
    return any(name in names for names in scope.outer)


def _op_problems(node: onnx.NodeProto, index: int, scope: _Scope, file: str | None) -> list[Diagnostic]:
    dom = _domain(node.domain)
    label = _label(node, index)
    if (dom, node.op_type) in scope.local_functions:
        if dom not in scope.opsets:
            return [Diagnostic.error(codes.OPSET_INVALID, f"{scope.where}: the node calls a function of domain "
                                     f"'{dom}', which the model does not import", node=label, file=file)]
        return []
    if dom not in scope.opsets:
        return [Diagnostic.error(
            codes.OPSET_INVALID,
            f"{scope.where}: the node's domain '{dom or 'ai.onnx'}' is not in the model's opset imports",
            node=label, file=file, hint=f"add an opset import for domain '{dom}'")]
    if dom in _SCHEMA_DOMAINS and scope.schema(node.op_type, dom) is None:
        where = f"domain '{dom}'" if dom else "the default domain"
        exists_later = onnx.defs.has(node.op_type, dom)
        msg = (f"{scope.where}: {node.op_type} does not exist in opset {scope.opsets[dom]} of {where}"
               + (" (it was added in a later opset)" if exists_later else " (no such operator)"))
        return [Diagnostic.error(codes.OPSET_INVALID if exists_later else codes.MODEL_INVALID, msg, node=label, file=file)]
    if dom in _SCHEMA_DOMAINS:
        schema = scope.schema(node.op_type, dom)
        return _arity_problems(node, label, schema, scope, file) + _attribute_type_problems(node, label, schema, scope, file)
    return []


def _arity_problems(node: onnx.NodeProto, label: str, schema, scope: _Scope, file: str | None) -> list[Diagnostic]:
    """A DequantizeLinear without its scale input would make every reader index past its inputs."""
    out = []
    for what, count, lo, hi in (("inputs", len(node.input), schema.min_input, schema.max_input),
                                ("outputs", len(node.output), schema.min_output, schema.max_output)):
        if not lo <= count <= hi:
            want = f"{lo}" if lo == hi else f"{lo} to {hi}" if hi < 2**31 - 1 else f"at least {lo}"
            out.append(Diagnostic.error(
                codes.MODEL_INVALID, f"{scope.where}: {node.op_type} takes {want} {what}, this node has {count}",
                node=label, file=file))
    return out


def _attribute_type_problems(node: onnx.NodeProto, label: str, schema, scope: _Scope, file: str | None) -> list[Diagnostic]:
    """An attribute of the wrong kind (axis="zero") would make every reader of it fail."""
    out = []
    for attr in node.attribute:
        declared = schema.attributes.get(attr.name)
        if declared is None or attr.ref_attr_name:
            continue  # unknown names are the validators' business (e.g. block_size before opset 21)
        if int(declared.type) != int(attr.type):
            want = onnx.AttributeProto.AttributeType.Name(int(declared.type))
            got = onnx.AttributeProto.AttributeType.Name(attr.type) if attr.type in onnx.AttributeProto.AttributeType.values() else str(attr.type)
            out.append(Diagnostic.error(
                codes.MODEL_INVALID,
                f"{scope.where}: attribute '{attr.name}' of {node.op_type} must be {want}, not {got}",
                node=label, file=file))
    return out


def _cycle_problems(nodes: list[onnx.NodeProto], producer: dict[str, int], scope: _Scope,
                    file: str | None) -> list[Diagnostic]:
    """Kahn's algorithm over data edges, subgraph implicit inputs included; report one cycle."""
    deps: list[set[int]] = []
    for node in nodes:
        reads = {n for n in node.input if n}
        for _, g in _subgraphs(node):
            reads |= _free_names(g)
        deps.append({producer[n] for n in reads if producer.get(n, -1) >= 0})
    users: list[list[int]] = [[] for _ in nodes]
    pending = [len(d) for d in deps]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    ready = [i for i, p in enumerate(pending) if p == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                ready.append(u)
    if done == len(nodes):
        return []
    # Walk back from a node left over: every left-over node depends on another left-over one.
    stuck = {i for i, p in enumerate(pending) if p > 0}
    path, seen = [], {}
    i = min(stuck)
    while i not in seen:
        seen[i] = len(path)
        path.append(i)
        i = min(j for j in deps[i] if j in stuck)
    cycle = path[seen[i]:] + [i]
    names = " -> ".join(f"'{_label(nodes[j], j)}'" for j in reversed(cycle))
    return [Diagnostic.error(codes.MODEL_INVALID, f"{scope.where}: the graph has a cycle: {names}",
                             node=_label(nodes[i], i), file=file)]


def _function_recursion(model: onnx.ModelProto, file: str | None) -> list[Diagnostic]:
    """Model-local functions that call themselves (directly or not) would make inlining loop forever."""
    key = {(_domain(f.domain), f.name): f for f in model.functions}
    calls = {k: {(_domain(n.domain), n.op_type) for n in f.node} & key.keys() for k, f in key.items()}
    state: dict[tuple[str, str], int] = {}  # 1 visiting, 2 done

    def visit(k, trail) -> list[tuple[str, str]] | None:
        state[k] = 1
        for c in sorted(calls[k]):
            if state.get(c) == 1:
                return trail + [k, c]
            if c not in state and (found := visit(c, trail + [k])):
                return found
        state[k] = 2
        return None

    for k in sorted(key):
        if k not in state and (found := visit(k, [])):
            chain = " -> ".join(f"'{d}.{n}'" for d, n in found)
            return [Diagnostic.error(codes.MODEL_INVALID, f"model-local functions call each other in a loop: {chain}",
                                     file=file)]
    return []
