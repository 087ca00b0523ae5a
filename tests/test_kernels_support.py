"""supported(), the import contract (no torch/triton at import), the on-disk tuning cache, and the
mma.sync compile setting of the wider swap-AB programs (triton_env.mma_sync_dots)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from onnxfuse.kernels import autotune, supported


def test_import_does_not_load_torch_or_triton():
    code = "import sys, onnxfuse.kernels as k; k.supported('Dequantize', weight_format='int4', scale_format='float16', block_size=32); print('torch' in sys.modules, 'triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_supported_answers_with_reasons():
    assert supported("DequantMatMul", weight_format="float4e2m1", scale_format="float8e4m3fn", block_size=16) is None
    assert supported("DequantGather", weight_format="int2", scale_format="bfloat16", block_size=7) is None
    assert "int3" in supported("DequantMatMul", weight_format="int3", scale_format="float16", block_size=32)
    assert "float64" in supported("Dequantize", weight_format="int4", scale_format="float64", block_size=32)
    assert "block_size" in supported("Dequantize", weight_format="int4", scale_format="float16")
    assert supported("QuantizeDequantize", element_format="float4e2m1", mode="dynamic", scale_rule="nvfp4",
                     block_size=16) is None
    assert "unsigned" in supported("QuantizeDequantize", element_format="uint8", mode="dynamic", scale_rule="absmax",
                                   block_size=32)
    assert "Conv" in supported("Conv")


def test_tuning_cache_round_trips_and_survives_a_corrupt_file(tmp_path):
    c = autotune.TuningCache("NVIDIA H200", "3.6.0", tmp_path)
    assert c.get("k") is None
    c.put("k", {"BLOCK_N": 16})
    again = autotune.TuningCache("NVIDIA H200", "3.6.0", tmp_path)
    assert again.get("k") == {"BLOCK_N": 16}
    assert json.loads(c.path.read_text()) == {"k": {"BLOCK_N": 16}}
    other = autotune.TuningCache("NVIDIA H100", "3.6.0", tmp_path)
    assert other.path != c.path and other.get("k") is None
    c.path.write_text("{not json")
    assert autotune.TuningCache("NVIDIA H200", "3.6.0", tmp_path).get("k") is None


def test_choose_measures_once_then_reads_the_cache(tmp_path, monkeypatch, caplog, capsys):
    monkeypatch.setattr(autotune, "tuning_enabled", lambda: True)
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    caplog.set_level("INFO", logger="onnxfuse.kernels.autotune")
    c = autotune.TuningCache("gpu", "v", tmp_path)
    calls = []

    def time_one(cfg):
        calls.append(cfg["x"])
        if cfg["x"] == 3:
            raise RuntimeError("out of shared memory")
        return {1: 2.0, 2: 1.0}[cfg["x"]]

    assert autotune.choose(c, "key", lambda: [{"x": 1}, {"x": 2}, {"x": 3}], time_one) == {"x": 2}
    assert calls == [1, 2, 3]
    assert "autotune key: 3 configs in" in caplog.text and "best 1000.0 us: {'x': 2}" in caplog.text
    assert "onnxfuse autotune key: 3 configs" in capsys.readouterr().err

    def unbuilt():
        raise AssertionError("a cache hit must not build the candidate list")

    assert autotune.choose(autotune.TuningCache("gpu", "v", tmp_path), "key", unbuilt, time_one) == {"x": 2}
    assert calls == [1, 2, 3]


def test_choose_refines_the_fastest_configs(tmp_path, monkeypatch, caplog):
    """A second round times refine()'s variants of the REFINE_TOP fastest configs only, and may pick one."""
    monkeypatch.setattr(autotune, "tuning_enabled", lambda: True)
    caplog.set_level("INFO", logger="onnxfuse.kernels.autotune")
    times = {(1, 0): 4.0, (2, 0): 3.0, (3, 0): 2.0, (4, 0): 1.0, (3, 1): 0.5, (1, 1): 0.1}
    calls = []

    def time_one(cfg):
        calls.append((cfg["x"], cfg["v"]))
        if cfg["v"] == 1 and cfg["x"] == 4:
            raise RuntimeError("out of shared memory")
        return times.get((cfg["x"], cfg["v"]), 9.0)

    monkeypatch.setattr(autotune, "REFINE_TOP", 3)
    cands = [{"x": x, "v": 0} for x in (1, 2, 3, 4)]
    got = autotune.choose(autotune.TuningCache("gpu", "v", tmp_path), "key", lambda: cands, time_one,
                          refine=lambda cfg: [cfg, dict(cfg, v=1)])
    assert got == {"x": 3, "v": 1}  # (1, 1) would be faster, but config 1 was not among the 3 fastest
    assert calls == [(1, 0), (2, 0), (3, 0), (4, 0), (4, 1), (3, 1), (2, 1)]
    assert "autotune key: 7 configs in" in caplog.text


def test_choose_compiles_every_candidate_before_timing(tmp_path, monkeypatch):
    """compile_one runs over the whole first-round list, inside Triton's AsyncCompileMode, before any
    config is timed; a config that fails to compile is left to the timing round, which drops it."""
    from onnxfuse.kernels import triton_env

    triton_env.load()  # (sets the interpreter up first on a machine without CUDA)
    from triton.runtime import _async_compile

    monkeypatch.setattr(autotune, "tuning_enabled", lambda: True)
    compiled, events = [], []

    def compile_one(cfg):
        compiled.append((cfg["x"], _async_compile.active_mode.get() is not None))
        if cfg["x"] == 3:
            raise RuntimeError("out of shared memory")

    def time_one(cfg):
        events.append(len(compiled))
        if cfg["x"] == 3:
            raise RuntimeError("out of shared memory")
        return float(cfg["x"])

    cands = [{"x": x} for x in (4, 2, 3, 1)]
    got = autotune.choose(autotune.TuningCache("gpu", "v", tmp_path), "key", lambda: cands, time_one,
                          compile_one=compile_one)
    assert got == {"x": 1}
    assert compiled == [(4, True), (2, True), (3, True), (1, True)]
    assert events == [4, 4, 4, 4]  # every compile was submitted before the first timing
    assert _async_compile.active_mode.get() is None


def test_split_variants_cover_the_small_m_kernels_only():
    import importlib

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")
    gemv = dict(BLOCK_N=32, BLOCK_KB=256, SPLIT_K=2, num_warps=4, num_stages=3, LOOP_STAGES=1)
    mma = dict(MMA=True, BLOCK_M=1, BLOCK_N=16, CHUNK=16, GROUP=4, BLOCK_KB=256, SPLIT_K=2, num_warps=1,
               num_stages=1, LOOP_STAGES=2)
    gemm = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_KB=64, SPLIT_K=2, num_warps=4, num_stages=4, GROUP_M=8)
    for cfg, M in ((gemv, 1), (mma, 16), (gemm, 64), (dict(gemm, GEMM=True), 4)):
        assert [v["SPLIT_K"] for v in D.split_variants(cfg, M)] == list(D.REFINE_SPLITS)
        assert all(dict(v, SPLIT_K=2) == cfg for v in D.split_variants(cfg, M))
    assert D.split_variants(dict(gemm, BLOCK_M=128, SPLIT_K=1), 1024) == []  # large M: no split-K
    assert D.split_variants(dict(MATERIALISE=True), 256) == []


def test_choose_warns_when_no_config_runs(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(autotune, "tuning_enabled", lambda: True)

    def time_one(cfg):
        raise RuntimeError("no kernel image")

    c = autotune.TuningCache("gpu", "v", tmp_path)
    assert autotune.choose(c, "key", lambda: [{"x": 1}, {"x": 2}], time_one) == {"x": 1}
    assert "none of 2 configs ran" in caplog.text
    assert c.get("key") == {"x": 1}  # not tried again in this process
    assert autotune.TuningCache("gpu", "v", tmp_path).get("key") is None  # but the next one retries


def test_m_buckets():
    assert [autotune.m_bucket(m) for m in (1, 2, 3, 5, 16, 17, 5000)] == [1, 2, 4, 8, 16, 32, 4096]


def test_launch_math_matches_triton():
    import math

    from onnxfuse.kernels import triton_env
    from onnxfuse.kernels.launch_math import cdiv, next_pow2, pow2_floor

    _, triton, _ = triton_env.load()  # (sets the interpreter up first on a machine without CUDA)

    for x in range(1, 2100):
        assert next_pow2(x) == triton.next_power_of_2(x), x
        assert pow2_floor(x) == 2 ** int(math.log2(x)), x
        for b in (1, 3, 16, 128, 1024):
            assert cdiv(x, b) == triton.cdiv(x, b), (x, b)
    assert next_pow2(0) == 1 and pow2_floor(0) == 1 and cdiv(0, 16) == 0


def _tuning_on_a_fake_gpu(tmp_path, monkeypatch):
    """The dequant_matmul module with tuning on, as on a GPU, but every launch stubbed out and
    every config timed at 1 ms; the cache in tmp_path."""
    import importlib

    from onnxfuse.kernels import triton_env

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")
    monkeypatch.setenv("ONNXFUSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "tuning_enabled", lambda: True)
    monkeypatch.setattr(triton_env, "interpreting", lambda: False)
    monkeypatch.setattr(D, "_time_config", lambda fn: 1.0)
    monkeypatch.setattr(D, "_launch", lambda *a, **k: None)
    return D


def test_a_cached_config_costs_no_candidate_list(tmp_path, monkeypatch):
    """A DequantMatMul call that hits the tuning cache must not build (or time) the candidates:
    building them took more host time than a small-M kernel runs."""
    import torch

    from onnxfuse.kernels import inputs

    D = _tuning_on_a_fake_gpu(tmp_path, monkeypatch)
    built = []
    real = D.tuning_candidates
    monkeypatch.setattr(D, "tuning_candidates", lambda *a, **k: built.append(1) or real(*a, **k))
    e, sc = inputs.formats("int4", "float16")
    a, w = torch.zeros(1, 64, dtype=torch.float16), torch.zeros(32, 32, dtype=torch.uint8)
    s, out = torch.ones(32, 2, dtype=torch.float16), torch.empty(1, 32, dtype=torch.float16)
    kw = dict(K=64, N=32, block_size=32, element=e, scale_code=sc)
    first = D._pick_config(a, w, s, None, None, None, out, **kw)
    assert built == [1]
    assert D._pick_config(a, w, s, None, None, None, out, **kw) == first
    assert built == [1]


def test_tuning_keys_tell_scale_and_zero_point_layouts_apart(tmp_path, monkeypatch):
    """Row- and column-major scales and zero points are tuned separately: a config timed on one
    layout is not reused for the other."""
    import torch

    from onnxfuse.kernels import inputs

    D = _tuning_on_a_fake_gpu(tmp_path, monkeypatch)
    keys = []
    real_put = autotune.TuningCache.put
    monkeypatch.setattr(autotune.TuningCache, "put", lambda self, key, cfg, **k: keys.append(key) or
                        real_put(self, key, cfg, **k))
    e, sc = inputs.formats("uint4", "float16")
    a, w = torch.zeros(1, 64, dtype=torch.float16), torch.zeros(32, 32, dtype=torch.uint8)
    out = torch.empty(1, 32, dtype=torch.float16)
    s, z = torch.ones(32, 2, dtype=torch.float16), torch.zeros(32, 2, dtype=torch.uint8)
    col = lambda t: t.t().contiguous().t()  # noqa: E731
    kw = dict(K=64, N=32, block_size=32, element=e, scale_code=sc)
    for si, zi in ((s, z), (col(s), z), (col(s), col(z)), (s, None)):
        D._pick_config(a, w, si, zi, None, None, out, **kw)
    assert len(set(keys)) == 4
    assert "|scol|zrow|" in keys[1] and "|scol|zcol|" in keys[2] and "|srow|gs" in keys[3]


def test_interpreter_refuses_the_numpy_that_breaks_older_triton():
    from onnxfuse.kernels import triton_env

    clash = triton_env.interpreter_numpy_clash("3.6.0", "2.4.6")
    assert "3.6.0" in clash and "2.4.6" in clash and "#9171" in clash
    assert triton_env.interpreter_numpy_clash("3.6.0", "2.3.5") is None
    assert triton_env.interpreter_numpy_clash("3.7.0", "2.4.6") is None
    assert triton_env.interpreter_numpy_clash("3.10.0+git1a2b", "2.4.0rc1") is None
    assert triton_env.interpreter_numpy_clash("3.4.0", "2.10.0") is not None


def test_mma_sync_dots_sets_the_variable_while_any_user_is_inside(monkeypatch):
    import os

    from onnxfuse.kernels import triton_env

    monkeypatch.delenv("DISABLE_MMA_V3", raising=False)
    with triton_env.mma_sync_dots():
        with triton_env.mma_sync_dots():
            assert os.environ["DISABLE_MMA_V3"] == "1"
        assert os.environ["DISABLE_MMA_V3"] == "1"  # the outer user is still inside
    assert "DISABLE_MMA_V3" not in os.environ
    monkeypatch.setenv("DISABLE_MMA_V3", "0")  # the caller's own setting comes back, also after an error
    with pytest.raises(RuntimeError), triton_env.mma_sync_dots():
        assert os.environ["DISABLE_MMA_V3"] == "1"
        raise RuntimeError
    assert os.environ["DISABLE_MMA_V3"] == "0"


def test_small_m_tuning_compiles_to_mma_sync_throughout(tmp_path, monkeypatch):
    """Triton's parallel build compiles after the warmups return, so an M <= 16 tuning keeps mma.sync
    on from its first compile to its last timing; a larger M's tuning leaves it alone."""
    import os

    import torch

    from onnxfuse.kernels import inputs

    monkeypatch.delenv("DISABLE_MMA_V3", raising=False)
    D = _tuning_on_a_fake_gpu(tmp_path, monkeypatch)
    seen = []
    monkeypatch.setattr(D, "_time_config", lambda fn: seen.append(os.environ.get("DISABLE_MMA_V3")) or 1.0)
    e, sc = inputs.formats("int4", "float16")
    w, s = torch.zeros(32, 32, dtype=torch.uint8), torch.ones(32, 2, dtype=torch.float16)
    kw = dict(K=64, N=32, block_size=32, element=e, scale_code=sc)
    for M in (16, 64):
        a, out = torch.zeros(M, 64, dtype=torch.float16), torch.empty(M, 32, dtype=torch.float16)
        D._pick_config(a, w, s, None, None, None, out, **kw)
        assert seen and set(seen) == ({"1"} if M == 16 else {None}), (M, seen)
        seen.clear()
    assert "DISABLE_MMA_V3" not in os.environ


def test_wide_swap_ab_launches_compile_to_mma_sync(monkeypatch):
    """A 4- or 8-warp swap-AB launch turns mma.sync on itself (a tuned pick read from the cache compiles
    at its first launch); 1- and 2-warp ones, which wgmma cannot take anyway, leave it alone."""
    import importlib
    import os

    import torch

    from onnxfuse.kernels import inputs

    monkeypatch.delenv("DISABLE_MMA_V3", raising=False)
    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")
    launched = []
    monkeypatch.setattr(D, "_run", lambda kernel, *a, **k: launched.append((kernel, os.environ.get("DISABLE_MMA_V3"))))
    e, sc = inputs.formats("int4", "float16")
    a, w = torch.zeros(16, 64, dtype=torch.float16), torch.zeros(128, 32, dtype=torch.uint8)
    s, out = torch.ones(128, 2, dtype=torch.float16), torch.empty(16, 128, dtype=torch.float16)
    cfg = dict(MMA=True, BLOCK_M=16, CHUNK=64, GROUP=1, BLOCK_KB=32, SPLIT_K=1, num_stages=1, LOOP_STAGES=2,
               SCALE_W=True, ROW_TILES=1)
    for warps in (1, 2, 4, 8):
        D._launch(a, w, s, None, None, None, out, K=64, N=128, block_size=32, element=e, scale_code=sc,
                  cfg=dict(cfg, num_warps=warps, BLOCK_N=16 * warps))
    assert launched == [(D.dqmm_mma_kernel, None)] * 2 + [(D.dqmm_mma_kernel, "1")] * 2
    assert "DISABLE_MMA_V3" not in os.environ
