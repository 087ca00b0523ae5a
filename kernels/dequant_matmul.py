"""DequantMatMul: dispatch by problem shape, launch configs, autotuning.

  M <= 4           dqmm_gemv_kernel (FP32 FMAs on in-place decoded codes, split-K so every layer
                   fills the SMs; see kernels/dequant_gemv_kernel.py)
  4 < M            dqmm_gemm_kernel (tl.dot, fp16/bf16 operands, fp32 accumulate; split-K for small M)
  M <= 16          the autotuner also times dqmm_mma_kernel (swap-AB tensor cores for fp16/bf16 A;
                   see kernels/dequant_mma_kernel.py)
  M >= 256         the autotuner may instead pick "materialise": decode W once to A's dtype and
                   run cuBLAS, when that measures faster (the decode is one pass over W)
  other blocks     block sizes that are not a power of two or split a byte: materialise (exact,
                   any block size)
"""

from __future__ import annotations

import contextlib
import math
import statistics

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.kernels import autotune, format_codes, inputs, triton_env
from onnxfuse.kernels.decode_ptx import FP4_E4M3_EXP
from onnxfuse.kernels.dequant_gemv_kernel import dqmm_gemv_kernel, splitk_sum_kernel
from onnxfuse.kernels.dequant_matmul_kernels import dqmm_gemm_kernel, splitk_epilogue_kernel
from onnxfuse.kernels.dequant_mma_kernel import dqmm_mma_kernel
from onnxfuse.kernels.dequant_rows import decode_rows_device
from onnxfuse.kernels.launch_math import cdiv, next_pow2, pow2_floor

torch, triton, tl = triton_env.load()

GEMV_MAX_M = 4
MMA_MAX_M = 16
GEMM_SPLIT_MAX_M = 64  # the tl.dot GEMM splits K (atomic adds) up to this M


def _sm_count(device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _split_for(programs: int, k_steps: int, sms: int, target_per_sm: int) -> int:
    """Split K until about target_per_sm programs per SM exist, keeping >= 4 K steps per split."""
    want = max(1, (target_per_sm * sms) // max(programs, 1))
    return max(1, min(pow2_floor(want), pow2_floor(max(1, k_steps // 4))))


def _tile_shape(element, block_size: int, block_kb: int) -> tuple[int, int]:
    """(NG, BSB): a K step of block_kb bytes as NG scale blocks of BSB bytes."""
    bsb = min(block_size // element.codes_per_byte, block_kb)
    return block_kb // bsb, bsb


def gemv_candidates(M, N, Kb, element, device) -> list[dict]:
    """A few (rows, bytes) tiles that give each thread several rows x 16 bytes, each with the
    split-K that makes about 8 programs per SM: the GEMV must keep every SM streaming. From M = 2
    the tl.dot kernel's small-M configs compete too (GEMM=True)."""
    sms = _sm_count(device)
    if triton_env.interpreting():
        return [dict(BLOCK_N=16, BLOCK_KB=32, SPLIT_K=1, num_warps=4, num_stages=1)]
    out = []
    # Measured on the H200 (2026-12-02): (32, 256) unpipelined won nearly every large-layer case; a
    # manual register prefetch of the next K step and 512-byte steps were slower, so neither is here.
    # LOOP_STAGES 3 (tl.range pipelining: cp.async into shared memory, 2 tiles in flight) timed within
    # a few percent of the plain loop (2026-12-03, M = 1: ahead for mxfp4, behind for mxfp8).
    tiles = [(32, 256, 4, 1), (64, 128, 4, 1), (32, 128, 2, 1), (16, 1024, 4, 1), (32, 256, 4, 3), (64, 128, 4, 3)]
    for bn, bkb, warps, loop_stages in tiles:
        bkb = max(16, min(bkb, next_pow2(Kb)))
        split = _split_for(cdiv(N, bn), cdiv(Kb, bkb), sms, 8)
        out.append(dict(BLOCK_N=bn, BLOCK_KB=bkb, SPLIT_K=split, num_warps=warps, num_stages=3,
                        LOOP_STAGES=loop_stages))
    if M > 1:  # FP32 FMAs grow with M: from M = 2 the tl.dot kernel may already be faster
        out += [dict(c, GEMM=True) for c in gemm_candidates(M, N, Kb, element, device)[:2]]
    return out


# Signed integers' sign bits, flipped once per byte so each field is code + half (kernels/dequant_gemv_kernel.py)
_SIGN_FLIP = {"int2": 0xAA, "int4": 0x88, "int8": 0x80}


def _gemv_act_scaling(element, hw: bool) -> tuple[float, int]:
    """(ACT_BASE, ACT_SHIFT): sub-position s's activations are scaled by ACT_BASE / 2^(s * ACT_SHIFT).
    fp4 decodes to value * 2^-6 on the GPU (through e4m3), value * 2^-14 in the interpreter."""
    if not element.is_float:
        return 1.0, element.bits
    if element.name == "float4e2m1":
        return float(2 ** FP4_E4M3_EXP) if hw else 16384.0, 0
    return 1.0, 0


def gemm_candidates(M, N, Kb, element, device) -> list[dict]:
    cpb = element.codes_per_byte
    if triton_env.interpreting():
        return [dict(BLOCK_M=16, BLOCK_N=16, BLOCK_KB=16, SPLIT_K=1, num_warps=4, num_stages=1, GROUP_M=4)]
    sms = _sm_count(device)
    out = []
    if M <= GEMM_SPLIT_MAX_M:
        bm = max(16, next_pow2(M))
        shapes = ((bm, 64, 128 // cpb, 4, 4), (bm, 128, 128 // cpb, 4, 4), (bm, 128, 256 // cpb, 8, 3))
    else:
        shapes = ((128, 128, 64 // cpb, 8, 4),)
    for bm, bn, bkb, warps, stages in shapes:
        bkb = max(16, bkb)
        progs = cdiv(M, bm) * cdiv(N, bn)
        split = _split_for(progs, cdiv(Kb, bkb), sms, 2) if M <= GEMM_SPLIT_MAX_M else 1
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_KB=bkb, SPLIT_K=split, num_warps=warps,
                        num_stages=stages, GROUP_M=8))
    if M > 64:  # the same tile as W @ A^T (SWAP_AB; fp16 codes where exact): 1.4-1.8x A @ W^T at M >= 1024
        out += [dict(c, SWAP_AB=True) for c in out]
    if M >= 256:  # decoding W once (~3.7 TB/s) then cuBLAS: 1.7-2.4x the tl.dot GEMM at M = 1024 (H200)
        out.append(dict(MATERIALISE=True))
    return out


def natural_k_configs(M, N, Kb, element, device, *, block_size, scale_code) -> list[dict]:
    """W @ A^T tiles whose weight operand is interleaved in registers into the row's K order
    (NATURAL_K): A's tile then reaches shared memory by cp.async as it lies, instead of split into
    sub-positions in registers and stored again, and the K loop's wgmmas overlap. In the sm_90 SASS
    (benchmarks/kernels_sass.py --kernel gemm) ptxas serialises them again with more than four a
    warpgroup a K step (64 codes) or with exactly two 1-byte scales of a row a step (so block-32 E8M0
    and E4M3 scales take 32-code steps; four, NVFP4's 64 codes, overlap). Not candidates yet: no GPU
    has timed them (benchmarks/kernels_gemm.py does). With one code a byte (int8, fp8, MXFP8)
    NATURAL_K changes nothing: these differ from the candidate W @ A^T tile only by the 256-row tile
    and, for block-32 1-byte scales, the step."""
    if M <= GEMM_SPLIT_MAX_M:
        return []
    codes = 32 if scale_code.torch_storage == "uint8" and block_size == 32 else 64
    bkb = max(16, codes // element.codes_per_byte)
    return [dict(BLOCK_M=bm, BLOCK_N=128, BLOCK_KB=bkb, SPLIT_K=1, num_warps=8, num_stages=stages, GROUP_M=8,
                 SWAP_AB=True, NATURAL_K=True) for bm, stages in ((128, 4), (256, 3))]


def fp16_lane_codes(element, scale_code) -> bool:
    """Whether W @ A^T with fp16 A decodes the codes in fp16 lanes (F16_CODES in
    kernels/dequant_matmul_kernels.py; bit-identical there): integers with fp16 scales, and NVFP4."""
    return ((not element.is_float and scale_code.name == "float16")
            or (element.name, scale_code.name) == ("float4e2m1", "float8e4m3fn"))


def _scale_folds_into_codes(element, scale_code, zero_point) -> bool:
    """NVFP4: an e2m1 code times its E4M3 block scale is exact in fp16 and bf16 (SCALE_W in
    kernels/dequant_mma_kernel.py)."""
    return (not zero_point and scale_code is not None
            and (element.name, scale_code.name) == ("float4e2m1", "float8e4m3fn"))


def _e8m0_folds_into_codes(element, scale_code, zero_point) -> bool:
    """MXFP4 and MXFP8 (e4m3): codes times their E8M0 scales relative to the row's largest, exact in
    fp16 within 2^23 (e2m1) or 2^15 (e4m3) of it (SCALE_W in kernels/dequant_mma_kernel.py)."""
    return (not zero_point and scale_code is not None and scale_code.name == "float8e8m0"
            and element.name in ("float4e2m1", "float8e4m3fn"))


def _scale_rounds_into_codes(element, scale_code, a_dtype, bsb: int) -> bool:
    """Integer codes with fp16 scales and A, blocks under 64 bytes: SCALE_W rounds (q - z) * s once,
    as the tl.dot GEMM's operand (kernels/dequant_mma_kernel.py)."""
    return (a_dtype == torch.float16 and scale_code is not None and scale_code.name == "float16"
            and not element.is_float and bsb < 64)


def mma_candidates(M, N, Kb, element, block_size, a_dtype, device, *, zero_point=False,
                   scale_code=None) -> list[dict]:
    """Configs of the swap-AB tensor-core kernel, [] where it does not apply: fp16/bf16 A, M <= 16,
    at most two codes a byte, and a dot K of at least 16 bytes. BLOCK_N is 16 rows per warp, the
    shape whose weight loads Triton makes directly in the dot operand layout (in the sm_90 SASS, 32
    rows a warp went through shared memory byte by byte); split-K aims at about 32 warps per SM.

    GROUP chunks share one dot through a block-diagonal activation operand (GROUP * BLOCK_M columns
    within the 8 an mma computes anyway, so no extra tensor-core work): fewer dots, so fewer
    activation stagings, but a [rows, columns] scale tile that Triton passes through shared memory
    and more registers. Measured on the H200 (benchmarks/RESULTS.md): at M = 1 dots of 64 and 128
    bytes beat one 16-byte chunk a dot, and which of the two wins varies by format and layer, so
    both are timed; at M = 4, GROUP 2 lost to GROUP 1, so it is kept for 8-byte blocks (NVFP4),
    which need it. A zero point is subtracted from the code before the dot, one per row and dot:
    GROUP 1. NVFP4 folds its block scales into the codes instead (SCALE_W): one chunk a dot of 16 or
    64 bytes, blocks or not (1.1-1.2x GROUP 8 at M = 1, 1.8-1.9x the tl.dot GEMM at M = 16). Integer
    codes with fp16 scales in blocks under 64 bytes (int4 block 32) also get SCALE_W configs, 64-byte
    dots (products rounded to fp16 as in the tl.dot GEMM): 1.3-1.5x the per-chunk scales at M = 4 and
    1.5-1.7x at M = 16, where 16-byte dots never won; at M = 1 the two are close (the autotuner picked
    per-chunk), and for 64-byte blocks (int4 block 128) SCALE_W lost by 3-8%. MXFP4 gets 64-byte
    SCALE_W dots too (E8M0 factors relative to the row's largest scale): 1.3-1.4x at M = 4-8; MXFP8
    (e4m3) 64- and 128-byte ones: 1.15x at M = 4, 1.26-1.36x at M = 16 (H100). From M = 8 the
    programs have 1-2 warps (up to M = 4 also 4, compiled to mma.sync like every swap-AB program:
    _launch). 4 and 8 (BLOCK_N 64 and 128) were timed at M = 16 as wgmma, Triton's choice for them,
    and never picked (H100, benchmarks/RESULTS.md, stop 31); with 1, 2 or 4 row tiles the best of
    them ran at 0.83-1.01x the tuner's best at M = 4 and 16 (H100, stop 38); as mma.sync, 0.88-0.98x
    at M = 16 (H100, stop 39; `benchmarks/kernels_gemv.py --wide` times them). The pipelined shapes
    are also timed with two row tiles a program (ROW_TILES, sharing each activation operand): up to
    1.08x at M = 16; four were never picked (H100, benchmarks/RESULTS.md, stops 34-35)."""
    bsb = block_size // element.codes_per_byte
    if M > MMA_MAX_M or a_dtype not in (torch.float16, torch.bfloat16) or element.codes_per_byte > 2:
        return []
    bm = next_pow2(M)
    if _scale_folds_into_codes(element, scale_code, zero_point):
        dots = [(16, 1, True), (64, 1, True)]  # (CHUNK, GROUP, SCALE_W)
    else:
        chunk = min(bsb, 128)
        need = cdiv(16, chunk)  # a dot's K is at least 16 bytes
        dots = []
        if not (need > 1 and (zero_point or need * bm > 8)):
            groups = [need]
            if bm == 1 and not zero_point:
                groups = sorted({max(need, min(8, dk // chunk)) for dk in (64, 128)})
            dots = [(chunk, g, False) for g in groups]
        if _scale_rounds_into_codes(element, scale_code, a_dtype, bsb) or \
                (_e8m0_folds_into_codes(element, scale_code, zero_point) and bsb < 64):
            dots.append((64, 1, True))
            if element.codes_per_byte == 1:  # MXFP8, int8: also 128-byte dots, the size fp8 block 128 wins with
                dots.append((128, 1, True))
    if not dots:
        return []
    if triton_env.interpreting():
        chunk, g, scale_w = dots[-1]
        return [dict(MMA=True, BLOCK_M=bm, BLOCK_N=16, CHUNK=chunk, GROUP=g, BLOCK_KB=2 * chunk * g, SPLIT_K=1,
                     num_warps=1, num_stages=1, LOOP_STAGES=2, SCALE_W=scale_w, ROW_TILES=1)]
    sms = _sm_count(device)
    out = []
    # (warps, bytes per K step, LOOP_STAGES, ROW_TILES); the pipelined loops are the shapes that won
    # with them, also with two row tiles a program
    shapes = [(2, 256, 1, 1), (1, 256, 1, 1), (2, 128, 1, 1)] + ([(4, 256, 1, 1)] if bm < 8 else [])
    shapes += [(w, st, ls, rt) for rt in (1, 2) for w, st, ls in ((1, 256, 2), (1, 256, 3), (2, 128, 2), (2, 128, 3))]
    for chunk, group, scale_w in dots:
        for warps, step, loop_stages, tiles in shapes:
            step = max(chunk * group, min(step, next_pow2(Kb)))
            split = _split_for(cdiv(N, 16 * warps * tiles), cdiv(Kb, step), sms, 32 // warps)
            out.append(dict(MMA=True, BLOCK_M=bm, BLOCK_N=16 * warps, CHUNK=chunk, GROUP=group, BLOCK_KB=step,
                            SPLIT_K=split, num_warps=warps, num_stages=1, LOOP_STAGES=loop_stages,
                            SCALE_W=scale_w, ROW_TILES=tiles))
    return out


def tuning_candidates(M, N, Kb, element, block_size, a_dtype, device, *, zero_point=False,
                      scale_code=None) -> list[dict]:
    """Every config the autotuner times for this case: the GEMV's (M <= 4) or the GEMM's, and,
    when tuning, the swap-AB kernel's (without tuning the first of the list runs)."""
    cands = (gemv_candidates if M <= GEMV_MAX_M else gemm_candidates)(M, N, Kb, element, device)
    if autotune.tuning_enabled():
        cands = cands + mma_candidates(M, N, Kb, element, block_size, a_dtype, device, zero_point=zero_point,
                                       scale_code=scale_code)
    return cands


def _run(kernel, grid, compile_only: bool, *args, **constants):
    """kernel[grid](*args, **constants), or only its compilation (Triton's warmup) if compile_only."""
    if compile_only:
        kernel.warmup(*args, grid=grid, **constants)
    else:
        kernel[grid](*args, **constants)


def _mma_sync(cfg) -> bool:
    """A swap-AB program of 4 or 8 warps: its dots must compile to mma.sync (triton_env.mma_sync_dots)."""
    return bool(cfg.get("MMA")) and cfg["num_warps"] >= 4


def _launch(a2, w, s, z, gs, bias, out2, *, K, N, block_size, element, scale_code, cfg, compile_only: bool = False):
    M = a2.shape[0]
    gemv = M <= GEMV_MAX_M and not _not_gemv(cfg)  # the GEMV kernel runs cfg (else the GEMM, MMA or materialise)
    Kb = w.shape[1]
    G = s.shape[1]
    if cfg.get("MATERIALISE"):
        if compile_only:  # a library matmul and one decode kernel: nothing worth compiling ahead
            return out2
        return _materialise(a2, w, s, z, gs, bias, out2, K=K, block_size=block_size, element=element,
                            scale_code=scale_code)
    nb, bkb = cfg["BLOCK_N"], cfg["BLOCK_KB"]
    mma = bool(cfg.get("MMA"))
    kb_per_split = cdiv(cdiv(Kb, cfg["SPLIT_K"]), bkb) * bkb
    split = cdiv(Kb, kb_per_split)
    dummy = w
    common = dict(WFMT=element.id, SFMT=scale_code.id, BITS=element.bits, CPB=element.codes_per_byte,
                  BS=block_size, HAS_ZP=z is not None, HAS_GS=gs is not None, HAS_BIAS=bias is not None,
                  BLOCK_N=nb, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if compile_only:  # only the workspace's dtype and alignment reach the compiled kernel
        ws = torch.empty(1, dtype=torch.float32, device=a2.device) if split > 1 else out2
    elif gemv or mma:
        ws = torch.empty((split, M, N), dtype=torch.float32, device=a2.device) if split > 1 else out2
    else:
        ws = torch.zeros((M, N), dtype=torch.float32, device=a2.device) if split > 1 else out2
    args = (a2, w, s, z if z is not None else dummy, gs if gs is not None else dummy,
            bias if bias is not None else dummy, out2, ws, M, N, K, Kb, G, a2.stride(0), w.stride(0),
            s.stride(0), s.stride(1), z.stride(0) if z is not None else 0, z.stride(1) if z is not None else 0,
            out2.stride(0), kb_per_split)
    hw = not triton_env.interpreting()
    bias_or_dummy = bias if bias is not None else dummy
    if mma:
        # inline-PTX decoders: fp16 A on a GPU, integer and fp4 codes; A's code pairs as one 32-bit load
        asm = hw and a2.dtype == torch.float16 and (not element.is_float or element.name == "float4e2m1")
        pairs = element.codes_per_byte == 2 and K % 2 == 0 and a2.stride(0) % 2 == 0 and a2.data_ptr() % 4 == 0
        with triton_env.mma_sync_dots() if _mma_sync(cfg) else contextlib.nullcontext():
            _run(
                dqmm_mma_kernel, (cdiv(N, nb * cfg.get("ROW_TILES", 1)), split), compile_only, *args,
                BLOCK_M=cfg["BLOCK_M"], CHUNK=cfg["CHUNK"], GROUP=cfg["GROUP"],
                NDOT=bkb // (cfg["CHUNK"] * cfg["GROUP"]), USE_WS=split > 1, ASM=asm,
                HW_FP8=hw, ACT_PAIRS=pairs, DECODE_EXP=FP4_E4M3_EXP if asm and element.name == "float4e2m1" else 0,
                DOT_F32=a2.dtype == torch.bfloat16 and not hw, LOOP_STAGES=cfg.get("LOOP_STAGES", 1),
                SCALE_W=bool(cfg.get("SCALE_W")), EVEN=mma_tiles_evenly(N, K, Kb, element, cfg),
                ROW_TILES=cfg.get("ROW_TILES", 1), **common)
    elif gemv:
        ng, bsb = _tile_shape(element, block_size, bkb)
        bm = 1 if M == 1 else (2 if M == 2 else 4)
        act_base, act_shift = _gemv_act_scaling(element, hw)
        _run(dqmm_gemv_kernel, (cdiv(N, nb), split), compile_only, *args, BLOCK_M=bm,
             FLIP=_SIGN_FLIP.get(element.name, 0), USE_WS=split > 1, HW_FP8=hw, NG=ng, BSB=bsb, ACT_BASE=act_base,
             ACT_SHIFT=act_shift, LOOP_STAGES=cfg.get("LOOP_STAGES", 1), **common)
    else:
        ng, bsb = _tile_shape(element, block_size, bkb)
        bm = cfg["BLOCK_M"]
        grid = (cdiv(M, bm) * cdiv(N, nb), split)
        dot_f32 = a2.dtype == torch.float32 or (a2.dtype == torch.bfloat16 and not hw)
        swap = bool(cfg.get("SWAP_AB"))
        f16_codes = swap and a2.dtype == torch.float16 and fp16_lane_codes(element, scale_code)
        _run(dqmm_gemm_kernel, grid, compile_only, *args, BLOCK_M=bm, GROUP_M=cfg["GROUP_M"], ATOMIC=split > 1,
             DOT_F32=dot_f32, NG=ng, BSB=bsb, SWAP_AB=swap, F16_CODES=f16_codes,
             NATURAL_K=bool(cfg.get("NATURAL_K")), HW_FP8=hw, **common)
    if split > 1 and not compile_only:
        block = 1024
        if gemv or mma:  # the [SPLIT, M, N] workspace, summed in a fixed order
            splitk_sum_kernel[(cdiv(M * N, block),)](ws, bias_or_dummy, out2, M, N, out2.stride(0),
                                                     SPLIT=split, HAS_BIAS=bias is not None, BLOCK=block,
                                                     num_warps=4)
        else:  # the GEMM's atomically summed [M, N] workspace
            splitk_epilogue_kernel[(cdiv(M * N, block),)](ws, bias_or_dummy, out2, M, N, out2.stride(0),
                                                          HAS_BIAS=bias is not None, BLOCK=block, num_warps=4)
    return out2


def mma_tiles_evenly(N, K, Kb, element, cfg) -> bool:
    """Whether the swap-AB kernel's K loop runs unmasked (EVEN): whole row tiles and K steps, and no
    padding code in the last byte (every split's range is a whole number of steps)."""
    rows = cfg["BLOCK_N"] * cfg.get("ROW_TILES", 1)
    return N % rows == 0 and Kb % cfg["BLOCK_KB"] == 0 and K == Kb * element.codes_per_byte


def _materialise(a2, w, s, z, gs, bias, out2, *, K, block_size, element, scale_code):
    """Decode W once ([N, K] in A's dtype on a GPU, float32 on a CPU), then one library matmul."""
    on_gpu = a2.device.type == "cuda"
    wd = decode_rows_device(w, s, z, gs, K=K, block_size=block_size, element=element, scale_code=scale_code,
                            out_dtype=a2.dtype if on_gpu else torch.float32)
    if not on_gpu:
        y = torch.matmul(a2.to(torch.float32), wd.t())
        out2.copy_(y if bias is None else y + bias.to(y.dtype))
    elif bias is None:  # cuBLAS accumulates fp16/bf16 products in fp32, written straight into out
        torch.mm(a2, wd.t(), out=out2)
    else:  # the bias added in cuBLAS's epilogue, before the one rounding to A's dtype
        torch.addmm(bias.to(a2.dtype), a2, wd.t(), out=out2)
    return out2


# Split-K values the autotuner's second round tries on the fastest small-M configs. The grid is a
# few waves of register-limited programs, so the best split is not the programs-per-SM target of
# _split_for: at M = 1 on the H200 it was 1, 3, 4 or 6 by layer and format, 3-10% faster than the
# target's split (benchmarks/RESULTS.md).
REFINE_SPLITS = (1, 2, 3, 4, 6, 8)


def split_variants(cfg: dict, M: int) -> list[dict]:
    """cfg with each of REFINE_SPLITS: the GEMV and swap-AB kernels (a workspace summed in a fixed
    order) and, up to GEMM_SPLIT_MAX_M where its list already splits K, the tl.dot GEMM (atomic
    adds); [] for materialise and the large-M GEMM."""
    if cfg.get("MATERIALISE") or (M > GEMM_SPLIT_MAX_M and not cfg.get("MMA") and "BLOCK_M" in cfg):
        return []
    return [dict(cfg, SPLIT_K=s) for s in REFINE_SPLITS]


def _not_gemv(cfg) -> bool:
    """A config of the GEMV's candidate list that runs another kernel (tl.dot GEMM, swap-AB MMA or materialise)."""
    return bool(cfg.get("MATERIALISE") or cfg.get("GEMM") or cfg.get("MMA"))


TIMED_CALLS = 8  # calls of a config a CUDA graph replays, each after an L2 flush
TIMED_REPLAYS = 10  # replays of that graph; their median is the time


def _time_config(fn) -> float:
    """Milliseconds of one call of fn as a layer runs between others: its weight not in L2, and no
    dirty lines left in L2 for it to write back. A CUDA graph replays TIMED_CALLS pairs of (a read of
    twice the L2, fn); the same graph of reads alone is subtracted. The graph keeps the host's launch
    cost (tens of us of Python, more than a small-M kernel takes, varying between processes) out.
    do_bench's zero-filled flush left the L2 dirty: its times sat 10-17 us above rotating-copy
    replays (H100, benchmarks/RESULTS.md, stop 34)."""
    fn()  # compiles, and warms up what the capture will record
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    junk = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")
    sink = torch.empty((), dtype=torch.int64, device="cuda")

    def flushed(with_fn):
        def record():
            for _ in range(TIMED_CALLS):
                torch.sum(junk, 0, out=sink)  # a read: evicts lines clean
                if with_fn:
                    fn()
        return _graph_ms(record)

    return (flushed(True) - flushed(False)) / TIMED_CALLS


def _graph_ms(record) -> float:
    """Median ms of one replay of a CUDA graph of what record() launches."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        record()
    graph.replay()
    times = []
    for _ in range(TIMED_REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def dequant_matmul(a, w, scale, zero_point=None, global_scale=None, bias=None, *, K, N, block_size,
                   weight_format, scale_format, out=None, config=None):
    """Y = A @ W (+ bias), W decoded from the docs/ops.md row layout. See docs/kernels.md.

    `config` forces a launch config (tests and benchmarks); normally the autotuner picks it.
    """
    element, scale_code = inputs.formats(weight_format, scale_format)
    inputs.same_device(a, w, scale, zero_point, bias)
    if a.shape[-1] != K:
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"A's last dimension is {a.shape[-1]}, expected K={K}")
    if a.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"A must be float16, bfloat16 or float32, got {a.dtype}")
    if w.shape[0] != N:
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"W has {w.shape[0]} rows, expected N={N}")
    w = inputs.codes_uint8(torch, w, "W")
    z = inputs.codes_uint8(torch, zero_point, "zero_point")
    s = inputs.scale_storage(torch, scale, scale_code)
    inputs.check_rows(w, s, z, K=K, block_size=block_size, element=element, what="W")
    if bias is not None and tuple(bias.shape) != (N,):
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"bias has shape {tuple(bias.shape)}, expected ({N},)")
    gs = inputs.global_scale_tensor(torch, global_scale, a.device)
    w = w.contiguous()  # (scale and zero point: any strides; column-major is the fast one, docs/kernels.md)
    lead = a.shape[:-1]
    a2 = a.reshape(math.prod(lead), K)  # (not -1: K may be 0)
    if a2.stride(-1) != 1:
        a2 = a2.contiguous()
    M = a2.shape[0]
    if out is None:
        out = torch.empty((*lead, N), dtype=a.dtype, device=a.device)
    elif tuple(out.shape) != (*lead, N) or out.dtype != a.dtype or not out.is_contiguous():
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"out must be a contiguous {a.dtype} tensor of shape {(*lead, N)}")
    out2 = out.view(M, N)
    if M == 0 or N == 0:
        return out
    if K == 0:
        out2.copy_(bias.expand(M, N) if bias is not None else torch.zeros_like(out2))
        return out
    kw = dict(K=K, N=N, block_size=block_size, element=element, scale_code=scale_code)
    if format_codes.fast_path_reason(element, block_size) is not None:
        _materialise(a2, w, s, z, gs, bias, out2, K=K, block_size=block_size, element=element, scale_code=scale_code)
        return out
    if config is None:
        config = _pick_config(a2, w, s, z, gs, bias, out2, **kw)
    _launch(a2, w, s, z, gs, bias, out2, cfg=config, **kw)
    return out


def _layout(t) -> str:
    """'col' for a column-major [R, G] scale or zero point (G > 1), else 'row': tuned separately."""
    return "col" if t.stride(0) == 1 and t.shape[1] > 1 else "row"


def _pick_config(a2, w, s, z, gs, bias, out2, *, K, N, block_size, element, scale_code):
    M, Kb = a2.shape[0], w.shape[1]

    def candidates():
        return tuning_candidates(M, N, Kb, element, block_size, a2.dtype, a2.device, zero_point=z is not None,
                                 scale_code=scale_code)

    if not autotune.tuning_enabled():
        return candidates()[0]
    kernel = "gemv" if M <= GEMV_MAX_M else "gemm"
    key = (f"dqmm-{kernel}|v15|{element.name}|{scale_code.name}|bs{block_size}|zp{int(z is not None)}|"
           f"s{_layout(s)}{'' if z is None else '|z' + _layout(z)}|"
           f"gs{int(gs is not None)}|b{int(bias is not None)}|{str(a2.dtype).removeprefix('torch.')}|"
           f"M{autotune.m_bucket(M)}|N{N}|K{K}")
    kw = dict(K=K, N=N, block_size=block_size, element=element, scale_code=scale_code)

    def time_one(cfg):
        scratch = torch.empty_like(out2)

        def run():
            _launch(a2, w, s, z, gs, bias, scratch, cfg=cfg, **kw)
        return _time_config(run)

    def compile_one(cfg):
        _launch(a2, w, s, z, gs, bias, out2, cfg=cfg, compile_only=True, **kw)

    # Triton's parallel build compiles the warmups after they return, so a 4-warp swap-AB program gets
    # mma.sync for the whole tuning; no other candidate at M <= 16 has a dot wgmma would take
    with triton_env.mma_sync_dots() if M <= MMA_MAX_M else contextlib.nullcontext():
        return autotune.choose(autotune.cache_for_device(a2.device), key, candidates, time_one,
                               refine=lambda cfg: split_variants(cfg, M), compile_one=compile_one)
