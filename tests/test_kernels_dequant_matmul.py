"""DequantMatMul kernels in Triton's interpreter (CPU) against decode_rows + float64 matmul, within
the error bound of tests/kernel_cases.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxfuse.kernels.triton_env").load()  # before triton: sets TRITON_INTERPRET without CUDA

from onnxfuse import formats  # noqa: E402
from onnxfuse.diagnostics import OnnxfuseError  # noqa: E402
from onnxfuse.kernels import reference as ref  # noqa: E402

from onnxfuse.kernels import triton_env  # noqa: E402
from onnxfuse.kernels.dequant_matmul_kernels import _f16_codes, _f16_fp4_codes  # noqa: E402
from tests.kernel_cases import assert_close_to_reference, widely_spread_mx_case  # noqa: E402

_, triton, tl = triton_env.load()

# Unit roundoff of each dtype. Triton 3.9's interpreter casts float32 -> bfloat16 by truncation
# (measured: 1 + 2^-8 + 2^-10 -> 1.0), an error of up to one ulp instead of half.
U = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11,
     torch.bfloat16: 2.0 ** -7 if triton_env.interpreting() else 2.0 ** -8}
WEIGHT_FORMATS = ["int2", "uint2", "int4", "uint4", "int8", "uint8", "float8e4m3fn", "float8e5m2", "float4e2m1",
                  "float6e2m3", "float6e3m2"]
SCALE_FORMATS = ["float32", "float16", "bfloat16", "float8e8m0", "float8e4m3fn"]
INT_FORMATS = {"int2", "uint2", "int4", "uint4", "int8", "uint8"}


def _t(x):
    return None if x is None else torch.from_numpy(np.ascontiguousarray(x))


def _run(case, a, bias, *, N, config=None, dtype=torch.float32):
    from onnxfuse.kernels.dequant_matmul import dequant_matmul

    return dequant_matmul(_t(a).to(dtype), _t(case.w), _t(case.scale), _t(case.zero_point), _t(case.global_scale),
                          None if bias is None else _t(bias).to(dtype), K=case.K, N=N, block_size=case.block_size,
                          weight_format=case.weight_format, scale_format=case.scale_format, config=config)


def _check(y, case, a, bias, *, dot_dtype):
    assert_close_to_reference(y, case, a, bias, dot_dtype=dot_dtype, u=U)


@pytest.mark.parametrize("weight_format", WEIGHT_FORMATS)
@pytest.mark.parametrize("scale_format", SCALE_FORMATS)
def test_every_format_gemv_and_gemm(weight_format, scale_format):
    rng = np.random.default_rng(abs(hash((weight_format, scale_format))) % 2**32)
    K, N = 83, 37  # K ragged against every block and tile; N ragged against the 16-row tiles
    bs = 16 if scale_format == "float8e4m3fn" else 32
    zp = weight_format in INT_FORMATS and scale_format == "float16"
    two_level = scale_format == "float8e4m3fn"
    case = ref.random_rows(rng, N, K, weight_format=weight_format, scale_format=scale_format, block_size=bs,
                           zero_point=zp, global_scale=two_level)
    shapes = [(1, torch.float32, torch.float32), (7, torch.float16, torch.float16)]
    if scale_format == "float16":  # the other GEMV widths and the fp32 tl.dot, once per element
        shapes += [(3, torch.float16, torch.float32), (9, torch.float32, torch.float32)]
    for M, dtype, dot in shapes:
        a = rng.standard_normal((M, K)).astype(np.float32)
        bias = rng.standard_normal(N).astype(np.float32) if M != 3 else None
        y = _run(case, a, bias, N=N, dtype=dtype)
        _check(y, case, a, bias, dot_dtype=dot)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_3d_activation_and_low_precision_dtypes(dtype):
    rng = np.random.default_rng(5)
    K, N = 130, 21
    case = ref.random_rows(rng, N, K, weight_format="uint4", scale_format="bfloat16", block_size=64, zero_point=True)
    for lead in ((2, 1), (2, 5)):  # M = 2 (GEMV) and M = 10 (tl.dot)
        a = rng.standard_normal((*lead, K)).astype(np.float32)
        bias = rng.standard_normal(N).astype(np.float32)
        y = _run(case, a, bias, N=N, dtype=dtype)
        assert y.shape == (*lead, N) and y.dtype == dtype
        _check(y, case, a, bias, dot_dtype=dtype if np.prod(lead) > 4 else torch.float32)


@pytest.mark.parametrize("gemv", [True, False])
def test_split_k_and_multi_block_tiles(gemv):
    """Forced configs: split-K with the fp32 workspace epilogue, several scale blocks per tile,
    and a block larger than the tile (one scale for several K steps)."""
    rng = np.random.default_rng(7)
    K, N = 200, 19
    for wf, bs in (("int4", 16), ("float8e4m3fn", 128), ("int2", 8)):
        case = ref.random_rows(rng, N, K, weight_format=wf, scale_format="float16", block_size=bs)
        if gemv:
            cfg = dict(BLOCK_N=8, BLOCK_KB=32, SPLIT_K=3, num_warps=4, num_stages=1)
            M = 4
        else:
            cfg = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_KB=16, SPLIT_K=2, num_warps=4, num_stages=1, GROUP_M=2)
            M = 20
        a = rng.standard_normal((M, K)).astype(np.float32)
        bias = rng.standard_normal(N).astype(np.float32)
        y = _run(case, a, bias, N=N, config=cfg)
        _check(y, case, a, bias, dot_dtype=torch.float32)


@pytest.mark.parametrize("wf,sf,zp", [("int4", "float16", False), ("uint4", "float16", True),
                                      ("int8", "float16", False), ("uint8", "float16", True),
                                      ("int2", "float16", False), ("float4e2m1", "float8e8m0", False),
                                      ("float4e2m1", "float8e4m3fn", False), ("float8e4m3fn", "float16", False),
                                      ("float8e5m2", "float16", False), ("int4", "bfloat16", False)])
@pytest.mark.parametrize("natural_k", [False, True], ids=["by-sub-position", "natural-k"])
def test_gemm_swap_ab(wf, sf, zp, natural_k):
    """The GEMM as W @ A^T (SWAP_AB), forced: fp16 activations with fp16 scales (integer codes) or
    NVFP4's take the fp16-lane decode (F16_CODES), bf16 and the other formats the float32 one;
    ragged M, N and K, split-K with the atomic workspace. The codes sharing a byte are one dot each
    against A's matching K positions, or interleaved into the row's K order for a single dot
    (NATURAL_K)."""
    rng = np.random.default_rng(abs(hash((wf, sf, zp))) % 2**32)
    K, N, M = 200, 37, 70
    nvfp4 = sf == "float8e4m3fn"  # its own block size and global scale
    case = ref.random_rows(rng, N, K, weight_format=wf, scale_format=sf, block_size=16 if nvfp4 else 32,
                           zero_point=zp, global_scale=nvfp4)
    for dtype, split in ((torch.float16, 1), (torch.bfloat16, 2), (torch.float16, 3)):
        cfg = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_KB=16, SPLIT_K=split, num_warps=4, num_stages=1, GROUP_M=2,
                   SWAP_AB=True, NATURAL_K=natural_k)
        a = rng.standard_normal((M, K)).astype(np.float32)
        bias = rng.standard_normal(N).astype(np.float32)
        y = _run(case, a, bias, N=N, config=cfg, dtype=dtype)
        _check(y, case, a, bias, dot_dtype=dtype)


@triton.jit
def _f16_codes_probe(w_ptr, out_ptr, SUB: tl.constexpr, BITS: tl.constexpr, SIGNED: tl.constexpr):
    offs = tl.arange(0, 256)
    tl.store(out_ptr + offs, _f16_codes(tl.load(w_ptr + offs).to(tl.int32), SUB, BITS, SIGNED))


def test_f16_codes_are_the_float32_decode():
    """_f16_codes (the fp16-lane integer decode) gives every code of every integer format exactly."""
    from onnxfuse.kernels import inputs

    byte = torch.arange(256, dtype=torch.uint8)
    for name in sorted(INT_FORMATS):
        e, _ = inputs.formats(name, "float16")
        for sub in range(e.codes_per_byte):
            got = torch.empty(256, dtype=torch.float16)
            _f16_codes_probe[(1,)](byte, got, SUB=sub, BITS=e.bits, SIGNED=e.signed)
            field = (np.arange(256) >> (sub * e.bits)) & ((1 << e.bits) - 1)
            want = np.where(field >= (1 << (e.bits - 1)), field - (1 << e.bits), field) if e.signed else field
            np.testing.assert_array_equal(got.numpy(), want.astype(np.float16), err_msg=f"{name} sub {sub}")


@triton.jit
def _f16_fp4_codes_probe(w_ptr, out_ptr, SUB: tl.constexpr):
    offs = tl.arange(0, 256)
    tl.store(out_ptr + offs, _f16_fp4_codes(tl.load(w_ptr + offs).to(tl.int32), SUB))


def test_fp16_lane_codes_are_the_exact_cases():
    """W @ A^T decodes in fp16 lanes where q * s rounds as the float32 decode cast to fp16 does:
    integer codes with fp16 scales, and NVFP4 (e2m1 with E4M3 scales, exact); not MXFP4 (E8M0
    scales outside fp16) nor e2m1 with fp16 scales (times 2^-14 it would round in fp16's subnormals)."""
    from onnxfuse.kernels import inputs
    from onnxfuse.kernels.dequant_matmul import fp16_lane_codes

    def lanes(wf, sf):
        return fp16_lane_codes(*inputs.formats(wf, sf))

    assert lanes("int4", "float16") and lanes("uint8", "float16") and lanes("float4e2m1", "float8e4m3fn")
    assert not any(lanes(wf, sf) for wf, sf in (("int4", "bfloat16"), ("int4", "float32"), ("float4e2m1", "float8e8m0"),
                                                ("float4e2m1", "float16"), ("float8e4m3fn", "float16")))


def test_f16_fp4_codes_are_the_e2m1_values_times_2_to_the_minus_14():
    """_f16_fp4_codes gives both e2m1 codes of every byte exactly, times 2^-14 (0.5 as fp16's subnormal)."""
    e = formats.element_format("float4e2m1")
    byte = torch.arange(256, dtype=torch.uint8)
    for sub in range(2):
        got = torch.empty(256, dtype=torch.float16)
        _f16_fp4_codes_probe[(1,)](byte, got, SUB=sub)
        want = e.decode((np.arange(256) >> (4 * sub)) & 0xF).astype(np.float64) * 2.0**-14
        np.testing.assert_array_equal(got.numpy().astype(np.float64), want, err_msg=f"sub {sub}")


MMA_CASES = [  # (weight_format, scale_format, block_size, zero point, two-level)
    ("int4", "float16", 32, False, False), ("uint4", "float16", 64, True, False),
    ("int8", "float32", 32, False, False), ("uint8", "bfloat16", 32, True, False),
    ("float8e4m3fn", "float16", 32, False, False), ("float8e5m2", "float8e8m0", 32, False, False),
    ("float4e2m1", "float8e8m0", 32, False, False), ("float4e2m1", "float8e4m3fn", 32, False, True),
    ("float6e3m2", "float8e8m0", 32, False, False), ("float4e2m1", "float8e4m3fn", 16, False, True),
    ("int4", "bfloat16", 16, False, False), ("float8e4m3fn", "float8e8m0", 32, False, False),
]
MX_SCALE_W = {("float4e2m1", "float8e8m0"), ("float8e4m3fn", "float8e8m0")}  # MXFP4, MXFP8 e4m3


@pytest.mark.parametrize("case_args", MMA_CASES, ids=lambda c: f"{c[0]}-{c[1]}-b{c[2]}")
def test_swap_ab_tensor_core_kernel(case_args):
    """The swap-AB kernel forced at M = 1, 3 and 16, fp16 and bf16, ragged N, K even (A loaded as
    32-bit pairs) and odd (A loaded per K position), one and two K steps per split (split-K 2), and
    whole tiles (the unmasked loop, A's rows past M clamped to row M - 1; fp6 packs K unevenly). At
    M = 1 without a zero point a dot covers up to 8 chunks (the block-diagonal activation operand).
    NVFP4 folds its E4M3 scales into the codes (SCALE_W): 64-byte dots over 8-byte blocks; other
    8-byte blocks need 2 chunks a dot, so they run at M <= 4 only. Integer codes with fp16 scales and
    A in blocks under 64 bytes take SCALE_W too (64-byte dots over 16- and 32-byte blocks, products
    rounded to fp16), a zero point included, and so do MXFP4 and MXFP8 e4m3 (E8M0 factors relative to
    the row's largest scale; e4m3 in 128-byte dots here). Two and four row tiles a program (ROW_TILES,
    sharing each activation operand): ragged N, N a whole number of single tiles only, and whole groups."""
    import importlib

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")
    from onnxfuse.kernels import inputs

    wf, sf, bs, zp, two = case_args
    rng = np.random.default_rng(abs(hash(case_args)) % 2**32)
    e, sc = inputs.formats(wf, sf)
    for K, N, M, dtype, split, tiles in ((166, 37, 1, torch.float16, 1, 1), (166, 37, 3, torch.bfloat16, 2, 1),
                                         (165, 37, 16, torch.float16, 2, 1), (165, 37, 16, torch.bfloat16, 1, 1),
                                         (512, 48, 3, torch.float16, 2, 1), (512, 48, 16, torch.bfloat16, 1, 1),
                                         (165, 37, 16, torch.float16, 2, 2), (512, 48, 16, torch.float16, 1, 2),
                                         (512, 64, 16, torch.bfloat16, 2, 2), (165, 37, 4, torch.float16, 1, 4),
                                         (512, 64, 16, torch.float16, 2, 4)):
        Kb = (K * e.bits + 7) // 8
        cfgs = D.mma_candidates(M, N, Kb, e, bs, dtype, torch.device("cpu"), zero_point=zp, scale_code=sc)
        if bs * e.bits // 8 < 16 and M > 4 and sf != "float8e4m3fn":
            assert not cfgs
            continue
        (cfg,) = cfgs
        fp16_scaled_ints = wf in INT_FORMATS and sf == "float16" and dtype == torch.float16 and bs * e.bits // 8 < 64
        assert cfg["SCALE_W"] == (sf == "float8e4m3fn" or fp16_scaled_ints or (wf, sf) in MX_SCALE_W)
        case = ref.random_rows(rng, N, K, weight_format=wf, scale_format=sf, block_size=bs, zero_point=zp,
                               global_scale=two)
        cfg = dict(cfg, SPLIT_K=split, ROW_TILES=tiles)
        # the unmasked loop (A's rows past M clamped) on whole tiles of whole-byte K, else the masked one
        whole = K == 512 and e.bits in (4, 8) and N % (cfg["BLOCK_N"] * tiles) == 0
        assert D.mma_tiles_evenly(N, K, Kb, e, cfg) == whole, (K, N, cfg)
        a = rng.standard_normal((M, K)).astype(np.float32)
        bias = rng.standard_normal(N).astype(np.float32)
        y = _run(case, a, bias, N=N, config=cfg, dtype=dtype)
        _check(y, case, a, bias, dot_dtype=dtype)


def _column_major(t):
    return None if t is None else t.t().contiguous().t()


@pytest.mark.parametrize("wf,sf,bs,zp,two", [("uint4", "float16", 32, True, False),
                                             ("float4e2m1", "float8e8m0", 32, False, False),
                                             ("float4e2m1", "float8e4m3fn", 16, False, True),
                                             ("int2", "bfloat16", 16, True, False)])
def test_column_major_scales_give_the_same_result(wf, sf, bs, zp, two):
    """Scale and zero point stored column-major (the layout a session loads them in,
    kernels/constant_layout.py): GEMV, GEMM, swap-AB and materialising configs, bit for bit the
    row-major result (the same float32 operations in the same order)."""
    import importlib

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")
    from onnxfuse.kernels import inputs

    rng = np.random.default_rng(11)
    K, N = 166, 37
    e, sc_code = inputs.formats(wf, sf)
    case = ref.random_rows(rng, N, K, weight_format=wf, scale_format=sf, block_size=bs, zero_point=zp, global_scale=two)
    w, sc, z, gs = (_t(x) for x in (case.w, case.scale, case.zero_point, case.global_scale))
    cpu = torch.device("cpu")
    for M, dtype in ((1, torch.float32), (3, torch.float16), (20, torch.float16)):
        cfgs = (D.gemv_candidates if M <= 4 else D.gemm_candidates)(M, N, w.shape[1], e, cpu)
        cfgs += D.mma_candidates(M, N, w.shape[1], e, bs, dtype, cpu, zero_point=zp, scale_code=sc_code)
        cfgs += [dict(MATERIALISE=True)]
        a = torch.from_numpy(rng.standard_normal((M, K)).astype(np.float32)).to(dtype)
        for cfg in cfgs:
            kw = dict(K=K, N=N, block_size=bs, weight_format=wf, scale_format=sf, config=cfg)
            y_row = D.dequant_matmul(a, w, sc, z, gs, None, **kw)
            y_col = D.dequant_matmul(a, w, _column_major(sc), _column_major(z), gs, None, **kw)
            assert torch.equal(y_row, y_col), cfg
        _check(y_col, case, a.float().numpy(), None, dot_dtype=dtype)


def test_nvfp4_codes_times_their_scales_are_exact_in_fp16_and_bf16():
    """SCALE_W's premise: every e2m1 value times every finite E4M3 value is exact in fp16 (also as
    the PTX decoder's value * 2^-6, and the interpreter's 2^-14) and in bf16."""
    import ml_dtypes

    e2m1 = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    e4m3 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    prod = np.outer(e2m1, e4m3[np.isfinite(e4m3)])
    for dt, factor in ((np.float16, 1.0), (np.float16, 2.0 ** -6), (np.float16, 2.0 ** -14), (ml_dtypes.bfloat16, 1.0)):
        np.testing.assert_array_equal((prod * factor).astype(dt).astype(np.float64), prod * factor)


@pytest.mark.parametrize("wf", ["float4e2m1", "float8e4m3fn"])
def test_mx_scale_w_over_widely_spread_and_special_scales(wf):
    """MXFP4's and MXFP8's SCALE_W scales each code by its E8M0 scale relative to the largest of its
    row's blocks in the program's K range: exact within 2^23 (e2m1) or 2^15 (e4m3) of it, rounded to
    fp16 below (within the dot's error bound); code 0 (2^-127), spreads of 0-60 binades and one large
    scale anywhere in a row or a split give the reference result, and a NaN scale (0xFF) makes its
    row NaN, as the per-chunk scales do. Two and four dots a K step (the scales of a step's dots
    loaded at once), a step past a split's end included."""
    import importlib

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")
    from onnxfuse.kernels import inputs

    rng = np.random.default_rng(5)
    K, N = 256, 21
    e, sc = inputs.formats(wf, "float8e8m0")
    case = widely_spread_mx_case(rng, wf, N, K)
    for M, dtype, split, ndot in ((3, torch.float16, 1, 2), (16, torch.bfloat16, 1, 2), (3, torch.float16, 2, 2),
                                  (16, torch.float16, 1, 4), (3, torch.bfloat16, 2, 4)):
        (cfg,) = D.mma_candidates(M, N, K // e.codes_per_byte, e, 32, dtype, torch.device("cpu"), scale_code=sc)
        assert cfg["SCALE_W"]
        cfg = dict(cfg, SPLIT_K=split, BLOCK_KB=ndot * cfg["CHUNK"])  # 2 or 4 dots' scales in one load a K step
        a = rng.standard_normal((M, K)).astype(np.float32)
        _check(_run(case, a, None, N=N, config=cfg, dtype=dtype), case, a, None, dot_dtype=dtype)
        nan_case = dataclasses.replace(case, scale=case.scale.copy())
        nan_case.scale[7, 5] = 0xFF
        y = _run(nan_case, a, None, N=N, config=cfg, dtype=dtype)
        assert torch.isnan(y[:, 7]).all() and not torch.isnan(y[:, np.arange(N) != 7]).any()


def test_swap_ab_kernel_declines_what_it_cannot_tile():
    import importlib

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")
    from onnxfuse.kernels import inputs

    cpu = torch.device("cpu")
    e4, _ = inputs.formats("int4", "float16")
    assert D.mma_candidates(1, 64, 64, e4, 32, torch.float16, cpu)
    assert D.mma_candidates(4, 64, 64, e4, 16, torch.float16, cpu)  # 8-byte blocks: two chunks a dot
    assert not D.mma_candidates(8, 64, 64, e4, 16, torch.float16, cpu)  # a dot needs K >= 16 bytes
    fp4, e4m3 = inputs.formats("float4e2m1", "float8e4m3fn")
    assert D.mma_candidates(16, 64, 64, fp4, 16, torch.float16, cpu, scale_code=e4m3)  # NVFP4: scales in the codes
    assert not D.mma_candidates(16, 64, 64, fp4, 16, torch.float16, cpu)
    assert not D.mma_candidates(1, 64, 64, e4, 16, torch.float16, cpu, zero_point=True)  # one chunk a dot
    assert not D.mma_candidates(1, 64, 64, e4, 32, torch.float32, cpu)  # fp32 A
    assert not D.mma_candidates(17, 64, 64, e4, 32, torch.float16, cpu)
    e2, _ = inputs.formats("int2", "float16")
    assert not D.mma_candidates(1, 64, 32, e2, 128, torch.float16, cpu)  # four codes a byte


def test_block_sizes_outside_the_tiled_path():
    """Odd and byte-splitting block sizes take the exact materialising path."""
    rng = np.random.default_rng(11)
    for wf, bs in (("int4", 3), ("int2", 6), ("int8", 24)):
        case = ref.random_rows(rng, 13, 50, weight_format=wf, scale_format="float32", block_size=bs)
        for M in (1, 6):
            a = rng.standard_normal((M, 50)).astype(np.float32)
            y = _run(case, a, None, N=13)
            _check(y, case, a, None, dot_dtype=torch.float32)


def test_every_output_written_and_nan_weights_propagate():
    rng = np.random.default_rng(3)
    case = ref.random_rows(rng, 9, 40, weight_format="float8e4m3fn", scale_format="float32", block_size=32)
    w = case.w.copy()
    w[4, 7] = 0x7F  # an e4m3 NaN code
    case.w = w
    a = rng.standard_normal((2, 40)).astype(np.float32)
    from onnxfuse.kernels.dequant_matmul import dequant_matmul

    out = torch.full((2, 9), 12345.0)
    dequant_matmul(_t(a), _t(case.w), _t(case.scale), None, None, None, K=40, N=9, block_size=32,
                   weight_format="float8e4m3fn", scale_format="float32", out=out)
    assert torch.isnan(out[:, 4]).all()
    keep = [i for i in range(9) if i != 4]
    assert not torch.any(out[:, keep] == 12345.0)


def test_bad_inputs_raise_onnxfuse_errors():
    rng = np.random.default_rng(1)
    case = ref.random_rows(rng, 8, 32, weight_format="int4", scale_format="float16", block_size=16)
    a = rng.standard_normal((1, 32)).astype(np.float32)
    with pytest.raises(OnnxfuseError, match="K=29"):  # 16 bytes a row hold 31 or 32 int4 codes, not 29
        _run(ref.RowCase(case.w, case.scale, None, None, 29, 16, "int4", "float16"), a[:, :29], None, N=8)
    with pytest.raises(OnnxfuseError, match="weight_format"):
        _run(ref.RowCase(case.w, case.scale, None, None, 32, 16, "int5", "float16"), a, None, N=8)
    with pytest.raises(OnnxfuseError, match="scale has shape"):
        _run(ref.RowCase(case.w, case.scale[:, :1], None, None, 32, 16, "int4", "float16"), a, None, N=8)
    with pytest.raises(OnnxfuseError, match="zero points are not allowed"):
        c = ref.random_rows(rng, 8, 32, weight_format="float4e2m1", scale_format="float16", block_size=16)
        _run(ref.RowCase(c.w, c.scale, np.zeros((8, 2), np.uint8), None, 32, 16, "float4e2m1", "float16"), a, None, N=8)


def test_decoders_match_the_format_tables_for_every_code():
    """All 256 byte values through the row kernel: bitwise equal to each format's table."""
    from onnxfuse.kernels.dequant_ops import dequantize

    for wf in WEIGHT_FORMATS:
        e = formats.element_format(wf)
        cpb = e.row_codes_per_byte
        K = 256 * cpb
        packed = np.arange(256, dtype=np.uint8).reshape(1, 256)
        scale = np.ones((1, 1), np.float32)
        got = dequantize(_t(packed), _t(scale), None, None, shape=(1, K), axis=1, block_size=K, weight_format=wf,
                         scale_format="float32", out_dtype=torch.float32).numpy()
        want = formats.decode_rows(packed, scale, None, K=K, block_size=K, element=wf, scale="float32")
        np.testing.assert_array_equal(got.view(np.uint32)[~np.isnan(want)], want.view(np.uint32)[~np.isnan(want)])
        assert np.array_equal(np.isnan(got), np.isnan(want)), wf
    for sf in SCALE_FORMATS:
        f = formats.scale_format(sf)
        if sf in ("float32", "float16"):
            stored = np.linspace(-3, 3, 256).astype(f.storage_dtype).reshape(1, 256)
        elif sf == "bfloat16":
            stored = (np.arange(256, dtype=np.uint16) * 251).reshape(1, 256)
        else:
            stored = np.arange(256, dtype=np.uint8).reshape(1, 256)
        packed = np.full((1, 256), 0x02, np.uint8)  # int8 code 2 everywhere
        got = dequantize(_t(packed), _t(stored), None, None, shape=(1, 256), axis=1, block_size=1, weight_format="int8",
                         scale_format=sf, out_dtype=torch.float32).numpy()
        want = formats.decode_rows(packed, stored, None, K=256, block_size=1, element="int8", scale=sf)
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32), err_msg=sf)
        assert np.array_equal(np.isnan(got), np.isnan(want)), sf
