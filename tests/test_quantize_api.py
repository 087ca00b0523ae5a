"""onnxfuse.quantize: every scheme, layout and weight slot, checked against the formats layer.

The dequantized weights are evaluated from the written graph by onnx's ReferenceEvaluator (an
implementation independent of onnxfuse) and must equal Scheme.quantize(w).dequantize() bit for
bit: both decode the same codes and scales exactly, so no tolerance is needed.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator

import onnxfuse
from onnxfuse import codes, formats
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.quantize_api import quantize_with_summary

from models.recipes.bert import BertConfig, build_bert
from models.recipes.llama import LlamaConfig, build_llama
from models.recipes.mlp import MlpConfig, build_mlp

SCHEMES = ["int4", "uint4", "int8", "int2", "fp8", "mxfp8", "mxfp6", "mxfp4", "nvfp4"]
FORMAT_SCHEME = {"mxfp6": "mxfp6e2m3"}
MIN_OPSET = {"int4": 21, "uint4": 21, "int8": 21, "int2": 25, "fp8": 21, "mxfp8": 24, "mxfp6": 28, "mxfp4": 24, "nvfp4": 23}
# Types onnxruntime 1.32 CPU runs in a DequantizeLinear (with float32/float16 scales).
ORT_RUNS = {"int4", "uint4", "int8", "fp8"}

SMALL_MLP = MlpConfig(d_in=80, d_hidden=96, d_out=40)  # 80 and 40 are not multiples of 32: ragged blocks


def _proto(model: ir.Model) -> onnx.ModelProto:
    return ir.to_proto(model)


def _constant_subgraph(proto: onnx.ModelProto, tensor: str) -> onnx.ModelProto:
    """The nodes and initializers that compute constant `tensor`, as a model with it as the only output."""
    producers = {o: n for n in proto.graph.node for o in n.output}
    inits = {t.name: t for t in proto.graph.initializer}
    nodes, used, todo = [], set(), [tensor]
    while todo:
        name = todo.pop()
        if name in inits:
            used.add(name)
        elif name in producers and producers[name] not in nodes:
            nodes.append(producers[name])
            todo += [i for i in producers[name].input if i]
    graph = onnx.helper.make_graph(nodes[::-1], "weight", [], [onnx.helper.make_empty_tensor_value_info(tensor)],
                                   [inits[n] for n in sorted(used)])
    sub = onnx.helper.make_model(graph, opset_imports=proto.opset_import, ir_version=proto.ir_version)
    inferred = onnx.shape_inference.infer_shapes(sub)
    return inferred if inferred.graph.output[0].type.tensor_type.elem_type else sub


def _tensor_value(proto: onnx.ModelProto, tensor: str) -> np.ndarray:
    """The value of a constant tensor of the graph, computed by onnx.reference on the subgraph producing it."""
    return ReferenceEvaluator(_constant_subgraph(proto, tensor)).run(None, {})[0]


def _weights(float_model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: onnx.numpy_helper.to_array(t) for t in float_model.graph.initializer}


def _consumer_input(proto: onnx.ModelProto, node_name: str, index: int) -> str:
    return next(n for n in proto.graph.node if n.name == node_name).input[index]


def _expected(w: np.ndarray, scheme: str, *, transpose: bool, axis: int, block_size=None, scale=None) -> np.ndarray:
    stored = np.ascontiguousarray(w.T if transpose else w).astype(np.float32)
    if scale is None and FORMAT_SCHEME.get(scheme, scheme) not in ("nvfp4",) and not scheme.startswith("mx"):
        scale = formats.scale_format({np.dtype(np.float32): "float32", np.dtype(np.float16): "float16"}[w.dtype])
    qt = formats.scheme(FORMAT_SCHEME.get(scheme, scheme)).quantize(stored, axis, block_size, scale)
    out = qt.dequantize(TensorProto.FLOAT)
    return (out.T if transpose else out).astype(w.dtype)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_writes_a_valid_model_whose_weights_equal_the_reference(scheme):
    float_model = build_mlp(SMALL_MLP)
    model, summary = quantize_with_summary(float_model, scheme)
    proto = _proto(model)
    onnx.checker.check_model(proto, full_check=True)
    errors = [d for d in onnxfuse.check(proto) if d.is_error]
    assert not errors, errors
    assert proto.opset_import[0].version == MIN_OPSET[scheme] and summary.opset == MIN_OPSET[scheme]
    assert len(summary.quantized) == 3
    weights = _weights(float_model)
    transpose = scheme == "nvfp4"  # the ModelOpt layout is the NVFP4 default
    for fc in ("fc1", "fc2", "fc3"):
        got = _tensor_value(proto, _consumer_input(proto, f"{fc}/MatMul", 1))
        want = _expected(weights[f"{fc}.weight"], scheme, transpose=transpose, axis=1 if transpose else 0)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert not any(t.name.endswith(".weight") for t in proto.graph.initializer), "float weights must be dropped"


@pytest.mark.parametrize("scheme", sorted(ORT_RUNS))
def test_onnxruntime_decodes_the_same_weights(scheme):
    """A second, independent decoder for the types onnxruntime CPU runs."""
    proto = _proto(onnxfuse.quantize(build_mlp(SMALL_MLP), scheme))
    tensor = _consumer_input(proto, "fc2/MatMul", 1)
    sub = _constant_subgraph(proto, tensor)
    got = ort.InferenceSession(sub.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]
    np.testing.assert_array_equal(got, _tensor_value(proto, tensor))


def test_nvfp4_is_modelopts_two_level_chain_with_a_cast_in_fp16_models():
    proto = _proto(onnxfuse.quantize(build_mlp(MlpConfig(d_in=64, d_hidden=64, d_out=32, dtype=TensorProto.FLOAT16)), "nvfp4"))
    producers = {o: n for n in proto.graph.node for o in n.output}
    inits = {t.name: t for t in proto.graph.initializer}
    mm = next(n for n in proto.graph.node if n.name == "fc1/MatMul")
    cast = producers[mm.input[1]]
    transpose = producers[cast.input[0]]
    outer = producers[transpose.input[0]]
    inner = producers[outer.input[1]]
    assert [cast.op_type, transpose.op_type, outer.op_type, inner.op_type] == ["Cast", "Transpose", "DequantizeLinear", "DequantizeLinear"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in outer.attribute}
    assert attrs == {"axis": -1, "block_size": 16}
    assert inits[outer.input[0]].data_type == TensorProto.FLOAT4E2M1 and list(inits[outer.input[0]].dims) == [64, 64]
    assert inits[inner.input[0]].data_type == TensorProto.FLOAT8E4M3FN and list(inits[inner.input[0]].dims) == [64, 4]
    assert inits[inner.input[1]].data_type == TensorProto.FLOAT and list(inits[inner.input[1]].dims) == []
    assert onnx.helper.get_attribute_value(cast.attribute[0]) == TensorProto.FLOAT16


def test_mx_scales_are_e8m0_with_output_dtype():
    proto = _proto(onnxfuse.quantize(build_mlp(MlpConfig(d_in=64, d_hidden=64, d_out=32, dtype=TensorProto.FLOAT16)), "mxfp4"))
    inits = {t.name: t for t in proto.graph.initializer}
    dq = next(n for n in proto.graph.node if n.op_type == "DequantizeLinear")
    assert inits[dq.input[1]].data_type == TensorProto.FLOAT8E8M0
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in dq.attribute}
    assert attrs == {"axis": 0, "block_size": 32, "output_dtype": TensorProto.FLOAT16}


@pytest.mark.parametrize("layout,transposed", [("kn", False), ("nk", True)])
def test_layouts(layout, transposed):
    float_model = build_mlp(SMALL_MLP)
    proto = _proto(onnxfuse.quantize(float_model, "int4", layout=layout, block_size=16))
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    assert ops["Transpose"] == (3 if transposed else 0)
    w = _weights(float_model)["fc1.weight"]
    got = _tensor_value(proto, _consumer_input(proto, "fc1/MatMul", 1))
    np.testing.assert_array_equal(got, _expected(w, "int4", transpose=transposed, axis=1 if transposed else 0, block_size=16))


@pytest.mark.parametrize("scale_dtype", ["float32", "float16", "bfloat16"])
def test_scale_dtype_choice(scale_dtype):
    float_model = build_mlp(SMALL_MLP)
    proto = _proto(onnxfuse.quantize(float_model, "int4", scale_dtype=scale_dtype))
    onnx.checker.check_model(proto, full_check=True)
    dq = next(n for n in proto.graph.node if n.op_type == "DequantizeLinear")
    scale = next(t for t in proto.graph.initializer if t.name == dq.input[1])
    assert scale.data_type == formats.scale_format(scale_dtype).onnx_type
    # a float32 model with non-float32 scales needs output_dtype, so opset 23
    assert proto.opset_import[0].version == (21 if scale_dtype == "float32" else 23)
    got = _tensor_value(proto, _consumer_input(proto, "fc1/MatMul", 1))
    want = _expected(_weights(float_model)["fc1.weight"], "int4", transpose=False, axis=0, scale=formats.scale_format(scale_dtype))
    np.testing.assert_array_equal(got, want)


def test_tied_embedding_is_quantized_once_for_gather_and_lm_head():
    cfg = LlamaConfig(vocab=64, hidden=32, layers=1, heads=2, kv_heads=1, intermediate=48, max_positions=16)
    float_model = build_llama(cfg)
    proto = _proto(onnxfuse.quantize(float_model, "int4", block_size=16))
    onnx.checker.check_model(proto, full_check=True)
    gather = next(n for n in proto.graph.node if n.name == "model.embed_tokens/Gather")
    head_t = next(n for n in proto.graph.node if n.name == "lm_head/Transpose")
    assert gather.input[0] == head_t.input[0], "one dequantized table feeds both"
    table = [t for t in proto.graph.initializer if t.name.startswith("model.embed_tokens.weight")]
    assert sorted(t.name for t in table) == ["model.embed_tokens.weight_quantized", "model.embed_tokens.weight_scale"]
    got = _tensor_value(proto, gather.input[0])
    want = _expected(_weights(float_model)["model.embed_tokens.weight"], "int4", transpose=False, axis=1, block_size=16)
    np.testing.assert_array_equal(got, want)


def test_excluding_the_lm_head_keeps_a_float_table_for_it():
    cfg = LlamaConfig(vocab=64, hidden=32, layers=1, heads=2, kv_heads=1, intermediate=48, max_positions=16)
    model, summary = quantize_with_summary(build_llama(cfg), "int8", block_size=16, exclude=["lm_head*"])
    proto = _proto(model)
    gather = next(n for n in proto.graph.node if n.name == "model.embed_tokens/Gather")
    head_t = next(n for n in proto.graph.node if n.name == "lm_head/Transpose")
    assert head_t.input[0] == "model.embed_tokens.weight"  # float, as the user asked
    assert gather.input[0] != head_t.input[0]
    assert any(s.reason == "excluded by the user" for s in summary.skipped)


def test_op_types_restricts_the_slots():
    proto = _proto(onnxfuse.quantize(build_llama(LlamaConfig(vocab=64, hidden=32, layers=1, heads=2, kv_heads=1,
                                                             intermediate=48, max_positions=16)), "int4", op_types=["Gather"]))
    gather = next(n for n in proto.graph.node if n.name == "model.embed_tokens/Gather")
    head_t = next(n for n in proto.graph.node if n.name == "lm_head/Transpose")
    assert gather.input[0] != "model.embed_tokens.weight" and head_t.input[0] == "model.embed_tokens.weight"
    # every Gather table is a candidate: the rotary cos/sin tables too (the zoo excludes them by name)
    dq = sorted(n.name for n in proto.graph.node if n.op_type == "DequantizeLinear")
    assert dq == ["model.embed_tokens.weight/DequantizeLinear", "model.rotary.cos/DequantizeLinear", "model.rotary.sin/DequantizeLinear"]


def test_gemm_transb_weights_are_blocked_along_k_without_transpose():
    cfg = BertConfig(vocab=64, hidden=32, layers=1, heads=2, intermediate=64, max_positions=16, labels=4)
    float_model = build_bert(cfg)
    proto = _proto(onnxfuse.quantize(float_model, "int8", block_size=16, op_types=["Gemm"]))
    onnx.checker.check_model(proto, full_check=True)
    gemm = next(n for n in proto.graph.node if n.name == "classifier/Gemm")
    dq = next(n for n in proto.graph.node if n.output[0] == gemm.input[1])
    assert dq.op_type == "DequantizeLinear" and onnx.helper.get_attribute_value(dq.attribute[0]) == 1  # axis 1 of W[N, K]
    got = _tensor_value(proto, gemm.input[1])
    np.testing.assert_array_equal(got, _expected(_weights(float_model)["classifier.weight"], "int8", transpose=False, axis=1, block_size=16))


def test_quantized_model_runs_and_stays_close_to_float():
    """int8 RTN with blocks of 32: output cosine similarity to the float MLP well above 0.999."""
    float_model = build_mlp(SMALL_MLP)
    proto = _proto(onnxfuse.quantize(float_model, "int8", block_size=32))
    x = np.random.default_rng(0).standard_normal((4, SMALL_MLP.d_in), dtype=np.float32)
    ref = ort.InferenceSession(float_model.SerializeToString()).run(None, {"x": x})[0].ravel()
    got = ort.InferenceSession(proto.SerializeToString()).run(None, {"x": x})[0].ravel()
    assert ref @ got / np.linalg.norm(ref) / np.linalg.norm(got) > 0.999


def test_opset_is_converted_when_ops_change(tmp_path):
    """llama's Reshape/Transpose/Cast... change schema between 21 and 25: the converter runs, the model stays valid."""
    cfg = LlamaConfig(vocab=64, hidden=32, layers=1, heads=2, kv_heads=1, intermediate=48, max_positions=16)
    float_model = build_llama(cfg)
    proto = _proto(onnxfuse.quantize(float_model, "int2"))
    assert proto.opset_import[0].version == 25
    onnx.checker.check_model(proto, full_check=True)
    feeds = {"input_ids": np.array([[1, 2, 3]]), "position_ids": np.array([[0, 1, 2]])}
    ref = ort.InferenceSession(float_model.SerializeToString()).run(None, feeds)[0]
    got = ReferenceEvaluator(proto).run(None, feeds)[0]
    assert got.shape == ref.shape and np.isfinite(got).all()


def test_external_data_input_is_read_through_its_map_and_left_unchanged(tmp_path):
    float_model = build_mlp(SMALL_MLP)
    w = _weights(float_model)["fc1.weight"]
    src = tmp_path / "mlp.onnx"
    onnx.save_model(float_model, src, save_as_external_data=True, location="mlp.onnx.data", size_threshold=0)
    before = (src.read_bytes(), (tmp_path / "mlp.onnx.data").read_bytes())
    out = tmp_path / "mlp_int4.onnx"
    onnxfuse.quantize(str(src), "int4", output_path=out)
    assert (src.read_bytes(), (tmp_path / "mlp.onnx.data").read_bytes()) == before
    proto = onnx.load(out)
    onnx.checker.check_model(proto, full_check=True)
    got = _tensor_value(proto, _consumer_input(proto, "fc1/MatMul", 1))
    np.testing.assert_array_equal(got, _expected(w, "int4", transpose=False, axis=0))


@pytest.mark.parametrize(
    "kwargs,code",
    [
        (dict(scheme="int5"), codes.SCHEME_UNKNOWN),
        (dict(scheme="mxfp4", scale_dtype="float16"), codes.SCALE_DTYPE_ILLEGAL),
        (dict(scheme="nvfp4", scale_dtype="float32"), codes.SCALE_DTYPE_ILLEGAL),
        (dict(scheme="int4", scale_dtype="float8e8m0"), codes.SCALE_DTYPE_ILLEGAL),
        (dict(scheme="int4", block_size=0), codes.USAGE),
        (dict(scheme="int4", layout="mn"), codes.USAGE),
        (dict(scheme="int4", op_types=["Conv"]), codes.USAGE),
        (dict(scheme="int4", exclude=["fc*"]), codes.NOTHING_TO_QUANTIZE),
    ],
)
def test_user_errors_are_onnxfuse_errors(kwargs, code):
    with pytest.raises(OnnxfuseError) as err:
        onnxfuse.quantize(build_mlp(SMALL_MLP), **kwargs)
    assert err.value.diagnostics[0].code == code


def test_missing_input_file_names_it(tmp_path):
    with pytest.raises(OnnxfuseError) as err:
        onnxfuse.quantize(str(tmp_path / "absent.onnx"), "int4")
    assert err.value.diagnostics[0].code == codes.FILE_NOT_FOUND


def test_opset_conversion_keeps_external_data_weights(tmp_path):
    """The version-converter path serializes the graph; external tensors must stay references that still resolve."""
    cfg = LlamaConfig(vocab=64, hidden=32, layers=1, heads=2, kv_heads=1, intermediate=48, max_positions=16)
    float_model = build_llama(cfg)
    in_memory = _proto(onnxfuse.quantize(float_model, "int2"))
    onnx.save_model(float_model, tmp_path / "f.onnx", save_as_external_data=True, location="f.data", size_threshold=0)
    onnxfuse.quantize(str(tmp_path / "f.onnx"), "int2", output_path=tmp_path / "q.onnx")
    feeds = {"input_ids": np.array([[1, 2, 3]]), "position_ids": np.array([[0, 1, 2]])}
    np.testing.assert_array_equal(ReferenceEvaluator(str(tmp_path / "q.onnx")).run(None, feeds)[0],
                                  ReferenceEvaluator(in_memory).run(None, feeds)[0])


def test_output_path_equal_to_input_is_refused_before_any_work(tmp_path):
    src = tmp_path / "mlp.onnx"
    onnx.save_model(build_mlp(SMALL_MLP), src)
    before = src.read_bytes()
    with pytest.raises(OnnxfuseError) as err:
        onnxfuse.quantize(str(src), "int4", output_path=src)
    assert err.value.diagnostics[0].code == codes.OUTPUT_PATH_INVALID and src.read_bytes() == before
