"""DequantMatMul and friends on a CUDA GPU at realistic shapes, against float64 references.

Bound as in test_kernels_dequant_matmul.py: (K + 4) * u32 * sum|a w| for fp32 accumulation,
plus the operand rounding of tl.dot (u of fp16/bf16; at every M, since the autotuner may pick the
swap-AB tensor-core kernel down to M = 1), plus the output cast.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from onnxfuse.kernels import reference as ref  # noqa: E402

U = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
CASES = [  # (weight_format, scale_format, block_size, zero point, two-level)
    ("int4", "float16", 32, False, False),
    ("uint4", "float16", 128, True, False),
    ("uint4", "float16", 32, True, False),  # onnxruntime's quantizer with block 32: SCALE_W with zero points
    ("int8", "float16", 128, False, False),
    ("float8e4m3fn", "float16", 128, False, False),
    ("float4e2m1", "float8e8m0", 32, False, False),
    ("float8e4m3fn", "float8e8m0", 32, False, False),
    ("float4e2m1", "float8e4m3fn", 16, False, True),
    ("int2", "bfloat16", 64, True, False),
    ("float6e2m3", "float8e8m0", 32, False, False),
]


@pytest.mark.parametrize("case_args", CASES, ids=lambda c: f"{c[0]}-{c[1]}-b{c[2]}")
def test_dequant_matmul_realistic(case_args):
    case, wd = _realistic_case(case_args, seed=0)
    for M, dtype, col in ((1, torch.float16, True), (3, torch.bfloat16, False), (16, torch.float16, True),
                          (300, torch.bfloat16, True), (64, torch.float32, False)):
        _check_one(case, wd, M, dtype, config=None, column_major=col)


@pytest.mark.parametrize("case_args", CASES, ids=lambda c: f"{c[0]}-{c[1]}-b{c[2]}")
def test_swap_ab_kernel_realistic(case_args):
    """Every config of the swap-AB tensor-core kernel, forced (the autotuner may not pick it at
    this shape), fp16 (the inline-PTX decoders) and bf16, M = 1 (several chunks a dot, through the
    block-diagonal activation operand, or NVFP4's scales folded into the codes), 4 and 16, with split-K; fp16
    with column-major scales (as a session loads them), bf16 with row-major ones."""
    import importlib

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")
    from onnxfuse.kernels import inputs

    wf, sf, bs, zp, _ = case_args
    case, wd = _realistic_case(case_args, seed=1)
    e, sc = inputs.formats(wf, sf)
    ran = 0
    for M, dtype in ((1, torch.float16), (4, torch.float16), (16, torch.float16), (5, torch.bfloat16)):
        for cfg in D.mma_candidates(M, case.w.shape[0], case.w.shape[1], e, bs, dtype, torch.device("cuda"),
                                    zero_point=zp, scale_code=sc):
            _check_one(case, wd, M, dtype, config=cfg, column_major=dtype == torch.float16)
            ran += 1
    if not ran:
        pytest.skip(f"the swap-AB kernel does not cover {wf} with block size {bs} (needs <= 2 codes a byte, "
                    "16 bytes a dot)")


@pytest.mark.parametrize("case_args", CASES, ids=lambda c: f"{c[0]}-{c[1]}-b{c[2]}")
def test_gemv_configs_realistic(case_args):
    """Every GEMV config forced (the autotuner may pick another at this shape, so its GPU decoders,
    fp4's through e4m3 included, would otherwise go unchecked), M = 1, 2 and 4: fp16 with
    column-major scales, bf16 with row-major ones."""
    _check_forced_configs(case_args, "gemv_candidates", ((1, torch.float16), (2, torch.bfloat16), (4, torch.float16)),
                          seed=3)


@pytest.mark.parametrize("case_args", CASES, ids=lambda c: f"{c[0]}-{c[1]}-b{c[2]}")
def test_gemm_configs_realistic(case_args):
    """Every large-M GEMM config forced, SWAP_AB (fp16-lane codes with fp16 A and scales) included,
    at M = 300 fp16 (column-major scales) and M = 130 bf16 (row-major)."""
    _check_forced_configs(case_args, "gemm_candidates", ((300, torch.float16), (130, torch.bfloat16)), seed=2)


@pytest.mark.parametrize("case_args", CASES, ids=lambda c: f"{c[0]}-{c[1]}-b{c[2]}")
def test_natural_k_configs_realistic(case_args):
    """The W @ A^T tiles with the weight in the row's K order (not yet candidates) forced, as above."""
    _check_forced_configs(case_args, "natural_k_configs", ((300, torch.float16), (130, torch.bfloat16)), seed=2,
                          with_scales=True)


def _check_forced_configs(case_args, candidates, runs, *, seed, with_scales=False):
    """Each config of dequant_matmul's `candidates(M, N, Kb, element, device)` (with_scales: and
    block_size, scale_code) forced, for each (M, dtype) of runs: fp16 with column-major scales,
    others row-major."""
    import importlib

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")
    from onnxfuse.kernels import format_codes, inputs

    wf, sf, bs, zp, _ = case_args
    e, sc = inputs.formats(wf, sf)
    if format_codes.fast_path_reason(e, bs) is not None:
        pytest.skip(f"{wf} with block size {bs} always materialises")
    case, wd = _realistic_case(case_args, seed=seed)
    extra = dict(block_size=bs, scale_code=sc) if with_scales else {}
    for M, dtype in runs:
        for cfg in getattr(D, candidates)(M, case.w.shape[0], case.w.shape[1], e, torch.device("cuda"), **extra):
            _check_one(case, wd, M, dtype, config=cfg, column_major=dtype == torch.float16)


def test_compile_only_launches_run_nothing():
    """The autotuner's ahead-of-time compile (_launch with compile_only, under Triton's
    AsyncCompileMode as autotune.choose runs it) builds every candidate without launching it: the
    output keeps its NaNs, and a real launch afterwards is right."""
    import importlib
    from concurrent.futures import ThreadPoolExecutor

    import triton

    from onnxfuse.kernels import inputs

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")
    case_args = ("float4e2m1", "float8e8m0", 32, False, False)
    case, wd = _realistic_case(case_args, seed=5)
    e, sc = inputs.formats("float4e2m1", "float8e8m0")
    K, N = case.K, case.w.shape[0]
    w, s = (torch.from_numpy(np.ascontiguousarray(x)).cuda() for x in (case.w, case.scale))
    for M in (1, 16, 300):
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        out = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
        cands = D.tuning_candidates(M, N, w.shape[1], e, 32, a.dtype, a.device, scale_code=sc)

        with ThreadPoolExecutor(8) as pool, triton.AsyncCompileMode(pool):
            for cfg in cands:
                D._launch(a, w, s, None, None, None, out, K=K, N=N, block_size=32, element=e, scale_code=sc,
                          cfg=cfg, compile_only=True)
        torch.cuda.synchronize()
        assert torch.isnan(out).all(), M
        _check_one(case, wd, M, torch.float16, config=cands[-1])


def _realistic_case(case_args, *, seed):
    """A K=4096, N=1536 row-layout case and its decoded weight (float64, on the GPU)."""
    wf, sf, bs, zp, two = case_args
    case = ref.random_rows(np.random.default_rng(seed), 1536, 4096, weight_format=wf, scale_format=sf,
                           block_size=bs, zero_point=zp, global_scale=two)
    return case, torch.from_numpy(case.decoded()).double().cuda()


def _check_one(case, wd, M, dtype, *, config, column_major=False):
    import importlib

    dequant_matmul = importlib.import_module("onnxfuse.kernels.dequant_matmul").dequant_matmul  # takes config=

    K, N = case.K, case.w.shape[0]
    dev = lambda x: None if x is None else torch.from_numpy(np.ascontiguousarray(x)).cuda()  # noqa: E731
    lay = (lambda x: None if x is None else dev(x).t().contiguous().t()) if column_major else dev  # noqa: E731
    a = torch.randn(M, K, device="cuda").to(dtype)
    bias = torch.randn(N, device="cuda").to(dtype)
    y = torch.full((M, N), float("nan"), dtype=dtype, device="cuda")
    dequant_matmul(a, dev(case.w), lay(case.scale), lay(case.zero_point), dev(case.global_scale), bias, K=K, N=N,
                   block_size=case.block_size, weight_format=case.weight_format, scale_format=case.scale_format,
                   out=y, config=config)
    want = a.double() @ wd.t() + bias.double()
    absdot = a.double().abs() @ wd.abs().t() + bias.double().abs()
    u_op = 0.0 if dtype == torch.float32 else U[dtype]
    bound = ((K + 4) * U[torch.float32] + u_op) * absdot + U[dtype] * want.abs()
    err = (y.double() - want).abs()
    what = f"M={M} {dtype} {config} {'column' if column_major else 'row'}-major scales"
    assert torch.isfinite(y).all(), what
    assert (err <= bound).all(), f"{what}: max err/bound {(err / bound).max().item():.3g}"
    rel = (err.norm() / want.norm()).item()
    assert rel < (3e-3 if u_op == 0 else 6 * u_op), (what, rel)


def test_gather_dequantize_qdq_on_gpu():
    from onnxfuse.kernels import dequant_gather, dequantize, quantize_dequantize

    rng = np.random.default_rng(1)
    case = ref.random_rows(rng, 1000, 256, weight_format="float4e2m1", scale_format="float8e8m0", block_size=32)
    t = lambda x: torch.from_numpy(np.ascontiguousarray(x)).cuda()  # noqa: E731
    idx = torch.tensor([[0, 999, -1], [5, 7, 500]], device="cuda")
    got = dequant_gather(t(case.w), t(case.scale), None, None, idx, D=256, block_size=32, weight_format="float4e2m1",
                         scale_format="float8e8m0", out_dtype=torch.float32)
    want = ref.dequant_gather_ref(case.w, case.scale, None, None, idx.cpu().numpy(), D=256, block_size=32,
                                  weight_format="float4e2m1", scale_format="float8e8m0")
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    got = dequantize(t(case.w), t(case.scale), None, None, shape=(1000, 256), axis=1, block_size=32,
                     weight_format="float4e2m1", scale_format="float8e8m0", out_dtype=torch.float32)
    np.testing.assert_array_equal(got.cpu().numpy(), case.decoded())
    got = dequantize(t(case.w), t(case.scale).t().contiguous().t(), None, None, shape=(1000, 256), axis=1,
                     block_size=32, weight_format="float4e2m1", scale_format="float8e8m0", out_dtype=torch.float16)
    np.testing.assert_array_equal(got.cpu().numpy(), case.decoded().astype(np.float16))
    x = torch.randn(64, 4096, device="cuda")
    y = quantize_dequantize(x, None, None, None, element_format="float4e2m1", axis=-1, block_size=32, mode="dynamic",
                            scale_rule="mx")
    from onnxfuse.formats import dequantize_linear
    from onnxfuse.formats.scale_rules import mx
    from onnxfuse.formats import element_format

    data, scale = mx(x.cpu().numpy(), element_format("float4e2m1"), 1, 32)
    np.testing.assert_array_equal(y.cpu().numpy(), dequantize_linear(data, scale, axis=1, block_size=32,
                                                                     output_dtype=1))


@pytest.mark.parametrize("wf", ["float4e2m1", "float8e4m3fn"])
def test_mx_scale_w_over_widely_spread_scales_on_gpu(wf):
    """MXFP4's and MXFP8's SCALE_W through the GPU's decoders (fp4 through e4m3 with fp16 A, the
    hardware e4m3 conversion, E8M0 factors relative to the row's largest cast to fp16 or bf16) over
    scales 0-60 binades apart (tests/kernel_cases.py): every SCALE_W config, with and without
    split-K, ragged N and M under BLOCK_M."""
    import importlib

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")
    from onnxfuse.kernels import inputs
    from tests.kernel_cases import assert_close_to_reference, widely_spread_mx_case

    rng = np.random.default_rng(5)
    K, N = 1024, 37
    e, sc = inputs.formats(wf, "float8e8m0")
    case = widely_spread_mx_case(rng, wf, N, K)
    dev = lambda x: torch.from_numpy(np.ascontiguousarray(x)).cuda()  # noqa: E731
    ran = 0
    for M, dtype in ((3, torch.float16), (16, torch.float16), (5, torch.bfloat16)):
        a = rng.standard_normal((M, K)).astype(np.float32)
        for cfg in D.mma_candidates(M, N, K // e.codes_per_byte, e, 32, dtype, torch.device("cuda"), scale_code=sc):
            if not cfg.get("SCALE_W"):
                continue
            for split in (1, 2):
                y = D.dequant_matmul(dev(a).to(dtype), dev(case.w), dev(case.scale), None, None, None, K=K, N=N,
                                     block_size=32, weight_format=wf, scale_format="float8e8m0",
                                     config=dict(cfg, SPLIT_K=split))
                assert_close_to_reference(y, case, a, None, dot_dtype=dtype, u=U)
                ran += 1
    assert ran


def test_time_config_replays_the_call_between_l2_flushes():
    """The autotuner's timing: fn runs once eagerly (compiles, warms up) and once a flushed call while
    the graph is captured, never during replays, which still do its work; the time is per call."""
    import importlib

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")
    x = torch.randint(-8, 8, (2**24,), device="cuda").float()  # integers: the sums below are exact
    y = torch.zeros_like(x)
    calls = []

    def fn():
        calls.append(torch.cuda.is_current_stream_capturing())
        torch.add(y, x, out=y)

    ms = D._time_config(fn)
    assert calls == [False] + [True] * D.TIMED_CALLS
    torch.cuda.synchronize()
    # eager 1 + captured-only 0 + replays: a warm-up and TIMED_REPLAYS each of TIMED_CALLS adds
    assert torch.equal(y, x * (1 + (1 + D.TIMED_REPLAYS) * D.TIMED_CALLS))
    assert 0 < ms < 1e3
