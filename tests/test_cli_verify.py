"""`onnxfuse verify`: per-output statistics, tolerances, exit codes."""

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

import onnxfuse.cli as cli


def main(argv):
    # Only this subcommand's parser: the others are other owners' modules and may still be missing.
    saved = cli.SUBCOMMANDS
    cli.SUBCOMMANDS = (argv[0],)
    try:
        return cli.main(argv)
    finally:
        cli.SUBCOMMANDS = saved
from runtime_models import qdq_matmul_pair


@pytest.fixture()
def pair(tmp_path):
    original, fused = qdq_matmul_pair("nvfp4")
    o, f = tmp_path / "orig.onnx", tmp_path / "fused.onnx"
    onnx.save(original, o)
    onnx.save(fused, f)
    return str(o), str(f), fused, tmp_path


def test_verify_passes_and_reports_each_output(pair, capsys):
    o, f, _, _ = pair
    assert main(["verify", o, f, "--backend", "ort", "--shape", "x:4x40"]) == 0
    out = capsys.readouterr().out
    assert "reference evaluator" in out  # ORT cannot run the NVFP4 original
    assert "PASSED: 1/1" in out and "cosine" in out


def test_verify_fails_with_exit_1_when_a_weight_is_corrupted(pair, capsys):
    o, _, fused, tmp = pair
    rows = next(t for t in fused.graph.initializer if t.name == "W_rows")
    data = bytearray(rows.raw_data)
    data[0] ^= 0x77
    rows.raw_data = bytes(data)
    bad = tmp / "bad.onnx"
    onnx.save(fused, bad)
    assert main(["verify", o, str(bad), "--backend", "ort", "--shape", "batch=2", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["outputs"][0]["mismatched"] > 0
    # a per-output tolerance wide enough accepts it
    assert main(["verify", o, str(bad), "--backend", "ort", "--shape", "batch=2", "--atol", "y:10"]) == 0


def test_verify_reads_inputs_from_npz(pair, capsys):
    o, f, _, tmp = pair
    npz = tmp / "in.npz"
    np.savez(npz, x=np.ones((2, 40), np.float32))
    assert main(["verify", o, f, "--backend", "ort", "--inputs", str(npz), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outputs"][0]["shape"] == [2, 24]


def test_an_unbound_symbolic_dimension_is_a_sentence_and_exit_1(pair):
    o, f, _, _ = pair
    code = ("import sys, onnxfuse.cli as c; c.SUBCOMMANDS = ('verify',); "
            "sys.exit(c.main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "verify", o, f, "--backend", "ort"], capture_output=True, text=True)
    assert r.returncode == 1
    assert "symbolic dimension" in r.stderr and "--shape x:" in r.stderr and "Traceback" not in r.stderr


def test_tolerance_for_an_unknown_output_is_refused(pair):
    o, f, _, _ = pair
    assert main(["verify", o, f, "--backend", "ort", "--shape", "batch=1", "--atol", "logits:1"]) == 1
