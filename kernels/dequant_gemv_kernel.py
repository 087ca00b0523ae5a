"""The DequantMatMul GEMV (M <= 4): bandwidth first, the fewest ALU ops per weight byte.

Each program owns BLOCK_N rows of the docs/ops.md row layout W[N, Kb] and one K slice (split-K,
grid axis 1). A K step loads a contiguous [BLOCK_N, BLOCK_KB] uint8 tile (16-byte vector loads);
the layout gives each thread several rows at the same K columns, so each activation value is
loaded and converted once per thread and reused across its rows.

Decoding costs one or two integer ops per code, with no shift down of the code's field:
- integers: a signed code's sign bit is flipped once per byte (XOR), then the field, left where it
  sits in the byte (bits SUB*BITS..), is OR-ed into the mantissa of 2^23 and 2^23 + offset is
  subtracted (exact): the result is the code's value times 2^(SUB*BITS);
- fp4 e2m1: on the GPU four bytes at a time become e4m3 bytes that the hardware converts
  (kernels/decode_ptx.py, value * 2^-6); in the interpreter both codes of a byte are moved into
  the two fp16 halves of one int32 by two multiplies and two logic ops (value * 2^-14);
- fp8 e4m3 by the hardware conversion on the GPU (the interpreter's fp8 type has no NaN, so there
  the bit-trick decoder of kernels/decode.py runs); e5m2 is the top byte of an fp16.
The power of two each sub-position's decode carries is divided out of the activation instead
(one multiply per activation value per thread, not per weight), so all sub-positions of a byte
accumulate into one elementwise FMA stream (A's even and odd K positions are loaded separately,
so the weight's nibbles are never interleaved). The per-block sum is then multiplied by the block
scale once (a zero point subtracts z * sum(a) over the block, once per block too).

LOOP_STAGES > 1 runs the K loop as tl.range(..., num_stages=LOOP_STAGES), which Triton pipelines
(cp.async into shared memory); a plain loop otherwise (kernel-level num_stages pipelines only loads
that feed tl.dot). The autotuner times both.

Split-K partial results go to a float32 workspace [SPLIT, M, N] (no zeroing, no atomics) and
splitk_sum_kernel adds them in a fixed order, the bias, and casts: results are reproducible.
"""

from __future__ import annotations

from onnxfuse.kernels import triton_env
from onnxfuse.kernels.decode import decode_element, decode_scale
from onnxfuse.kernels.decode_ptx import asm_fp4

torch, triton, tl = triton_env.load()


@triton.jit
def _codes(wr, wb, SUB: tl.constexpr, WFMT: tl.constexpr, BITS: tl.constexpr, HW_FP8: tl.constexpr):
    """Sub-position SUB of each byte as float32, times the power of two that the kernel's
    ACT_BASE / 2^(SUB * ACT_SHIFT) activation scaling undoes.

    wr: the raw uint8 tile; wb: it as int32 with signed integers' sign bits flipped (FLIP), or for
    fp4 the (low, high) nibbles in fp16 on the GPU (asm_fp4)."""
    if WFMT <= 5:  # integers: (code ^ half) in place in 2^23's mantissa, minus 2^23 + half
        v = _int_field(wb, SUB, WFMT, BITS)
    elif WFMT == 8 and HW_FP8:
        v = wb[SUB].to(tl.float32)
    elif WFMT == 8:  # float4e2m1: wb holds both nibbles' fp16 patterns (_fp4_pairs); pick the half
        if SUB == 0:
            h = wb.to(tl.int16)
        else:
            h = (wb >> 16).to(tl.int16)
        v = h.to(tl.float16, bitcast=True).to(tl.float32)
    elif WFMT == 6 and HW_FP8:
        v = wr.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    else:  # e4m3 in the interpreter, e5m2, fp6: one code per byte
        v = decode_element(wb, WFMT)
    return v


@triton.jit
def _int_field(src, POS: tl.constexpr, WFMT: tl.constexpr, BITS: tl.constexpr):
    """The integer field at bits POS*BITS.. of src (sign bit already flipped), times 2^(POS*BITS):
    OR-ed in place into 2^23's mantissa, minus 2^23 + half (exact while the field ends below bit 23)."""
    FIELD: tl.constexpr = ((1 << BITS) - 1) << (POS * BITS)
    OFF: tl.constexpr = ((1 << (BITS - 1)) << (POS * BITS)) * (1 - WFMT % 2)  # even ids are signed
    return ((src & FIELD) | 0x4B000000).to(tl.float32, bitcast=True) - (8388608.0 + OFF)


@triton.jit
def _fp4_pairs(wb):
    """Bytes of two e2m1 codes -> int32 whose halves are their fp16 patterns (value * 2^-14):
    magnitude to bits 9..11 and sign to bit 15 of each half, four integer ops per byte.

    wb * 0x200200 puts copies of the byte at bits 9 and 21 (no carries: they do not overlap), so
    the low nibble's magnitude lands at 9..11 and the high one's at 25..27; wb * 0x1001000 puts
    copies at 12 and 24, so the sign bits 3 and 7 land at 15 and 31."""
    mags = (wb * 0x200200) & 0x0E000E00
    signs = (wb * 0x1001000) & -0x7FFF8000  # 0x80008000 as an int32
    return mags | signs


@triton.jit
def _act(a_ptr, m, M, stride_am, byte, K, CPB: tl.constexpr, SUB: tl.constexpr, RESCALE: tl.constexpr):
    """A[m, byte * CPB + SUB] (float32) times RESCALE, 0 outside [0, K) or past row M."""
    k = byte * CPB + SUB
    ok = (k < K) & ((k * 0 + m) < M)
    a = tl.load(a_ptr + m * stride_am + k, mask=ok, other=0.0).to(tl.float32)
    if RESCALE != 1.0:
        a = a * RESCALE
    return a


@triton.jit
def _block_sums(t, BLOCK_N: tl.constexpr, NG: tl.constexpr, BSB: tl.constexpr):
    return tl.sum(tl.reshape(t, (BLOCK_N, NG, BSB)), axis=2)


@triton.jit
def _act_block_sums(a, NG: tl.constexpr, BSB: tl.constexpr):
    return tl.sum(tl.reshape(a, (NG, BSB)), axis=1)


@triton.jit
def _gemv_step(kb0, acc0, acc1, acc2, acc3, a_ptr, rows, s_rows, z_rows, n_mask, kb_end, M, K, G, stride_am,
               stride_sg, stride_zg,
               WFMT: tl.constexpr, SFMT: tl.constexpr, BITS: tl.constexpr, CPB: tl.constexpr, BS: tl.constexpr,
               FLIP: tl.constexpr, HAS_ZP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               NG: tl.constexpr, BSB: tl.constexpr, HW_FP8: tl.constexpr, ACT_BASE: tl.constexpr,
               ACT_SHIFT: tl.constexpr):
    """One K step of BLOCK_KB bytes: the accumulators [BLOCK_N, NG] of the BLOCK_M rows, updated."""
    BLOCK_KB: tl.constexpr = NG * BSB
    byte = kb0 + tl.arange(0, BLOCK_KB)
    wr = tl.load(rows + byte[None, :], mask=n_mask[:, None] & (byte < kb_end)[None, :], other=0)
    if WFMT == 8 and HW_FP8:
        wb = asm_fp4(wr)
    elif WFMT == 8:
        wb = _fp4_pairs(wr.to(tl.int32))
    else:
        wb = wr.to(tl.int32)
        if FLIP != 0:
            wb = wb ^ FLIP
    grp = (kb0 * CPB) // BS + tl.arange(0, NG)
    smask = n_mask[:, None] & (grp < G)[None, :]
    s = decode_scale(tl.load(s_rows + grp[None, :] * stride_sg, mask=smask, other=0), SFMT)
    t0 = tl.zeros((BLOCK_N, BLOCK_KB), tl.float32)
    t1 = tl.zeros((BLOCK_N, BLOCK_KB), tl.float32)
    t2 = tl.zeros((BLOCK_N, BLOCK_KB), tl.float32)
    t3 = tl.zeros((BLOCK_N, BLOCK_KB), tl.float32)
    u0 = tl.zeros((NG,), tl.float32)
    u1 = tl.zeros((NG,), tl.float32)
    u2 = tl.zeros((NG,), tl.float32)
    u3 = tl.zeros((NG,), tl.float32)
    for sub in tl.static_range(CPB):
        q = _codes(wr, wb, sub, WFMT, BITS, HW_FP8)
        r = ACT_BASE / (1 << (sub * ACT_SHIFT))  # a constexpr (triton 3.6 refuses re-annotating it)
        a = _act(a_ptr, 0, M, stride_am, byte, K, CPB, sub, r)
        t0 += q * a[None, :]
        if HAS_ZP:
            u0 += _act_block_sums(a, NG, BSB) * (1.0 / r)
        if BLOCK_M > 1:
            a = _act(a_ptr, 1, M, stride_am, byte, K, CPB, sub, r)
            t1 += q * a[None, :]
            if HAS_ZP:
                u1 += _act_block_sums(a, NG, BSB) * (1.0 / r)
        if BLOCK_M > 2:
            a = _act(a_ptr, 2, M, stride_am, byte, K, CPB, sub, r)
            t2 += q * a[None, :]
            if HAS_ZP:
                u2 += _act_block_sums(a, NG, BSB) * (1.0 / r)
            a = _act(a_ptr, 3, M, stride_am, byte, K, CPB, sub, r)
            t3 += q * a[None, :]
            if HAS_ZP:
                u3 += _act_block_sums(a, NG, BSB) * (1.0 / r)
    if HAS_ZP:
        z = decode_element(tl.load(z_rows + grp[None, :] * stride_zg, mask=smask, other=0).to(tl.int32), WFMT)
    else:
        z = s
    acc0 += _scaled_part(t0, u0, z, s, HAS_ZP, BLOCK_N, NG, BSB)
    if BLOCK_M > 1:
        acc1 += _scaled_part(t1, u1, z, s, HAS_ZP, BLOCK_N, NG, BSB)
    if BLOCK_M > 2:
        acc2 += _scaled_part(t2, u2, z, s, HAS_ZP, BLOCK_N, NG, BSB)
        acc3 += _scaled_part(t3, u3, z, s, HAS_ZP, BLOCK_N, NG, BSB)
    return acc0, acc1, acc2, acc3


@triton.jit
def dqmm_gemv_kernel(a_ptr, w_ptr, s_ptr, z_ptr, gs_ptr, bias_ptr, out_ptr, ws_ptr,
                     M, N, K, Kb, G, stride_am, stride_wn, stride_sn, stride_sg, stride_zn, stride_zg, stride_om,
                     kb_per_split,
                     WFMT: tl.constexpr, SFMT: tl.constexpr, BITS: tl.constexpr, CPB: tl.constexpr,
                     BS: tl.constexpr, FLIP: tl.constexpr, HAS_ZP: tl.constexpr, HAS_GS: tl.constexpr,
                     HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NG: tl.constexpr,
                     BSB: tl.constexpr, USE_WS: tl.constexpr, HW_FP8: tl.constexpr, ACT_BASE: tl.constexpr,
                     ACT_SHIFT: tl.constexpr, LOOP_STAGES: tl.constexpr):
    """Y[m, n] for m < M <= BLOCK_M <= 4 (FP32 FMAs; tensor cores would idle at this M).

    Sub-position `sub`'s activations are multiplied by ACT_BASE / 2^(sub * ACT_SHIFT), undoing the
    power of two its decode carries (see _codes)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    BLOCK_KB: tl.constexpr = NG * BSB
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    rows = w_ptr + offs_n[:, None].to(tl.int64) * stride_wn
    s_rows = s_ptr + offs_n[:, None].to(tl.int64) * stride_sn
    z_rows = z_ptr + offs_n[:, None].to(tl.int64) * stride_zn
    kb_start = pid_k * kb_per_split
    kb_end = tl.minimum(kb_start + kb_per_split, Kb)
    acc0 = tl.zeros((BLOCK_N, NG), tl.float32)
    acc1 = tl.zeros((BLOCK_N, NG), tl.float32)
    acc2 = tl.zeros((BLOCK_N, NG), tl.float32)
    acc3 = tl.zeros((BLOCK_N, NG), tl.float32)
    # LOOP_STAGES > 1 software-pipelines this loop's loads with tl.range (kernel-level num_stages
    # only pipelines loads feeding tl.dot; a GEMV's limit is the bytes in flight per SM)
    if LOOP_STAGES > 1:
        for kb0 in tl.range(kb_start, kb_end, BLOCK_KB, num_stages=LOOP_STAGES):
            acc0, acc1, acc2, acc3 = _gemv_step(kb0, acc0, acc1, acc2, acc3, a_ptr, rows, s_rows, z_rows, n_mask,
                                                kb_end, M, K, G, stride_am, stride_sg, stride_zg, WFMT, SFMT, BITS,
                                                CPB, BS, FLIP, HAS_ZP, BLOCK_M, BLOCK_N, NG, BSB, HW_FP8, ACT_BASE,
                                                ACT_SHIFT)
    else:
        for kb0 in range(kb_start, kb_end, BLOCK_KB):
            acc0, acc1, acc2, acc3 = _gemv_step(kb0, acc0, acc1, acc2, acc3, a_ptr, rows, s_rows, z_rows, n_mask,
                                                kb_end, M, K, G, stride_am, stride_sg, stride_zg, WFMT, SFMT, BITS,
                                                CPB, BS, FLIP, HAS_ZP, BLOCK_M, BLOCK_N, NG, BSB, HW_FP8, ACT_BASE,
                                                ACT_SHIFT)
    gs = 1.0
    if HAS_GS:
        gs = tl.load(gs_ptr).to(tl.float32)
    _store(tl.sum(acc0, axis=1) * gs, 0, M, offs_n, n_mask, bias_ptr, out_ptr, ws_ptr, N, stride_om, pid_k,
           HAS_BIAS, USE_WS)
    if BLOCK_M > 1:
        _store(tl.sum(acc1, axis=1) * gs, 1, M, offs_n, n_mask, bias_ptr, out_ptr, ws_ptr, N, stride_om, pid_k,
               HAS_BIAS, USE_WS)
    if BLOCK_M > 2:
        _store(tl.sum(acc2, axis=1) * gs, 2, M, offs_n, n_mask, bias_ptr, out_ptr, ws_ptr, N, stride_om, pid_k,
               HAS_BIAS, USE_WS)
        _store(tl.sum(acc3, axis=1) * gs, 3, M, offs_n, n_mask, bias_ptr, out_ptr, ws_ptr, N, stride_om, pid_k,
               HAS_BIAS, USE_WS)


@triton.jit
def _scaled_part(t, u, z, s, HAS_ZP: tl.constexpr, BLOCK_N: tl.constexpr, NG: tl.constexpr, BSB: tl.constexpr):
    """(per-block sum of q * a  -  z * per-block sum of a) * block scale: [BLOCK_N, NG]."""
    part = _block_sums(t, BLOCK_N, NG, BSB)
    if HAS_ZP:
        part = part - z * u[None, :]
    return part * s


@triton.jit
def _store(r, m, M, offs_n, n_mask, bias_ptr, out_ptr, ws_ptr, N, stride_om, pid_k,
           HAS_BIAS: tl.constexpr, USE_WS: tl.constexpr):
    mask = n_mask & ((offs_n * 0 + m) < M)
    if not USE_WS:
        if HAS_BIAS:
            r += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + m * stride_om + offs_n, r.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(ws_ptr + (pid_k * M + m).to(tl.int64) * N + offs_n, r, mask=mask)


@triton.jit
def splitk_sum_kernel(ws_ptr, bias_ptr, out_ptr, M, N, stride_om, SPLIT, HAS_BIAS: tl.constexpr,
                      BLOCK: tl.constexpr):
    """out[m, n] = sum over splits of ws[split, m, n] (fixed order) + bias[n], cast to out's dtype."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    r = tl.zeros((BLOCK,), tl.float32)
    for i in range(SPLIT):
        r += tl.load(ws_ptr + i * M * N + offs, mask=mask, other=0.0)
    n = offs % N
    if HAS_BIAS:
        r += tl.load(bias_ptr + n, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + (offs // N) * stride_om + n, r.to(out_ptr.dtype.element_ty), mask=mask)
