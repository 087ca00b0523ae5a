"""Quantized models shaped the way real exporters write them (DESIGN.md, "How real exports look").

- ModelOpt NVFP4:  weights DQ(e4m3, fp32 scalar) -> DQ(fp4 [N,K], axis -1, block 16) -> Transpose -> Cast(fp16)
                   -> MatMul; activations trt::TRT_FP4DynamicQuantize -> the same two DQs -> Cast(fp16).
                   The LM head and embeddings stay fp16, as ModelOpt leaves them.
- ModelOpt MXFP8:  trt::TRT_MXFP8DequantizeLinear(fp8 [N,K], uint8 E8M0 scale, axis -1, block 32) -> Transpose
                   -> MatMul; activations trt::TRT_MXFP8DynamicQuantize -> trt::TRT_MXFP8DequantizeLinear.
- ModelOpt INT4:   DQ(int4 [K,N], axis 0, block 128, fp16 scale) -> MatMul (AWQ-style export, RTN here).
- onnxruntime:     the real `matmul_nbits_quantizer` in QDQ mode: DQ(uint4 [K,N], axis 0, block 32, zero point).
- AMD Quark:       com.amd.quark::MXQuantizeDequantize on every MatMul weight and activation (fake quantization).
- Static Q/DQ:     activation QuantizeLinear -> DequantizeLinear (int8, calibrated per-tensor scale) in front
                   of each MatMul, int8 block weights.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto

TRT_DOMAIN = "trt"
QUARK_DOMAIN = "com.amd.quark"
E4M3_MAX = 448.0
E2M1_MAX = 6.0


# -- graph helpers -------------------------------------------------------------------------
def _const(name: str, array: np.ndarray, dtype: ir.DataType | None = None) -> ir.Value:
    t = ir.Tensor(np.array(array, order="C"), dtype=dtype, name=name)  # (ascontiguousarray makes scalars [1])
    return ir.Value(name=name, shape=t.shape, type=ir.TensorType(t.dtype), const_value=t)


def _node(op: str, inputs, name: str, *, domain: str = "", outputs: int = 1, **attrs) -> ir.Node:
    node = ir.Node(domain, op, inputs, ir.convenience.convert_attributes(attrs), num_outputs=outputs, name=name)
    for i, out in enumerate(node.outputs):
        out.name = f"{name}_output" + (f"_{i}" if outputs > 1 else "")
    return node


def _quantized_matmuls(graph: ir.Graph) -> list[ir.Node]:
    """MatMuls whose weight comes from a dequantization (directly or through Transpose/Cast)."""
    found = []
    for node in graph:
        if node.op_type != "MatMul" or node.inputs[1] is None:
            continue
        producer = node.inputs[1].producer()
        while producer is not None and producer.op_type in ("Transpose", "Cast"):
            producer = producer.inputs[0].producer()
        if producer is not None and producer.op_type in ("DequantizeLinear", "TRT_MXFP8DequantizeLinear"):
            found.append(node)
    return found


def _insert_before_input(graph: ir.Graph, consumer: ir.Node, nodes: list[ir.Node], inits=()) -> None:
    for v in inits:
        graph.register_initializer(v)
    graph.insert_before(consumer, nodes)
    consumer.replace_input_with(0, nodes[-1].outputs[0])


def activation_values(float_model: onnx.ModelProto, feeds: dict, tensors: list[str]) -> dict[str, np.ndarray]:
    """Calibration: the named intermediate tensors on one batch (onnxruntime CPU), as float32."""
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(float_model)
    known = {o.name for o in probe.graph.output}
    for t in tensors:
        if t not in known:
            probe.graph.output.append(onnx.helper.make_empty_tensor_value_info(t))
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    return {t: v.astype(np.float32) for t, v in zip(tensors, sess.run(tensors, feeds))}


def activation_amax(float_model: onnx.ModelProto, feeds: dict, tensors: list[str]) -> dict[str, float]:
    """Calibration: max |x| of the named intermediate tensors on one batch."""
    return {t: float(np.max(np.abs(v))) for t, v in activation_values(float_model, feeds, tensors).items()}


# -- ModelOpt ------------------------------------------------------------------------------
def add_trt_fp4_activations(model: ir.Model, amax: dict[str, float]) -> ir.Model:
    """ModelOpt's NVFP4 activation quantizer on the input of every quantized MatMul."""
    graph = model.graph
    model.opset_imports[TRT_DOMAIN] = 1
    for mm in _quantized_matmuls(graph):
        x = mm.inputs[0]
        base = mm.name.rsplit("/", 1)[0] + "/input_quantizer"
        g = _const(f"{base}.global_scale", np.asarray(amax[x.name] / (E2M1_MAX * E4M3_MAX), dtype=np.float32))
        q = _node("TRT_FP4DynamicQuantize", [x, g], f"{base}/TRT_FP4DynamicQuantize", domain=TRT_DOMAIN, outputs=2,
                  axis=-1, block_size=16, scale_type=TensorProto.FLOAT8E4M3FN)
        q.outputs[0].type, q.outputs[1].type = ir.TensorType(ir.DataType.FLOAT4E2M1), ir.TensorType(ir.DataType.FLOAT8E4M3FN)
        s = _node("DequantizeLinear", [q.outputs[1], g], f"{base}/scale/DequantizeLinear")
        d = _node("DequantizeLinear", [q.outputs[0], s.outputs[0]], f"{base}/DequantizeLinear", axis=-1, block_size=16)
        nodes = [q, s, d]
        if x.dtype not in (None, ir.DataType.FLOAT):
            nodes.append(_node("Cast", [d.outputs[0]], f"{base}/Cast", to=int(x.dtype)))
        _insert_before_input(graph, mm, nodes, [g])
    return model


def to_trt_mxfp8(model: ir.Model, activations: bool = True) -> ir.Model:
    """Rewrite standard MXFP8 DQs into ModelOpt's trt::TRT_MXFP8DequantizeLinear with uint8 E8M0 scales."""
    graph = model.graph
    model.opset_imports[TRT_DOMAIN] = 1
    for node in list(graph):
        scale = node.inputs[1] if node.op_type == "DequantizeLinear" else None
        if scale is None or scale.dtype != ir.DataType.FLOAT8E8M0:
            continue
        raw = _const(scale.name + "_uint8", scale.const_value.numpy().view(np.uint8), ir.DataType.UINT8)
        graph.register_initializer(raw)
        attrs = {a.name: a.value for a in node.attributes.values()}
        axis = attrs.get("axis", 1)
        trt = _node("TRT_MXFP8DequantizeLinear", [node.inputs[0], raw], node.name.replace("DequantizeLinear", "TRT_MXFP8DequantizeLinear"),
                    domain=TRT_DOMAIN, axis=-1 if axis == 1 else axis, block_size=attrs["block_size"], output_dtype=attrs["output_dtype"])
        graph.insert_before(node, trt)
        node.outputs[0].replace_all_uses_with(trt.outputs[0])
        graph.remove(node, safe=True)
        graph.initializers.pop(scale.name)
    if activations:
        for mm in _quantized_matmuls(graph):
            x = mm.inputs[0]
            base = mm.name.rsplit("/", 1)[0] + "/input_quantizer"
            q = _node("TRT_MXFP8DynamicQuantize", [x], f"{base}/TRT_MXFP8DynamicQuantize", domain=TRT_DOMAIN, outputs=2,
                      axis=-1, block_size=32, output_dtype=TensorProto.FLOAT8E4M3FN)
            q.outputs[0].type, q.outputs[1].type = ir.TensorType(ir.DataType.FLOAT8E4M3FN), ir.TensorType(ir.DataType.UINT8)
            d = _node("TRT_MXFP8DequantizeLinear", [q.outputs[0], q.outputs[1]], f"{base}/TRT_MXFP8DequantizeLinear",
                      domain=TRT_DOMAIN, axis=-1, block_size=32, output_dtype=int(x.dtype or ir.DataType.FLOAT))
            _insert_before_input(graph, mm, [q, d])
    return model


# -- onnxruntime's quantizer ---------------------------------------------------------------
def ort_matmul_nbits_qdq(float_model: onnx.ModelProto, block_size: int = 32, symmetric: bool = False) -> onnx.ModelProto:
    """Run onnxruntime's own MatMulNBitsQuantizer in QDQ mode (its Gather path is QOperator-only)."""
    import logging

    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    q = MatMulNBitsQuantizer(
        float_model, bits=4, block_size=block_size, is_symmetric=symmetric,
        quant_format=QuantFormat.QDQ, op_types_to_quantize=("MatMul",),
    )
    q.process()
    return q.model.model


# -- AMD Quark -----------------------------------------------------------------------------
QUARK_ELEMENT = {"mxfp4": "fp4_e2m1", "mxfp6e2m3": "fp6_e2m3", "mxfp6e3m2": "fp6_e3m2", "mxfp8": "fp8_e4m3",
                 "mxfp8e5m2": "fp8_e5m2", "mxint8": "int8"}


def quark_mx_fake_quant(float_model: onnx.ModelProto, scheme: str = "mxfp4", activations: bool = True) -> ir.Model:
    """Quark's MX fake quantization: one MXQuantizeDequantize node on each MatMul weight [K,N] (axis 0,
    Quark's block axis for a weight read as [in, out]) and on each activation (last axis)."""
    model = ir.from_proto(float_model)
    graph = model.graph
    model.opset_imports[QUARK_DOMAIN] = 1
    element = QUARK_ELEMENT[scheme]
    for mm in [n for n in graph if n.op_type == "MatMul" and n.inputs[1] is not None and n.inputs[1].is_initializer()]:
        w = mm.inputs[1]
        base = mm.name.rsplit("/", 1)[0]
        wq = _node("MXQuantizeDequantize", [w], f"{base}/weight_quantizer/MXQuantizeDequantize", domain=QUARK_DOMAIN,
                   element_dtype=element, axis=0, block_size=32, rounding_mode=2)
        graph.insert_before(mm, wq)
        mm.replace_input_with(1, wq.outputs[0])
        if activations:
            rank = len(mm.inputs[0].shape) if mm.inputs[0].shape is not None else 3
            aq = _node("MXQuantizeDequantize", [mm.inputs[0]], f"{base}/input_quantizer/MXQuantizeDequantize", domain=QUARK_DOMAIN,
                       element_dtype=element, axis=rank - 1, block_size=32, rounding_mode=2)
            _insert_before_input(graph, mm, [aq])
    return model


# -- static activation Q/DQ ----------------------------------------------------------------
def add_static_int8_activations(model: ir.Model, amax: dict[str, float]) -> ir.Model:
    """Static per-tensor int8 activation Q/DQ (symmetric, calibrated amax / 127) before each quantized MatMul."""
    graph = model.graph
    for mm in _quantized_matmuls(graph):
        x = mm.inputs[0]
        base = mm.name.rsplit("/", 1)[0] + "/input_quantizer"
        dtype = np.float16 if x.dtype == ir.DataType.FLOAT16 else np.float32
        scale = _const(f"{base}.scale", np.asarray(amax[x.name] / 127.0, dtype=dtype))
        zp = _const(f"{base}.zero_point", np.asarray(0, dtype=np.int8))
        q = _node("QuantizeLinear", [x, scale, zp], f"{base}/QuantizeLinear")
        d = _node("DequantizeLinear", [q.outputs[0], scale, zp], f"{base}/DequantizeLinear")
        _insert_before_input(graph, mm, [q, d], [scale, zp])
    return model


def add_static_fp8_block_activations(model: ir.Model, values: dict[str, np.ndarray], block_size: int = 32) -> ir.Model:
    """Static block-scaled fp8 (e4m3) activation Q/DQ along the last axis: scale = calibrated block amax / 448.

    A static block scale has the activation's full shape with K divided into blocks, so the model
    needs a fixed batch size (here the calibration batch)."""
    from onnxfuse import formats

    graph = model.graph
    for mm in _quantized_matmuls(graph):
        x = mm.inputs[0]
        v = values[x.name]
        base = mm.name.rsplit("/", 1)[0] + "/input_quantizer"
        axis = v.ndim - 1
        blocks = -(-v.shape[axis] // block_size)
        padded = np.zeros(v.shape[:axis] + (blocks * block_size,), np.float32)
        padded[..., : v.shape[axis]] = np.abs(v)
        amax = padded.reshape(v.shape[:axis] + (blocks, block_size)).max(axis=-1)
        scale_np = np.where(amax == 0, 1.0, amax / E4M3_MAX).astype(np.float32)
        scale = _const(f"{base}.scale", scale_np)
        zp = _const(f"{base}.zero_point", np.zeros(scale_np.shape, formats.element_format("float8e4m3fn").np_dtype),
                    ir.DataType.FLOAT8E4M3FN)
        q = _node("QuantizeLinear", [x, scale, zp], f"{base}/QuantizeLinear", axis=axis, block_size=block_size)
        d = _node("DequantizeLinear", [q.outputs[0], scale, zp], f"{base}/DequantizeLinear", axis=axis, block_size=block_size)
        _insert_before_input(graph, mm, [q, d], [scale, zp])
    return model
