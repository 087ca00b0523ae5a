"""Inputs for verify and bench: read from .npz, or generated from the graph inputs' types and shapes.

Symbolic dimensions take their value from `--shape name:dims` (the whole input's shape) or a
`dim_param=value` binding; anything left unbound is refused with a sentence saying how to bind it.
Integer inputs that index a Gather (or DequantGather) table are drawn inside the table's range.
"""

from __future__ import annotations

import numpy as np
import onnx

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.runtime.feeds import IOInfo, graph_inputs


def parse_shape_args(specs: list[str] | None) -> tuple[dict[str, list[int]], dict[str, int]]:
    """`input:1x16`, `input:1,16` or `input:[1,16]` -> whole shapes; `batch=2` -> a dim_param value."""
    shapes: dict[str, list[int]] = {}
    dims: dict[str, int] = {}
    for spec in specs or []:
        if "=" in spec and ":" not in spec:
            k, v = spec.split("=", 1)
            dims[k.strip()] = _int(v, spec)
            continue
        name, sep, text = spec.rpartition(":")
        if not sep or not name:
            raise OnnxfuseError.of(codes.USAGE, f"--shape '{spec}' must look like name:1x16 (or dim_param=value)")
        text = text.strip().strip("[]()")
        parts = [p for p in text.replace("x", ",").split(",") if p.strip()] if text else []
        shapes[name] = [_int(p, spec) for p in parts]
    return shapes, dims


def _int(text: str, spec: str) -> int:
    try:
        v = int(text.strip())
    except ValueError:
        raise OnnxfuseError.of(codes.USAGE, f"--shape '{spec}': '{text}' is not an integer") from None
    if v < 0:
        raise OnnxfuseError.of(codes.USAGE, f"--shape '{spec}': dimensions must be >= 0")
    return v


def parse_per_output(values: list[str] | None, default: float, flag: str) -> tuple[float, dict[str, float]]:
    """Polygraphy-style tolerances: `1e-3` (all outputs) and/or `logits:1e-2` (one output)."""
    per: dict[str, float] = {}
    for v in values or []:
        name, sep, num = v.rpartition(":")
        try:
            x = float(num)
        except ValueError:
            raise OnnxfuseError.of(codes.USAGE, f"{flag} '{v}' must be a number or name:number") from None
        if sep:
            per[name] = x
        else:
            default = x
    return default, per


def load_npz(path: str, inputs: list[IOInfo]) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            feeds = {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise OnnxfuseError.of(codes.FILE_NOT_FOUND, "no such inputs file", file=path) from None
    except (OSError, ValueError) as e:
        raise OnnxfuseError.of(codes.FILE_UNREADABLE, f"cannot read the inputs as .npz: {e}", file=path) from None
    missing = [i.name for i in inputs if i.name not in feeds]
    if missing:
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"the inputs file has no array for {', '.join(missing)}",
                               file=path, hint=f"it holds {', '.join(feeds) or 'nothing'}")
    return {i.name: feeds[i.name] for i in inputs}


def concrete_shape(info: IOInfo, shapes: dict[str, list[int]], dims: dict[str, int]) -> list[int]:
    if info.name in shapes:
        return shapes[info.name]
    if info.shape is None:
        raise OnnxfuseError.of(codes.USAGE, f"input '{info.name}' has no declared shape",
                               tensor=info.name, hint=f"give it: --shape {info.name}:1x16")
    out = []
    for i, d in enumerate(info.shape):
        if isinstance(d, int):
            out.append(d)
        elif d in dims:
            out.append(dims[d])
        else:
            raise OnnxfuseError.of(
                codes.USAGE, f"input '{info.name}' has a symbolic dimension {i} ('{d or '?'}')", tensor=info.name,
                hint=f"bind it: --shape {info.name}:" + "x".join(str(x) if isinstance(x, int) else "N" for x in info.shape)
                + (f" or --shape {d}=N" if d else ""),
            )
    return out


def index_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """For graph inputs used as Gather indices into a constant table: the table's size on that axis."""
    inits = {t.name: t for t in model.graph.initializer}
    bounds: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[0] in inits:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            dims = list(inits[node.input[0]].dims)
            if dims:
                bounds[node.input[1]] = min(bounds.get(node.input[1], 1 << 62), dims[axis % len(dims)])
        if node.op_type == "DequantGather" and len(node.input) > 4 and node.input[0] in inits:
            bounds[node.input[4]] = min(bounds.get(node.input[4], 1 << 62), list(inits[node.input[0]].dims)[0])
    # An index reaching the Gather through a DQ of a table: bound by the DQ's data.
    producers = {o: n for n in model.graph.node for o in n.output}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[0] in producers:
            p = producers[node.input[0]]
            if p.op_type == "DequantizeLinear" and p.input[0] in inits and inits[p.input[0]].dims:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                d = list(inits[p.input[0]].dims)
                bounds[node.input[1]] = min(bounds.get(node.input[1], 1 << 62), d[axis % len(d)])
    return bounds


def random_inputs(model: onnx.ModelProto, *, shapes=None, dims=None, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    bounds = index_bounds(model)
    feeds = {}
    for info in graph_inputs(model):
        shape = concrete_shape(info, shapes or {}, dims or {})
        dtype = info.np_dtype
        if dtype is None:
            raise OnnxfuseError.of(codes.USAGE, f"input '{info.name}' has type {info.type}, which verify cannot generate",
                                   tensor=info.name, hint="pass --inputs FILE.npz")
        if dtype.kind == "b":
            feeds[info.name] = rng.random(shape) < 0.5
        elif dtype.kind in "iu":
            high = bounds.get(info.name, 16)
            feeds[info.name] = rng.integers(0, max(high, 1), size=shape).astype(dtype)
        else:
            feeds[info.name] = rng.standard_normal(shape).astype(np.float32).astype(dtype)
    return feeds
