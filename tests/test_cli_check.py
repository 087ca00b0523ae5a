"""`onnxfuse check` through a real subprocess: JSON output and exit codes."""

from __future__ import annotations

import json

import numpy as np
import onnx

from qdq_builders import make_weight, matmul_model
from test_cli_optimize import onnxfuse_cli


def _save(tmp_path, nan: bool):
    w = make_weight("float4e2m1", (64, 8), axis=0, block_size=32, scale_format="float8e8m0", seed=60)
    if nan:
        w.scale.view(np.uint8)[1, 2] = 0xFF
    model, _ = matmul_model(w)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return path


def test_check_json_reports_e8m0_nan_and_exits_1(tmp_path):
    path = _save(tmp_path, nan=True)
    before = path.read_bytes()
    r = onnxfuse_cli("check", str(path), "--json")
    assert r.returncode == 1
    diagnostics = json.loads(r.stdout)["diagnostics"]
    err = [d for d in diagnostics if d["code"] == "OFX203"]
    assert err and err[0]["severity"] == "error" and err[0]["node"] == "w_dq" and "0xFF" in err[0]["message"]
    assert set(err[0]) >= {"code", "severity", "node", "message", "tensor", "hint", "file"}
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_check_clean_model_exits_0(tmp_path):
    r = onnxfuse_cli("check", str(_save(tmp_path, nan=False)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 error(s)" in r.stdout
