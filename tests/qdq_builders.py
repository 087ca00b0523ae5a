"""Small hand-built Q/DQ models (onnx.helper) and an independent NumPy reference of their math.

The reference never uses onnxfuse: codes decode through ml_dtypes casts, blocks broadcast with
np.repeat, and matmuls run in float64. Other helpers may import this module read-only.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# element name -> (ml_dtypes dtype, TensorProto type, is_float, opset needed)
ELEMENTS = {
    "int4": (ml_dtypes.int4, TensorProto.INT4, False, 21),
    "uint4": (ml_dtypes.uint4, TensorProto.UINT4, False, 21),
    "int2": (ml_dtypes.int2, TensorProto.INT2, False, 25),
    "uint2": (ml_dtypes.uint2, TensorProto.UINT2, False, 25),
    "int8": (np.int8, TensorProto.INT8, False, 21),
    "uint8": (np.uint8, TensorProto.UINT8, False, 21),
    "float8e4m3fn": (ml_dtypes.float8_e4m3fn, TensorProto.FLOAT8E4M3FN, True, 21),
    "float8e5m2": (ml_dtypes.float8_e5m2, TensorProto.FLOAT8E5M2, True, 21),
    "float4e2m1": (ml_dtypes.float4_e2m1fn, TensorProto.FLOAT4E2M1, True, 23),
    "float6e2m3": (ml_dtypes.float6_e2m3fn, TensorProto.FLOAT6E2M3, True, 28),
    "float6e3m2": (ml_dtypes.float6_e3m2fn, TensorProto.FLOAT6E3M2, True, 28),
}
SCALES = {
    "float32": (np.float32, TensorProto.FLOAT, 21),
    "float16": (np.float16, TensorProto.FLOAT16, 21),
    "bfloat16": (ml_dtypes.bfloat16, TensorProto.BFLOAT16, 21),
    "float8e8m0": (ml_dtypes.float8_e8m0fnu, TensorProto.FLOAT8E8M0, 24),
}
FLOATS = {"float32": (np.float32, TensorProto.FLOAT), "float16": (np.float16, TensorProto.FLOAT16)}


def random_codes(element: str, shape, rng: np.random.Generator) -> np.ndarray:
    """Finite random values of the element type (every finite code is equally likely)."""
    dtype = ELEMENTS[element][0]
    info_bits = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2, "float4e2m1": 4, "float6e2m3": 6, "float6e3m2": 6}
    bits = info_bits.get(element, 8)
    if not ELEMENTS[element][2]:
        lo, hi = int(ml_dtypes.iinfo(dtype).min), int(ml_dtypes.iinfo(dtype).max)
        return rng.integers(lo, hi + 1, size=shape).astype(dtype)
    raw = rng.integers(0, 2**bits, size=shape).astype(np.uint8)
    values = raw.view(dtype).copy()  # ml_dtypes keeps one sub-byte code per byte, in the low bits
    values[~np.isfinite(values.astype(np.float32))] = dtype(1.0)
    return values


def random_scales(fmt: str, shape, rng: np.random.Generator, *, lo: float = 2.0**-6, hi: float = 2.0**-2) -> np.ndarray:
    """Positive scales exactly representable in `fmt` (powers of two for E8M0)."""
    dtype = SCALES[fmt][0] if fmt in SCALES else ml_dtypes.float8_e4m3fn
    if fmt == "float8e8m0":
        exps = rng.integers(int(np.log2(lo)), int(np.log2(hi)) + 1, size=shape)
        return np.exp2(exps).astype(np.float32).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(np.float32).astype(dtype)


def block_expand(scale: np.ndarray, axis: int, block_size: int, length: int) -> np.ndarray:
    return np.repeat(scale, block_size, axis=axis).take(np.arange(length), axis=axis)


def reference_dequantize(codes, scale, zero_point=None, *, axis: int, block_size: int, global_scale=None) -> np.ndarray:
    """float64 values of a blocked DequantizeLinear, decoded independently of onnxfuse."""
    x = np.asarray(codes).astype(np.float64)
    s = np.asarray(scale).astype(np.float32).astype(np.float64)
    if global_scale is not None:
        s = s * float(np.float32(global_scale))
    s = block_expand(s, axis, block_size, x.shape[axis])
    if zero_point is not None:
        x = x - block_expand(np.asarray(zero_point).astype(np.float64), axis, block_size, x.shape[axis])
    return x * s


@dataclasses.dataclass
class QuantWeight:
    codes: np.ndarray
    scale: np.ndarray  # the block scale (inner E4M3 codes for two-level)
    zero_point: np.ndarray | None
    axis: int
    block_size: int
    element: str
    scale_format: str
    global_scale: float | None = None

    def dequantized(self) -> np.ndarray:
        return reference_dequantize(self.codes, self.scale, self.zero_point, axis=self.axis,
                                    block_size=self.block_size, global_scale=self.global_scale)


def make_weight(element: str, shape, *, axis: int, block_size: int, scale_format: str = "float16",
                zero_point: bool = False, two_level: bool = False, seed: int = 0) -> QuantWeight:
    rng = np.random.default_rng(seed)
    codes = random_codes(element, shape, rng)
    sshape = list(shape)
    sshape[axis] = -(-shape[axis] // block_size)
    if two_level:
        scale = rng.uniform(0.5, 8, size=sshape).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
        return QuantWeight(codes, scale, None, axis, block_size, element, "float8e4m3fn", global_scale=0.0123)
    scale = random_scales(scale_format, sshape, rng)
    zp = random_codes(element, sshape, rng) if zero_point else None
    return QuantWeight(codes, scale, zp, axis, block_size, element, scale_format)


def opset_for(w: QuantWeight) -> int:
    scale_opset = SCALES.get(w.scale_format, (None, None, 21))[2]
    return max(ELEMENTS[w.element][3], scale_opset, 21)


def weight_dq_nodes(w: QuantWeight, name: str, out: str, *, output_dtype: int | None = None):
    """(nodes, initializers) producing `out` = DQ(weight), two-level when w.global_scale is set."""
    inits = [numpy_helper.from_array(w.codes, f"{name}_q")]
    nodes = []
    if w.global_scale is not None:
        inits.append(numpy_helper.from_array(w.scale, f"{name}_bs"))
        inits.append(numpy_helper.from_array(np.array(w.global_scale, np.float32), f"{name}_gs"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_bs", f"{name}_gs"], [f"{name}_s"], name=f"{name}_dq_scale"))
    else:
        inits.append(numpy_helper.from_array(w.scale, f"{name}_s"))
    inputs = [f"{name}_q", f"{name}_s"]
    if w.zero_point is not None:
        inits.append(numpy_helper.from_array(w.zero_point, f"{name}_zp"))
        inputs.append(f"{name}_zp")
    attrs = {"axis": w.axis, "block_size": w.block_size}
    if output_dtype is not None:
        attrs["output_dtype"] = output_dtype
    nodes.append(helper.make_node("DequantizeLinear", inputs, [out], name=f"{name}_dq", **attrs))
    return nodes, inits


def make_model(nodes, inits, inputs, outputs, opset: int, extra_opsets=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    imports = [helper.make_opsetid("", opset), *[helper.make_opsetid(d, v) for d, v in extra_opsets]]
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 11
    return model


def matmul_model(w: QuantWeight, *, act: str = "float32", transpose: bool = False, cast: bool = False,
                 lead=("M",), output_dtype: int | None = None):
    """A [..., K] @ DQ(W) [-> Transpose] [-> Cast] model; returns (model, effective [K, N] float64 weight)."""
    np_act, act_type = FLOATS[act]
    scale_type = TensorProto.FLOAT if w.global_scale is not None else SCALES[w.scale_format][1]
    if output_dtype is None and w.scale_format == "float8e8m0":
        output_dtype = act_type  # E8M0 scales need an explicit output type
    dq_type = output_dtype or scale_type
    cast = cast or dq_type != act_type  # a valid model casts the weight to the activations' type
    nodes, inits = weight_dq_nodes(w, "w", "w_dq", output_dtype=output_dtype)
    current = "w_dq"
    W = w.dequantized()
    if transpose:
        nodes.append(helper.make_node("Transpose", [current], ["w_t"], perm=[1, 0], name="w_transpose"))
        current, W = "w_t", W.T
    if cast:
        nodes.append(helper.make_node("Cast", [current], ["w_c"], to=act_type, name="w_cast"))
        current = "w_c"
    K, N = W.shape
    nodes.append(helper.make_node("MatMul", ["a", current], ["y"], name="matmul"))
    model = make_model(
        nodes, inits,
        [helper.make_tensor_value_info("a", act_type, [*lead, K])],
        [helper.make_tensor_value_info("y", act_type, [*lead, N])],
        opset_for(w),
    )
    return model, W


def run_ort(model: onnx.ModelProto | bytes, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    blob = model if isinstance(model, bytes) else model.SerializeToString()
    opts = ort.SessionOptions()
    # The fused model is what runs: no ORT graph rewrites that would change the semantics we test.
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def count_ops(model, op_type: str, domain: str | None = None) -> int:
    graph = model.graph
    nodes = graph.node if hasattr(graph, "node") else list(graph)
    return sum(1 for n in nodes if n.op_type == op_type and (domain is None or (n.domain or "") == domain))


def matmul_tolerance(a: np.ndarray, W: np.ndarray, out_dtype) -> np.ndarray:
    """Per-element bound for a float32-accumulated dot product against the float64 reference.

    Float32 accumulation over K terms errs by at most ~K * 2^-24 * sum|a||w| (we take K*2^-23 for the
    decode rounding of scale*code as well); a float16 output adds half an ulp of |y| (2^-11 relative)
    and float16 inputs/weights another 2^-11 per term.
    """
    K = W.shape[0]
    mag = np.abs(a.astype(np.float64)) @ np.abs(W)
    bound = mag * (K * 2.0**-23)
    if np.dtype(out_dtype) == np.float16:
        bound = bound + mag * 2.0**-10 + 2.0**-24
    return bound + 1e-30
