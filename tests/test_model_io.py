"""Loading refuses what a broken or hostile file could do; saving is atomic and byte-exact."""

import hashlib
import os

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.model_io import load_model, save_model


def _model(initializers, opset=25):
    names = [t.name for t in initializers]
    nodes = [helper.make_node("Identity", [n], [n + "_out"]) for n in names]
    outs = [helper.make_tensor_value_info(n + "_out", t.data_type, list(t.dims)) for n, t in zip(names, initializers)]
    graph = helper.make_graph(nodes, "g", [], outs, initializer=initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _raises(code, fn, *args, **kw):
    with pytest.raises(OnnxfuseError) as info:
        fn(*args, **kw)
    assert info.value.diagnostics[0].code == code, info.value
    return info.value


def _fp4_and_e8m0_tensors():
    fp4 = np.array([0.5, -6, 3, 1.5, 0, -0.5, 4], dtype=ml_dtypes.float4_e2m1fn)  # odd count: padded nibble
    e8m0 = np.array([1.0, 2.0**-127, 2.0**127, 0.25], dtype=ml_dtypes.float8_e8m0fnu)
    i2 = np.array([1, -2, 0, -1, 1], dtype=ml_dtypes.int2)
    big_fp4 = np.random.default_rng(0).choice([-6.0, 0.5, 3.0], size=(64, 33)).astype(ml_dtypes.float4_e2m1fn)
    return [numpy_helper.from_array(a, n) for a, n in [(fp4, "fp4"), (e8m0, "e8m0"), (i2, "i2"), (big_fp4, "big_fp4")]]


@pytest.mark.parametrize("external", [False, True])
def test_round_trip_is_byte_exact_for_sub_byte_and_e8m0(tmp_path, external):
    tensors = _fp4_and_e8m0_tensors()
    src = tmp_path / "in.onnx"
    onnx.save(_model(tensors), src)
    out = tmp_path / "out.onnx"
    save_model(load_model(str(src)), str(out), external_data=external)
    back = onnx.load(out)
    if external:
        stored = {t.name: t.data_location for t in onnx.load(out, load_external_data=False).graph.initializer}
        assert stored["big_fp4"] == TensorProto.EXTERNAL  # small tensors stay inline
        assert (tmp_path / "out.onnx.data").stat().st_size > 0
    for want, got in zip(tensors, back.graph.initializer):
        assert got.data_type == want.data_type
        assert list(got.dims) == list(want.dims)
        assert got.raw_data == want.raw_data


def test_external_data_is_memory_mapped_not_read(tmp_path):
    w = np.arange(1 << 16, dtype=np.float32)
    proto = _model([numpy_helper.from_array(w, "w")])
    onnx.save(proto, tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True, location="m.data", size_threshold=0)
    model = load_model(str(tmp_path / "m.onnx"))
    tensor = model.graph.initializers["w"].const_value
    assert isinstance(tensor, ir.ExternalTensor)
    np.testing.assert_array_equal(tensor.numpy(), w)


def _empty_tensor(name, dims):
    t = TensorProto(name=name, data_type=TensorProto.FLOAT)
    t.dims.extend(dims)
    return t


def _external_model(tmp_path, location, length=None, dims=(4,)):
    t = _empty_tensor("w", dims)
    t.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": "0"}
    if length is not None:
        entries["length"] = str(length)
    for k, v in entries.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    path = tmp_path / "m.onnx"
    path.write_bytes(_model([t]).SerializeToString())
    return str(path)


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd", "sub/../../x.bin"])
def test_external_data_escaping_the_folder_is_refused(tmp_path, location):
    err = _raises(codes.EXTERNAL_DATA_ESCAPES, load_model, _external_model(tmp_path, location))
    assert location in str(err)


def test_external_data_symlink_pointing_outside_is_refused(tmp_path):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"\0" * 16)
    folder = tmp_path / "model"
    folder.mkdir()
    os.symlink(outside, folder / "w.bin")
    _raises(codes.EXTERNAL_DATA_ESCAPES, load_model, _external_model(folder, "w.bin", 16))


def test_missing_and_short_external_data(tmp_path):
    _raises(codes.EXTERNAL_DATA_MISSING, load_model, _external_model(tmp_path, "absent.bin", 16))
    (tmp_path / "short.bin").write_bytes(b"\0" * 8)
    _raises(codes.EXTERNAL_DATA_MISSING, load_model, _external_model(tmp_path, "short.bin"))


def test_allocation_bomb_is_refused_before_allocating(tmp_path):
    t = _empty_tensor("w", [1 << 20, 1 << 20])
    t.raw_data = b"\0" * 16
    path = tmp_path / "bomb.onnx"
    path.write_bytes(_model([t]).SerializeToString())
    err = _raises(codes.TENSOR_SIZE_MISMATCH, load_model, str(path))
    assert "bomb.onnx" in str(err) and "'w'" in str(err)
    (tmp_path / "bomb.bin").write_bytes(b"\0" * 16)
    _raises(codes.TENSOR_SIZE_MISMATCH, load_model, _external_model(tmp_path, "bomb.bin", 16, dims=(1 << 20, 1 << 20)))


@pytest.mark.parametrize(
    "content, code",
    [(b"", codes.NOT_ONNX), (b"\x08\x07\x12\x03abc\xff\xff", codes.NOT_ONNX), (os.urandom(4096), codes.NOT_ONNX)],
)
def test_garbage_files_get_a_clear_error(tmp_path, content, code):
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    err = _raises(code, load_model, str(path))
    assert err.diagnostics[0].file == str(path)


def test_truncated_model(tmp_path):
    blob = _model(_fp4_and_e8m0_tensors()).SerializeToString()
    path = tmp_path / "trunc.onnx"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(OnnxfuseError):
        load_model(str(path))


def test_missing_file_and_directory(tmp_path):
    _raises(codes.FILE_NOT_FOUND, load_model, str(tmp_path / "nope.onnx"))
    _raises(codes.FILE_UNREADABLE, load_model, str(tmp_path))


def test_save_refuses_input_path_missing_folder_and_leaves_no_temp(tmp_path):
    src = tmp_path / "in.onnx"
    onnx.save(_model(_fp4_and_e8m0_tensors()), src)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    model = load_model(str(src))
    _raises(codes.OUTPUT_PATH_INVALID, save_model, model, str(src), input_path=str(src))
    _raises(codes.OUTPUT_PATH_INVALID, save_model, model, str(tmp_path / "missing" / "out.onnx"))
    _raises(codes.OUTPUT_PATH_INVALID, save_model, model, str(tmp_path))
    assert hashlib.sha256(src.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx"]


def test_failed_write_leaves_previous_output_intact(tmp_path, monkeypatch):
    src = tmp_path / "in.onnx"
    onnx.save(_model(_fp4_and_e8m0_tensors()), src)
    out = tmp_path / "out.onnx"
    out.write_bytes(b"previous")

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ir, "save", boom)
    _raises(codes.WRITE_FAILED, save_model, load_model(str(src)), str(out))
    assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx", "out.onnx"]


def test_accepts_proto_ir_model_and_graphsurgeon_like_sources():
    proto = _model(_fp4_and_e8m0_tensors())
    m = load_model(proto)
    assert isinstance(m, ir.Model)
    assert load_model(m) is m
    _raises(codes.USAGE, load_model, 42)


def test_check_output_path_refuses_the_other_outputs_of_the_run(tmp_path):
    from onnxfuse.model_io import check_output_path

    src = tmp_path / "in.onnx"
    onnx.save(_model(_fp4_and_e8m0_tensors()), src)
    out = tmp_path / "out.onnx"
    _raises(codes.OUTPUT_PATH_INVALID, check_output_path, str(out), str(src), avoid=[str(out), str(out) + ".data"])
    _raises(codes.OUTPUT_PATH_INVALID, check_output_path, str(src), str(src), avoid=[str(out)])
    check_output_path(str(tmp_path / "report.json"), str(src), avoid=[str(out), str(out) + ".data"])


def test_save_keeps_ordinary_permissions_and_no_staging(tmp_path):
    import stat

    src = tmp_path / "in.onnx"
    onnx.save(_model(_fp4_and_e8m0_tensors()), src)
    old = os.umask(0o022)
    try:
        save_model(load_model(str(src)), str(tmp_path / "out.onnx"), external_data=True)
    finally:
        os.umask(old)
    for name in ("out.onnx", "out.onnx.data"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx", "out.onnx", "out.onnx.data"]


def test_relative_output_path(tmp_path, monkeypatch):
    src = tmp_path / "in.onnx"
    onnx.save(_model(_fp4_and_e8m0_tensors()), src)
    monkeypatch.chdir(tmp_path)
    save_model(load_model("in.onnx"), "out.onnx", external_data=True)
    assert onnx.load("out.onnx").graph.initializer[3].raw_data == onnx.load("in.onnx").graph.initializer[3].raw_data
