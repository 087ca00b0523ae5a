"""The zoo's recipes: valid, deterministic, the patterns they claim, and the committed examples current."""

from __future__ import annotations

import collections
import subprocess
import sys

import numpy as np
import onnx
import pytest

from models import zoo
from models.make_examples import EXAMPLES, write_examples

CI_MODELS = zoo.names(ci_only=True)


@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("zoo")


def _ops(proto: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in proto.graph.node)


@pytest.mark.parametrize("name", CI_MODELS)
def test_every_zoo_model_builds_and_passes_the_checker(name, zoo_dir):
    proto = onnx.load(zoo.build(name, zoo_dir))
    onnx.checker.check_model(proto, full_check=True)


def test_builds_are_deterministic(tmp_path):
    for name in ("llama_toy_int4", "modelopt_nvfp4", "ort_int4_qdq"):
        a = open(zoo.build(name, tmp_path / "a"), "rb").read()
        b = open(zoo.build(name, tmp_path / "b"), "rb").read()
        assert a == b, name


def test_committed_examples_are_current_and_small(tmp_path):
    fresh = write_examples(str(tmp_path))
    for path in fresh:
        committed = zoo.HERE / "examples" / path.rsplit("/", 1)[1]
        assert committed.exists(), f"{committed} missing: run python models/make_examples.py"
        assert committed.read_bytes() == open(path, "rb").read(), f"{committed.name} is stale: run python models/make_examples.py"
        assert committed.stat().st_size < 1024 * 1024
    assert sorted(p.name for p in (zoo.HERE / "examples").glob("*.onnx")) == sorted(EXAMPLES)


# -- the exporter shapes ---------------------------------------------------------------------
def _producers(proto):
    return {o: n for n in proto.graph.node for o in n.output}


def _inits(proto):
    return {t.name: t for t in proto.graph.initializer}


def test_modelopt_nvfp4_shape(zoo_dir):
    proto = onnx.load(zoo.build("modelopt_nvfp4", zoo_dir))
    prod, inits = _producers(proto), _inits(proto)
    mm = next(n for n in proto.graph.node if n.name == "model.layers.0.self_attn.q_proj/MatMul")
    chain = []
    t = mm.input[1]
    while t in prod:
        chain.append(prod[t].op_type)
        t = prod[t].input[0]
    assert chain == ["Cast", "Transpose", "DequantizeLinear"]
    act = [prod[mm.input[0]].op_type, prod[prod[mm.input[0]].input[0]].op_type]
    assert act == ["Cast", "DequantizeLinear"]
    q = next(n for n in proto.graph.node if n.op_type == "TRT_FP4DynamicQuantize")
    assert q.domain == "trt" and q.input[1] in inits and list(inits[q.input[1]].dims) == []
    head = next(n for n in proto.graph.node if n.name == "lm_head/MatMul")
    assert prod[head.input[1]].op_type == "Transpose" and prod[head.input[1]].input[0] == "model.embed_tokens.weight"


def test_modelopt_mxfp8_uses_trt_ops_with_uint8_scales(zoo_dir):
    proto = onnx.load(zoo.build("modelopt_mxfp8", zoo_dir))
    inits = _inits(proto)
    ops = _ops(proto)
    assert ops["DequantizeLinear"] == 0 and ops["trt::TRT_MXFP8DequantizeLinear"] == 28 and ops["trt::TRT_MXFP8DynamicQuantize"] == 14
    weight_dq = [n for n in proto.graph.node if n.op_type == "TRT_MXFP8DequantizeLinear" and n.input[0] in inits]
    assert len(weight_dq) == 14
    for n in weight_dq:
        assert inits[n.input[0]].data_type == onnx.TensorProto.FLOAT8E4M3FN
        assert inits[n.input[1]].data_type == onnx.TensorProto.UINT8
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert attrs == {"axis": -1, "block_size": 32, "output_dtype": onnx.TensorProto.FLOAT16}


def test_modelopt_int4_is_axis0_block128(zoo_dir):
    proto = onnx.load(zoo.build("modelopt_int4", zoo_dir))
    inits = _inits(proto)
    dqs = [n for n in proto.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dqs) == 14
    for n in dqs:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert attrs == {"axis": 0, "block_size": 128}
        assert inits[n.input[0]].data_type == onnx.TensorProto.INT4 and inits[n.input[1]].data_type == onnx.TensorProto.FLOAT16


def test_ort_quantizer_output_is_uint4_qdq_with_zero_points(zoo_dir):
    proto = onnx.load(zoo.build("ort_int4_qdq", zoo_dir))
    inits = _inits(proto)
    dqs = [n for n in proto.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dqs) == 14 and "MatMulNBits" not in _ops(proto)
    for n in dqs:
        assert len(n.input) == 3 and inits[n.input[0]].data_type == onnx.TensorProto.UINT4
        assert {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} == {"axis": 0, "block_size": 32}


def test_quark_nodes(zoo_dir):
    proto = onnx.load(zoo.build("quark_mxfp4", zoo_dir))
    nodes = [n for n in proto.graph.node if n.op_type == "MXQuantizeDequantize"]
    assert len(nodes) == 24 and all(n.domain == "com.amd.quark" for n in nodes)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in nodes[0].attribute}
    assert attrs == {"element_dtype": b"fp4_e2m1", "axis": 0, "block_size": 32, "rounding_mode": 2}


def test_llama_tied_embedding_is_one_quantized_table(zoo_dir):
    proto = onnx.load(zoo.build("llama_toy_int4", zoo_dir))
    gather = next(n for n in proto.graph.node if n.name == "model.embed_tokens/Gather")
    head_t = next(n for n in proto.graph.node if n.name == "lm_head/Transpose")
    assert gather.input[0] == head_t.input[0] and _producers(proto)[gather.input[0]].op_type == "DequantizeLinear"
    # the rotary tables stay float
    assert all("rotary" not in n.name for n in proto.graph.node if n.op_type == "DequantizeLinear")


def test_feeds_are_deterministic():
    for name in ("mlp_int4", "llama_toy_int4", "bert_int8"):
        a, b = zoo.feeds(zoo.entry(name)), zoo.feeds(zoo.entry(name))
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_cli_lists_and_builds(tmp_path):
    out = subprocess.run([sys.executable, str(zoo.HERE / "zoo.py"), "--list"], capture_output=True, text=True, check=True)
    assert "modelopt_nvfp4" in out.stdout and "llama_4096" in out.stdout
    out = subprocess.run([sys.executable, str(zoo.HERE / "zoo.py"), "--build", "mlp_int4", "--cache-dir", str(tmp_path)],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("mlp_int4.onnx")
    bad = subprocess.run([sys.executable, str(zoo.HERE / "zoo.py"), "--build", "nope", "--cache-dir", str(tmp_path)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown zoo model" in bad.stderr


def test_readme_table_matches_the_golden_files():
    readme = (zoo.HERE / "README.md").read_text()
    assert zoo.markdown_table() in readme, "models/README.md is stale: paste the output of python models/zoo.py --table"
