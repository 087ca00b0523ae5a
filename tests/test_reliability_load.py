"""Every "load" case of the bad-input corpus is refused by load_model itself, with the right code.

Fast and in-process: the CLI runs of tests/test_reliability_inputs.py cover the same files
end to end; this pins the failure to the loader and its diagnostic code.
"""

import pathlib

import pytest

from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.model_io import load_model
from tests import bad_inputs

LOAD_CASES = [c for c in bad_inputs.CASES if c.kind == "load"]


@pytest.mark.parametrize("bad", LOAD_CASES, ids=lambda c: c.name)
def test_loader_refuses_with_a_named_diagnostic(tmp_path, bad):
    folder = tmp_path / "case"
    folder.mkdir()
    built = bad.build(folder)
    with pytest.raises(OnnxfuseError) as info:
        load_model(built.input)
    err = info.value
    got = {d.code.id for d in err.diagnostics}
    assert got & set(bad.codes), f"{bad.name}: codes {got}, want one of {bad.codes}: {err}"
    text = str(err)
    assert pathlib.Path(built.input).name.replace("\0", "\\0") in text
    for word in bad.names:
        assert word.replace("\0", "\\0") in text, f"{bad.name}: {word!r} not in {text!r}"
    assert all(d.file for d in err.diagnostics), "every diagnostic names the file"


def test_check_false_still_refuses_bombs_and_escapes(tmp_path):
    for name in ("bomb_raw_data", "external_data_dotdot", "bomb_in_function_body"):
        folder = tmp_path / name
        folder.mkdir()
        built = bad_inputs.by_name(name).build(folder)
        with pytest.raises(OnnxfuseError):
            load_model(built.input, check=False)


def test_check_false_lets_a_structurally_odd_graph_through(tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    built = bad_inputs.by_name("graph_cycle").build(folder)
    model = load_model(built.input, check=False)
    assert len(model.graph) == 3


def test_unsorted_graph_and_duplicate_node_names_are_accepted(tmp_path):
    import onnx
    from onnx import helper

    model = bad_inputs.dq_matmul(bad_inputs.int4_weight(), bad_inputs.fp32_scale([2, bad_inputs.N]))
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(reversed(nodes))  # MatMul before its DQ
    model.graph.node.append(helper.make_node("Relu", ["y"], ["z"], name="matmul"))  # a repeated node name
    model.graph.output[0].name = "z"
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert len(load_model(str(path)).graph) == 3
