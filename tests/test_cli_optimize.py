"""`onnxfuse optimize` through a real subprocess: exit codes, printed table, report, output model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest

from qdq_builders import count_ops, make_weight, matmul_model, run_ort


def onnxfuse_cli(*args, console_script=False):
    exe = shutil.which("onnxfuse", path=os.path.dirname(sys.executable)) if console_script else None
    cmd = [exe, *args] if exe else [sys.executable, "-m", "onnxfuse", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.fixture
def nvfp4_model(tmp_path):
    w = make_weight("float4e2m1", (16, 64), axis=1, block_size=16, two_level=True, seed=50)
    model, W = matmul_model(w, act="float16", transpose=True, cast=True)
    path = tmp_path / "in.onnx"
    onnx.save(model, path)
    return path, W


def test_optimize_writes_a_runnable_model_and_a_report(nvfp4_model, tmp_path):
    path, W = nvfp4_model
    before = path.read_bytes()
    out, rep = tmp_path / "out.onnx", tmp_path / "r.json"
    r = onnxfuse_cli("optimize", str(path), "-o", str(out), "--report", str(rep), console_script=True)
    assert r.returncode == 0, r.stderr
    assert "DequantMatMul" in r.stdout and "float4e2m1/float8e4m3fn*global" in r.stdout
    assert "weight bytes" in r.stdout and "elapsed" in r.stdout
    assert path.read_bytes() == before  # the input is never modified
    report = json.loads(rep.read_text())
    assert report["counts"]["DequantMatMul"] == {"float4e2m1/float8e4m3fn*global": 1}
    assert report["ops_before"]["DequantizeLinear"] == 2 and "DequantizeLinear" not in report["ops_after"]
    fused = onnx.load(out)
    onnx.checker.check_model(fused, full_check=True)
    assert count_ops(fused, "DequantMatMul", "onnxfuse") == 1
    a = np.random.default_rng(51).standard_normal((1, 64)).astype(np.float16)
    (y,) = run_ort(fused, {"a": a})
    ref = a.astype(np.float64) @ W
    # fp16 output: half an ulp of |y| plus float32 accumulation over K=64 terms
    assert np.all(np.abs(y - ref) <= np.abs(ref) * 2.0**-10 + (np.abs(a) @ np.abs(W)) * 2.0**-17)


def test_optimize_nothing_to_fuse_exits_0(tmp_path):
    from onnx import TensorProto, helper
    f = TensorProto.FLOAT
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                                [helper.make_tensor_value_info("x", f, [2])],
                                                [helper.make_tensor_value_info("y", f, [2])]))
    path = tmp_path / "in.onnx"
    onnx.save(model, path)
    r = onnxfuse_cli("optimize", str(path), "-o", str(tmp_path / "o.onnx"))
    assert r.returncode == 0 and "fused: nothing" in r.stdout


def test_optimize_strict_exits_1_on_a_validation_error(tmp_path):
    w = make_weight("int4", (64, 8), axis=0, block_size=32, scale_format="float32", seed=52)
    w.scale[0, 0] = np.nan
    model, _ = matmul_model(w)
    path, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, path)
    r = onnxfuse_cli("optimize", str(path), "-o", str(out))
    assert r.returncode == 0 and "OFX203" in r.stdout  # reported, pattern left as it was
    r = onnxfuse_cli("optimize", str(path), "-o", str(out), "--strict")
    assert r.returncode == 1 and "OFX203" in r.stderr and "Traceback" not in r.stderr


def test_optimize_usage_and_missing_file(tmp_path):
    assert onnxfuse_cli("optimize", "x.onnx").returncode == 2  # -o missing: usage error
    r = onnxfuse_cli("optimize", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "o.onnx"))
    assert r.returncode == 1 and "OFX101" in r.stderr and "Traceback" not in r.stderr


def test_explain_lists_every_dq_left(tmp_path):
    w = make_weight("int8", (16, 8), axis=0, block_size=16, scale_format="float32", seed=53)
    model, _ = matmul_model(w)
    model.graph.node[0].attribute[1].i = 0  # block_size 0 -> per-axis... with a blocked scale: invalid
    path = tmp_path / "in.onnx"
    onnx.save(model, path)
    r = onnxfuse_cli("optimize", str(path), "-o", str(tmp_path / "o.onnx"), "--explain")
    assert r.returncode == 0
    assert "left as they were: 1" in r.stdout and "w_dq" in r.stdout
