"""The DequantMatMul small-M tensor-core kernel (M <= 16, fp16/bf16 activations): swap-AB.

At small M a GEMV spends most of its issue slots on FP32 FMAs and conversions, not on loads. This
kernel gives the multiply-adds to the tensor cores instead, with the operands swapped so the
weight is the wide side: each program owns ROW_TILES tiles of BLOCK_N rows of W (16 per warp) and
computes acc[BLOCK_N, BLOCK_M] = W_tile @ A^T for each with `tl.dot` (mma.sync m16n8k16; Triton pads
BLOCK_M < 8).
One warp per 16 rows keeps Triton's mixed-precision layout rule satisfied: the uint8 weight load
is made directly in the dot operand's register layout (no shared-memory round trip of the weight).

A dot covers GROUP chunks of CHUNK bytes of every row (NDOT dots a K step). A chunk never
straddles two scale blocks, so the weight enters the dot as its exact code value and each chunk's
fp32 partial sum is multiplied by the chunk's per-row scale (no rounding of q * s to the operand
dtype). With GROUP > 1 the activation operand is block-diagonal, [GROUP * CHUNK, GROUP * BLOCK_M]:
column j * BLOCK_M + m holds row m's activations over chunk j, zeros elsewhere, so one dot (and one
staging of the activations) yields every chunk's partial sums side by side; they are scaled per
column and summed over j after the loop. The codes sharing a byte are separate dots against A's
matching K positions (k = byte * CPB + sub).

SCALE_W multiplies each code by its block's scale in the operand dtype before the dot instead, so
a chunk may span blocks, and the fp32 multiply per chunk is gone:
- NVFP4 (e2m1 codes, E4M3 block scales): exact. An e2m1 value times an E4M3 value has at most 6
  significant bits and lies within fp16's range (also at the ASM decoder's value * 2^-6) and
  bf16's. NVFP4's 8-byte blocks would otherwise need GROUP 2 (a dot's K is at least 16 bytes),
  which does not fit the 8 columns of an mma beyond M = 4.
- Integer codes with fp16 scales and fp16 activations: (q - z) * s rounded once to fp16 (one
  packed multiply), the operand the tl.dot GEMM feeds its dot (its float32 q * s is exact, then
  cast), so the same error bound holds. Blocks of 16 bytes (int4 block 32) then take 64-byte dots.
- MXFP4 and MXFP8 (e2m1 or e4m3 codes, E8M0 scales, which fp16 cannot hold): each code times
  2^(e - emax), its scale relative to the row's largest in the program's K range, and the program's
  sum times 2^(emax - 127) once at the end. Exact down to 2^-23 (e2m1) or 2^-15 (e4m3), rounded once
  to fp16's subnormals below; fp16 factors stop at 2^-24, so e4m3 blocks further down add 0, an
  error under 2^-16 of 2^emax a weight (a quantizer's largest block holds a code of 256 or more).
  bf16 holds every such product exactly.
The scales (and zero points) are loaded once per (row, block) and broadcast over the block's bytes
in registers: 1.15-1.3x loading the same value for every byte (benchmarks/RESULTS.md). cp.async
moves 4 bytes or more a thread, so the E8M0 scales of one dot (MXFP4's 64-byte dot: 2 bytes a
thread in the column-major layout; MXFP8's: 1) were plain loads inside the pipelined loop; with 2
or 4 dots a K step they are loaded for the whole step at once wherever that makes 4 bytes a thread
(STEP_SCALES) and stream with the weight.

LOOP_STAGES > 1 pipelines the K loop (tl.range): the weight and activation tiles of the next steps
are copied into shared memory with cp.async while this one is decoded, so more bytes are in flight
per SM than the few warps that the registers allow can keep with plain loads (the loop is bound by
load latency otherwise; benchmarks/RESULTS.md). LOOP_STAGES 1 compiles to the plain loop's SASS.

Decoding on the GPU with fp16 activations is inline PTX on four bytes at a time (ASM,
kernels/decode_ptx.py): integer fields are put into fp16's mantissa under 1024 with one LOP3 per two
codes and 1024 (+ the signed offset) is subtracted with one HADD2/HFMA2 per two codes; fp4 codes are
moved into e4m3 bytes and converted by the hardware (value * 2^-6: DECODE_EXP 6, undone at the end).
Otherwise (bf16 activations, the interpreter, other formats) the codes go through kernels/decode.py
to float32 and are cast: exact for every format, since each code's value fits fp16 and bf16.
"""

from __future__ import annotations

from onnxfuse.kernels import triton_env
from onnxfuse.kernels.decode import decode_element, decode_scale
from onnxfuse.kernels.decode_ptx import asm_fp4, asm_int4, asm_int8

torch, triton, tl = triton_env.load()


@triton.jit
def _plain(w, z, SUB: tl.constexpr, WFMT: tl.constexpr, BITS: tl.constexpr, DT: tl.constexpr,
           HAS_ZP: tl.constexpr):
    """Sub-position SUB of each byte minus the zero point z [rows, 1], decoded exactly
    (kernels/decode.py) in float32 and cast to DT (exact: |q - z| < 2^8 fits bf16 too)."""
    c = (w.to(tl.int32) >> (SUB * BITS)) & ((1 << BITS) - 1)
    q = decode_element(c, WFMT)
    if HAS_ZP:
        q = q - z
    return q.to(DT)


@triton.jit
def _codes(w, z, WFMT: tl.constexpr, BITS: tl.constexpr, CPB: tl.constexpr, DT: tl.constexpr, ASM: tl.constexpr,
           HW_FP8: tl.constexpr, HAS_ZP: tl.constexpr):
    """A [rows, bytes] uint8 tile -> the codes (minus zero point z [rows, 1] of float32) of
    sub-positions 0 and 1 in DT (q1 = q0 for one code a byte)."""
    if ASM and WFMT <= 5:
        if WFMT <= 3:
            q0, q1 = asm_int4(w, WFMT % 2 == 0)
        else:
            q0 = asm_int8(w, WFMT % 2 == 0)
            q1 = q0
        if HAS_ZP:  # fp16 (ASM): code - zero point is exact
            q0 = q0 - z.to(DT)
            q1 = q1 - z.to(DT)
    elif ASM and WFMT == 8:
        q0, q1 = asm_fp4(w)
    elif WFMT == 6 and HW_FP8:  # the GPU's e4m3 conversion (the interpreter's fp8 has no NaN)
        q0 = w.to(tl.float8e4nv, bitcast=True).to(DT)
        q1 = q0
    else:
        q0 = _plain(w, z, 0, WFMT, BITS, DT, HAS_ZP)
        if CPB == 2:
            q1 = _plain(w, z, 1, WFMT, BITS, DT, HAS_ZP)
        else:
            q1 = q0
    return q0, q1


@triton.jit
def _block_factor(raw, SFMT: tl.constexpr, DT: tl.constexpr, HW_FP8: tl.constexpr):
    """[rows, NB] block scales -> the factors SCALE_W multiplies codes by, per block (so each is
    converted once, not once per byte): fp16 scales as they are, E4M3 or the E8M0 relative factors
    (float32 powers of two, _e8m0_relative) in DT on the GPU, else float32."""
    if SFMT == 4 and HW_FP8 and DT == tl.float16:
        f = raw.to(tl.float8e4nv, bitcast=True).to(DT)
    elif SFMT == 4:
        f = decode_scale(raw, 4)
    elif SFMT == 3 and HW_FP8:  # a power of two: exact in DT, or 0 below fp16's 2^-24 (module docstring)
        f = raw.to(DT)
    else:  # fp16 scales, or the E8M0 factors in float32 (the interpreter)
        f = raw
    return f


@triton.jit
def _times_scale(q, f, DT: tl.constexpr):
    """Codes q (DT, minus their zero point) times their factors f (q's layout): in DT, exact for E4M3
    and E8M0 factors of e2m1 codes, one rounding for fp16 scales of integer codes (as the GEMM's);
    float32 factors via float32 (the triton 3.9 interpreter's bf16 multiply is wrong), rounded once."""
    if f.dtype == DT:
        r = q * f
    else:
        r = (q.to(tl.float32) * f).to(DT)
    return r


@triton.jit
def _e8m0_row_max(s_rows, stride_sg, n_mask, kb_start, kb_end, BSB: tl.constexpr, BLOCK_N: tl.constexpr):
    """The largest E8M0 code of each row's blocks in bytes [kb_start, kb_end) ([BLOCK_N, 1] int32):
    what this program's SCALE_W factors are relative to, found once (the scales are 1/16 of the bytes).
    Halving by split and maximum, not tl.max: after a reduce Triton no longer moves the factors'
    layout conversion onto the scales, and the decoded weight takes a shared-memory round trip to
    the dot (16 STS.128 and 32 LDS.64 more a loop step in the sm_90 SASS). The scan is pipelined
    (cp.async, 3 stages): a plain loop waited for each 64-block load before the next, and a
    small-M grid is one wave, so every program's scan delays the first weight bytes (5 loads a
    program of 28672x8192 at split 3). Two row tiles scan one after the other: one scan of both
    tiles' rows, split after, sent MXFP8's decoded weight through shared memory in the K loop."""
    emax = tl.zeros((BLOCK_N, 1), tl.int32)
    g_end = tl.cdiv(kb_end, BSB)
    for g0 in tl.range(kb_start // BSB, g_end, 64, num_stages=3):
        g = g0 + tl.arange(0, 64)
        x = tl.load(s_rows + g[None, :] * stride_sg, mask=n_mask[:, None] & (g < g_end)[None, :], other=0)
        x = x.to(tl.int32)
        for i in tl.static_range(6):
            lo, hi = tl.split(tl.reshape(x, (BLOCK_N, 32 >> i, 2)))
            x = tl.maximum(lo, hi)
        emax = tl.maximum(emax, x)
    return emax


@triton.jit
def _e8m0_relative(e, exp_bias):
    """[rows, NB] E8M0 codes -> 2^(e - emax + DECODE_EXP) in float32: each block's scale relative to
    its row's largest (emax), times the 2^DECODE_EXP the decoder took off. The products then lie
    within DT's range whatever the scales; factors below 2^-126 are 0. exp_bias [rows, 1] is
    127 + DECODE_EXP - emax, added once before the loop: Triton does not hoist it, and MXFP4's loop
    then fuses the add into the clamp (VIADDMNMX; 16 fewer instructions a step in the sm_90 SASS)."""
    return (tl.maximum(e + exp_bias, 0) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _per_byte(x, BLOCK_N: tl.constexpr, NB: tl.constexpr, RUN: tl.constexpr):
    """[BLOCK_N, NB] per-block values -> [BLOCK_N, NB * RUN], each repeated over its block's bytes (SCALE_W)."""
    return tl.reshape(tl.broadcast_to(x[:, :, None], (BLOCK_N, NB, RUN)), (BLOCK_N, NB * RUN))


@triton.jit
def _dot_part(x, D: tl.constexpr, NDOT: tl.constexpr, NB: tl.constexpr, BLOCK_N: tl.constexpr):
    """Dot D's [BLOCK_N, NB] columns of a K step's [BLOCK_N, NDOT * NB] (NDOT 2 or 4), by tl.split:
    a register tensor has no slices."""
    if NDOT == 2:
        x = tl.permute(tl.reshape(x, (BLOCK_N, 2, NB)), (0, 2, 1))
    else:  # column (2 * hi + lo) * NB + b -> [row, b, lo, hi]: split off hi, then lo
        first, second = tl.split(tl.permute(tl.reshape(x, (BLOCK_N, 2, 2, NB)), (0, 3, 2, 1)))
        x = first if D < 2 else second
    lo, hi = tl.split(x)
    return lo if D % 2 == 0 else hi


@triton.jit
def _load(ptr, mask, other, EVEN: tl.constexpr):
    """tl.load, without its mask where EVEN says every lane is in bounds: no predicate or zero-fill
    size is computed for it in the K loop."""
    if EVEN:
        x = tl.load(ptr)
    else:
        x = tl.load(ptr, mask=mask, other=other)
    return x


@triton.jit
def _act_load(ptr, mask, col_in, other, EVEN: tl.constexpr, GROUP: tl.constexpr):
    """An activation operand tile under mask; EVEN (K in bounds, col_m clamped within M) leaves only
    the block-diagonal mask col_in, which one chunk a dot (GROUP 1) does not need either."""
    if EVEN and GROUP > 1:
        x = tl.load(ptr, mask=col_in, other=other)
    else:
        x = _load(ptr, mask, other, EVEN)
    return x


@triton.jit
def _act_t(a_ptr, col_m, col_in, M, K, stride_am, byte, CPB: tl.constexpr, SUB: tl.constexpr,
           EVEN: tl.constexpr, GROUP: tl.constexpr):
    """The activation operand at k = byte * CPB + SUB: [DK, NC], 0 outside [0, K), past row M and
    outside each column's own chunk (col_in: the block-diagonal mask)."""
    k = byte * CPB + SUB
    ptr = a_ptr + col_m[None, :].to(tl.int64) * stride_am + k[:, None]
    return _act_load(ptr, (k < K)[:, None] & (col_m < M)[None, :] & col_in, col_in, 0.0, EVEN, GROUP)


@triton.jit
def _act_pairs_t(a_ptr, col_m, col_in, M, Kb, stride_am, byte, DT: tl.constexpr, EVEN: tl.constexpr,
                 GROUP: tl.constexpr):
    """The activation operand at the even and odd K positions of `byte`, from one 32-bit load per
    pair (K even, 16-bit A)."""
    a32 = a_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    ptr = a32 + col_m[None, :].to(tl.int64) * (stride_am // 2) + byte[:, None]
    pr = _act_load(ptr, (byte < Kb)[:, None] & (col_m < M)[None, :] & col_in, col_in, 0, EVEN, GROUP)
    if DT == tl.bfloat16:  # via float32, whose top half a bf16 is (the interpreter has no bf16 bitcast)
        even = (pr << 16).to(tl.float32, bitcast=True).to(DT)
        odd = (pr & -65536).to(tl.float32, bitcast=True).to(DT)
    else:
        even = (pr & 0xFFFF).to(tl.int16).to(DT, bitcast=True)
        odd = (pr >> 16).to(tl.int16).to(DT, bitcast=True)
    return even, odd


@triton.jit
def _dot(q, a, acc, DOT_F32: tl.constexpr):
    if DOT_F32:  # the interpreter's bf16 dot is wrong: an fp32 dot of the same (exact) operands
        r = tl.dot(q.to(tl.float32), a.to(tl.float32), acc, input_precision="ieee")
    else:
        r = tl.dot(q, a, acc)
    return r


@triton.jit
def _act_operand(a_ptr, col_m, col_in, M, K, Kb, stride_am, byte, CPB: tl.constexpr, DT: tl.constexpr,
                 ACT_PAIRS: tl.constexpr, EVEN: tl.constexpr, GROUP: tl.constexpr):
    """A dot's activation operand for the codes of `byte`: (sub-position 0, sub-position 1), the same
    tile twice for one code a byte."""
    if CPB == 1:
        act0 = _act_t(a_ptr, col_m, col_in, M, K, stride_am, byte, 1, 0, EVEN, GROUP)
        act1 = act0
    elif ACT_PAIRS:
        act0, act1 = _act_pairs_t(a_ptr, col_m, col_in, M, Kb, stride_am, byte, DT, EVEN, GROUP)
    else:
        act0 = _act_t(a_ptr, col_m, col_in, M, K, stride_am, byte, 2, 0, EVEN, GROUP)
        act1 = _act_t(a_ptr, col_m, col_in, M, K, stride_am, byte, 2, 1, EVEN, GROUP)
    return act0, act1


@triton.jit
def _tile_codes(rows, s_rows, z_rows, n_mask, raw_step, exp_bias, chunk_of, c0, kb_end, stride_sg, stride_zg,
                D: tl.constexpr, WFMT: tl.constexpr, SFMT: tl.constexpr, BITS: tl.constexpr, CPB: tl.constexpr,
                BS: tl.constexpr, HAS_ZP: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr,
                DK: tl.constexpr, NDOT: tl.constexpr, NB: tl.constexpr, RUN: tl.constexpr, DT: tl.constexpr,
                ASM: tl.constexpr, HW_FP8: tl.constexpr, SCALE_W: tl.constexpr, STEP_SCALES: tl.constexpr,
                EVEN: tl.constexpr):
    """One row tile's operand of a K step's dot D: its weight bytes [c0, c0 + DK) decoded (sub-positions
    0 and 1), times their block factors under SCALE_W; and the raw block scales the dot's partial sums
    take otherwise."""
    byte = c0 + tl.arange(0, DK)
    w = _load(rows + byte[None, :], n_mask[:, None] & (byte < kb_end)[None, :], 0, EVEN)
    # each column's chunk: its scale group, and whether it lies in this split (else weights and
    # scale are masked)
    chunk0 = c0 + chunk_of * CHUNK
    grp = ((chunk0 * CPB) // BS)[None, :]
    gmask = n_mask[:, None] & (chunk0 < kb_end)[None, :]
    if SCALE_W:  # a dot may span blocks: one load a (row, block), broadcast over the block's bytes
        gb = (c0 * CPB) // BS + tl.arange(0, NB)
        grp = gb[None, :]
        gmask = n_mask[:, None] & (gb * (BS // CPB) < kb_end)[None, :]
    z = 0.0
    if HAS_ZP:  # one zero point a row (GROUP == 1) or a (row, block) (SCALE_W)
        z = decode_element(_load(z_rows + grp * stride_zg, gmask, 0, EVEN).to(tl.int32), WFMT)
        if SCALE_W:
            z = _per_byte(z, BLOCK_N, NB, RUN)
    q0, q1 = _codes(w, z, WFMT, BITS, CPB, DT, ASM, HW_FP8, HAS_ZP)
    if STEP_SCALES:
        raw = _dot_part(raw_step, D, NDOT, NB, BLOCK_N)
    else:
        raw = _load(s_rows + grp * stride_sg, gmask, 0, EVEN)
    if SCALE_W:  # the products are final: accumulate in the dot itself
        if SFMT == 3:  # E8M0: relative factors in the codes, the row's largest scale at the end
            raw = _e8m0_relative(raw.to(tl.int32), exp_bias)
        sw = _per_byte(_block_factor(raw, SFMT, DT, HW_FP8), BLOCK_N, NB, RUN)
        q0 = _times_scale(q0, sw, DT)
        q1 = _times_scale(q1, sw, DT)
    return q0, q1, raw


@triton.jit
def _tile_acc(acc, q0, q1, raw, act0, act1, SFMT: tl.constexpr, CPB: tl.constexpr, BLOCK_N: tl.constexpr,
              NC: tl.constexpr, DOT_F32: tl.constexpr, SCALE_W: tl.constexpr):
    """acc plus a row tile's dot of its operand (q0, q1) with the activations (act0; act1 for the
    odd codes of two a byte): accumulated in the dot under SCALE_W, else scaled per (row, chunk)."""
    if SCALE_W:
        into = acc
    else:
        into = tl.zeros((BLOCK_N, NC), tl.float32)
    if CPB == 1:
        part = _dot(q0, act0, into, DOT_F32)
    else:
        part = _dot(q1, act1, _dot(q0, act0, into, DOT_F32), DOT_F32)
    if SCALE_W:
        acc = part
    else:
        acc += part * decode_scale(raw, SFMT)
    return acc


@triton.jit
def _tile_store(acc, emax, gs_ptr, bias_ptr, out_ptr, ws_ptr, offs_n, n_mask, M, N, stride_om, pid_k,
                SFMT: tl.constexpr, HAS_GS: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, GROUP: tl.constexpr, USE_WS: tl.constexpr, DECODE_EXP: tl.constexpr,
                SCALE_W: tl.constexpr):
    """A row tile's result: chunks summed, the factors kept out of the loop applied, then stored in
    Y (bias added) or in split pid_k's workspace slice."""
    if GROUP > 1:
        y = tl.sum(tl.reshape(acc, (BLOCK_N, GROUP, BLOCK_M)), axis=1)
    else:
        y = acc
    if SCALE_W and SFMT == 3:
        y = y * decode_scale(emax, 3)
    elif DECODE_EXP != 0:
        y = y * (1 << DECODE_EXP)
    if HAS_GS:
        y = y * tl.load(gs_ptr).to(tl.float32)
    offs_m = tl.arange(0, BLOCK_M)
    mask = n_mask[:, None] & (offs_m < M)[None, :]
    if not USE_WS:
        if HAS_BIAS:
            y += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[:, None]
        out = out_ptr + offs_m[None, :].to(tl.int64) * stride_om + offs_n[:, None]
        tl.store(out, y.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(ws_ptr + (pid_k * M + offs_m[None, :]).to(tl.int64) * N + offs_n[:, None], y, mask=mask)


@triton.jit
def dqmm_mma_kernel(a_ptr, w_ptr, s_ptr, z_ptr, gs_ptr, bias_ptr, out_ptr, ws_ptr,
                    M, N, K, Kb, G, stride_am, stride_wn, stride_sn, stride_sg, stride_zn, stride_zg, stride_om,
                    kb_per_split,
                    WFMT: tl.constexpr, SFMT: tl.constexpr, BITS: tl.constexpr, CPB: tl.constexpr,
                    BS: tl.constexpr, HAS_ZP: tl.constexpr, HAS_GS: tl.constexpr, HAS_BIAS: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr, GROUP: tl.constexpr,
                    NDOT: tl.constexpr, USE_WS: tl.constexpr, ASM: tl.constexpr, HW_FP8: tl.constexpr,
                    ACT_PAIRS: tl.constexpr, DECODE_EXP: tl.constexpr, DOT_F32: tl.constexpr,
                    LOOP_STAGES: tl.constexpr, SCALE_W: tl.constexpr, EVEN: tl.constexpr,
                    ROW_TILES: tl.constexpr):
    """Y[m, n] for m < M <= BLOCK_M: column j * BLOCK_M + m of the dot is chunk j's partial sum for
    row m, scaled per (row, chunk) in float32 and summed over j at the end.

    The program owns ROW_TILES tiles of BLOCK_N rows, one after the other, and every tile multiplies
    each dot's activation operand, loaded once: 1 / ROW_TILES of the activation bytes a weight byte
    that one tile a program copies in from L2 and stages through shared memory (at M = 16 those are
    twice the 4-bit weight's at BLOCK_N 32). Each tile's state is a tuple entry (Triton unrolls the
    static loops over them).

    EVEN (N a multiple of BLOCK_N * ROW_TILES, Kb of the K step, K = Kb * CPB): the K loop's loads are
    unmasked, and the activation columns past row M read row M - 1 instead of zeros (an output column
    depends on its own operand column only, and those are not stored)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    DT: tl.constexpr = a_ptr.dtype.element_ty
    NC: tl.constexpr = GROUP * BLOCK_M  # the dot's columns
    DK: tl.constexpr = GROUP * CHUNK  # the dot's bytes of each row
    NB: tl.constexpr = DK // (BS // CPB) if DK > BS // CPB else 1  # SCALE_W: the blocks a dot spans
    RUN: tl.constexpr = DK // NB
    offs_n = pid_n * (BLOCK_N * ROW_TILES) + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, NC)
    col_m = cols % BLOCK_M
    if EVEN:
        col_m = tl.minimum(col_m, M - 1)
    col_j = cols // BLOCK_M
    col_in = (tl.arange(0, DK) // CHUNK)[:, None] == col_j[None, :]
    if GROUP == 1:  # one chunk a dot: a scale (and zero point) a row, broadcast over the columns
        chunk_of = tl.zeros((1,), tl.int32)
    else:
        chunk_of = col_j
    kb_start = pid_k * kb_per_split
    kb_end = tl.minimum(kb_start + kb_per_split, Kb)
    # a step's E8M0 scales are NB * NDOT / 2 bytes a thread (16 rows a warp); cp.async needs 4
    STEP_SCALES: tl.constexpr = SCALE_W and SFMT == 3 and (NDOT == 2 or NDOT == 4) and NB * NDOT >= 8
    E8M0_W: tl.constexpr = SCALE_W and SFMT == 3
    tiles = ()  # each row tile's (mask, weight rows, scale rows, zero-point rows)
    accs = ()
    emaxes = ()
    biases = ()  # 127 + DECODE_EXP - emax, once (_e8m0_relative)
    for t in tl.static_range(ROW_TILES):
        offs = offs_n + t * BLOCK_N
        n_mask = offs < N
        s_rows = s_ptr + offs[:, None].to(tl.int64) * stride_sn
        tiles = tiles + ((n_mask, w_ptr + offs[:, None].to(tl.int64) * stride_wn, s_rows,
                          z_ptr + offs[:, None].to(tl.int64) * stride_zn),)
        accs = accs + (tl.zeros((BLOCK_N, NC), tl.float32),)
        emax = 0
        if E8M0_W:
            emax = _e8m0_row_max(s_rows, stride_sg, n_mask, kb_start, kb_end, BS // CPB, BLOCK_N)
        emaxes = emaxes + (emax,)
        biases = biases + (127 + DECODE_EXP - emax,)
    for kb0 in tl.range(kb_start, kb_end, DK * NDOT, num_stages=LOOP_STAGES):
        raw_steps = ()
        for t in tl.static_range(ROW_TILES):
            raw_step = 0
            if STEP_SCALES:  # every dot's E8M0 scales in one load: 4 bytes a thread or more, which cp.async streams
                n_mask, _, s_rows, _ = tiles[t]
                g_step = (kb0 * CPB) // BS + tl.arange(0, NDOT * NB)
                raw_step = _load(s_rows + g_step[None, :] * stride_sg,
                                 n_mask[:, None] & (g_step * (BS // CPB) < kb_end)[None, :], 0, EVEN)
            raw_steps = raw_steps + (raw_step,)
        for d in tl.static_range(NDOT):
            c0 = kb0 + d * DK
            new_accs = ()
            for t in tl.static_range(ROW_TILES):
                n_mask, rows, s_rows, z_rows = tiles[t]
                q0, q1, raw = _tile_codes(rows, s_rows, z_rows, n_mask, raw_steps[t], biases[t], chunk_of, c0,
                                          kb_end, stride_sg, stride_zg, d, WFMT, SFMT, BITS, CPB, BS, HAS_ZP,
                                          BLOCK_N, CHUNK, DK, NDOT, NB, RUN, DT, ASM, HW_FP8, SCALE_W, STEP_SCALES,
                                          EVEN)
                if t == 0:  # the activation operand, once for every tile (after the first one's codes)
                    act0, act1 = _act_operand(a_ptr, col_m, col_in, M, K, Kb, stride_am, c0 + tl.arange(0, DK), CPB,
                                              DT, ACT_PAIRS, EVEN, GROUP)
                new_accs = new_accs + (_tile_acc(accs[t], q0, q1, raw, act0, act1, SFMT, CPB, BLOCK_N, NC, DOT_F32,
                                                 SCALE_W),)
            accs = new_accs
    for t in tl.static_range(ROW_TILES):
        _tile_store(accs[t], emaxes[t], gs_ptr, bias_ptr, out_ptr, ws_ptr, offs_n + t * BLOCK_N, tiles[t][0], M, N,
                    stride_om, pid_k, SFMT, HAS_GS, HAS_BIAS, BLOCK_M, BLOCK_N, GROUP, USE_WS, DECODE_EXP, SCALE_W)
