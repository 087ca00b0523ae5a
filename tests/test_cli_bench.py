"""`onnxfuse bench`: timings, the comparison with ORT on the original, the per-segment breakdown."""

import json

import onnx

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


def test_bench_json_against_the_original(tmp_path, capsys):
    original, fused = qdq_matmul_pair("int4", scale_format="float32")
    o, f = tmp_path / "o.onnx", tmp_path / "f.onnx"
    onnx.save(original, o)
    onnx.save(fused, f)
    assert main(["bench", str(f), "--original", str(o), "--backend", "ort", "--warmup", "1", "--iters", "5",
                 "--shape", "batch=2", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["fused"]["runs"] == 5 and r["fused"]["p50_ms"] > 0 and r["fused"]["p90_ms"] >= r["fused"]["p50_ms"]
    assert r["original"]["runs"] == 5 and r["speedup"] > 0


def test_bench_triton_breakdown_and_an_original_ort_cannot_run(tmp_path, capsys):
    original, fused = qdq_matmul_pair("mxfp4")
    o, f = tmp_path / "o.onnx", tmp_path / "f.onnx"
    onnx.save(original, o)
    onnx.save(fused, f)
    assert main(["bench", str(f), "--original", str(o), "--backend", "triton", "--warmup", "1", "--iters", "2",
                 "--shape", "x:1x40"]) == 0
    out = capsys.readouterr().out
    assert "not run" in out  # ORT cannot run MXFP4 DQ
    assert "kernel DequantMatMul 'dqmm'" in out and "ORT segment" in out or "ort segment" in out
