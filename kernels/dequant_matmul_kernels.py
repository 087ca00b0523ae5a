"""The DequantMatMul tiled tl.dot GEMM (M > 4; the GEMV is kernels/dequant_gemv_kernel.py).

It reads the docs/ops.md row layout W[N, Kb] directly. A K step of one program covers BLOCK_KB
bytes of BLOCK_N rows, viewed as [BLOCK_N, NG, BSB]: NG scale blocks of BSB bytes each, so every
byte load is a contiguous run along the row (16-byte vector loads) and scales/zero points are
loaded once per (row, block), never per element. The codes sharing a byte (sub-position `sub`)
are decoded one sub-position at a time; the activation is loaded at the matching K positions
(k = byte * CPB + sub), so no interleaving shuffle of the weight is needed.

SWAP_AB computes the transposed product, acc[BLOCK_N, BLOCK_M] = W_tile @ A^T: the decoded weight
is then the dot's left operand, which Triton stages for wgmma with 64-bit shared-memory stores
instead of the 16-bit ones the right operand takes (sm_90 SASS). With F16_CODES (fp16 A and fp16
scales, integer codes) the codes are made in fp16 lanes straight from their bits and scaled with
an fp16 multiply: bit-identical to the float32 decode cast to fp16, since q * s is exact in float32
(at most 8 + 11 significant bits) and both round it once.

Split-K (grid axis 1) lets small-N layers keep every SM streaming weight: partial sums go to a
float32 workspace with atomic adds and a tiny epilogue adds the bias and casts.
"""

from __future__ import annotations

from onnxfuse.kernels import triton_env
from onnxfuse.kernels.decode import decode_element, decode_scale

torch, triton, tl = triton_env.load()


@triton.jit
def _load_block_tile(w_ptr, s_ptr, z_ptr, offs_n, n_mask, kb0, Kb, G, stride_wn, stride_sn, stride_sg, stride_zn,
                     stride_zg, WFMT: tl.constexpr, SFMT: tl.constexpr, CPB: tl.constexpr, BS: tl.constexpr,
                     HAS_ZP: tl.constexpr, NG: tl.constexpr, BSB: tl.constexpr):
    """Bytes [BLOCK_N, NG, BSB] (int32), scales [BLOCK_N, NG] (float32), zero points [BLOCK_N, NG]."""
    g_ar = tl.arange(0, NG)
    j_ar = tl.arange(0, BSB)
    byte = kb0 + g_ar[:, None] * BSB + j_ar[None, :]
    wmask = n_mask[:, None, None] & (byte < Kb)[None, :, :]
    wb = tl.load(w_ptr + offs_n[:, None, None].to(tl.int64) * stride_wn + byte[None, :, :], mask=wmask, other=0)
    wb = wb.to(tl.int32)
    grp = ((kb0 + g_ar * BSB) * CPB) // BS
    smask = n_mask[:, None] & (grp < G)[None, :]
    raw_s = tl.load(s_ptr + offs_n[:, None].to(tl.int64) * stride_sn + grp[None, :] * stride_sg, mask=smask, other=0)
    s = decode_scale(raw_s, SFMT)
    if HAS_ZP:
        z_at = z_ptr + offs_n[:, None].to(tl.int64) * stride_zn + grp[None, :] * stride_zg
        raw_z = tl.load(z_at, mask=smask, other=0)
        z = decode_element(raw_z.to(tl.int32), WFMT)
    else:
        z = tl.zeros_like(s)
    return wb, byte, s, z


@triton.jit
def _split_subs(x, CPB: tl.constexpr):
    """x [R, J * CPB] in natural K order -> CPB tensors [R, J], one per sub-position of a byte.
    A contiguous (vectorised) load split in registers, instead of CPB strided loads."""
    if CPB == 1:
        s0 = x
        s1 = x
        s2 = x
        s3 = x
    elif CPB == 2:
        s0, s1 = tl.split(tl.reshape(x, (x.shape[0], x.shape[1] // 2, 2)))
        s2 = s0
        s3 = s1
    else:
        lo, hi = tl.split(tl.reshape(x, (x.shape[0], x.shape[1] // 4, 2, 2)))
        s0, s2 = tl.split(lo)
        s1, s3 = tl.split(hi)
    return s0, s1, s2, s3


@triton.jit
def _pick(s0, s1, s2, s3, SUB: tl.constexpr):
    if SUB == 0:
        r = s0
    elif SUB == 1:
        r = s1
    elif SUB == 2:
        r = s2
    else:
        r = s3
    return r


@triton.jit
def _f16_codes(wb, SUB: tl.constexpr, BITS: tl.constexpr, SIGNED: tl.constexpr):
    """Sub-position SUB's integer codes as fp16: the field (sign bit flipped for signed codes, so it
    is code + 2^(BITS-1)) under fp16's 1024 (0x6400), minus 1024 (+ 2^(BITS-1))."""
    HALF: tl.constexpr = (1 << (BITS - 1)) if SIGNED else 0
    f = ((wb.to(tl.int16) >> (SUB * BITS)) & ((1 << BITS) - 1)) ^ HALF
    return (f | 0x6400).to(tl.float16, bitcast=True) - (1024.0 + HALF)


@triton.jit
def _dot_acc(a, w, acc, SWAP_AB: tl.constexpr, DOT_F32: tl.constexpr):
    """acc + a @ w^T ([BLOCK_M, BLOCK_N]), or acc + w @ a^T ([BLOCK_N, BLOCK_M]) with SWAP_AB."""
    if DOT_F32:  # fp32 activations; also bf16 in the interpreter, whose bf16 dot is wrong
        w = w.to(a.dtype).to(tl.float32)  # (a no-op for fp32) rounds like the GPU bf16 operand
        a = a.to(tl.float32)
        if SWAP_AB:
            r = tl.dot(w, tl.trans(a), acc, input_precision="ieee")
        else:
            r = tl.dot(a, tl.trans(w), acc, input_precision="ieee")
    elif SWAP_AB:
        r = tl.dot(w.to(a.dtype), tl.trans(a), acc)
    else:
        r = tl.dot(a, tl.trans(w.to(a.dtype)), acc)
    return r


@triton.jit
def dqmm_gemm_kernel(a_ptr, w_ptr, s_ptr, z_ptr, gs_ptr, bias_ptr, out_ptr, ws_ptr,
                     M, N, K, Kb, G, stride_am, stride_wn, stride_sn, stride_sg, stride_zn, stride_zg, stride_om,
                     kb_per_split,
                     WFMT: tl.constexpr, SFMT: tl.constexpr, BITS: tl.constexpr, CPB: tl.constexpr,
                     BS: tl.constexpr, HAS_ZP: tl.constexpr, HAS_GS: tl.constexpr, HAS_BIAS: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NG: tl.constexpr, BSB: tl.constexpr,
                     ATOMIC: tl.constexpr, GROUP_M: tl.constexpr, DOT_F32: tl.constexpr,
                     SWAP_AB: tl.constexpr, F16_CODES: tl.constexpr):
    """Y = A @ W: weights decoded in registers to A's dtype (fp16/bf16) feeding tl.dot, fp32 accumulate."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    # Grouped ordering: GROUP_M row tiles share each weight tile while it is in L2.
    width = GROUP_M * num_n
    group = pid // width
    first_m = group * GROUP_M
    group_size = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % group_size
    pid_n = (pid % width) // group_size

    BLOCK_KB: tl.constexpr = NG * BSB
    MASK: tl.constexpr = (1 << BITS) - 1
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = offs_m < M
    n_mask = offs_n < N
    kb_start = pid_k * kb_per_split
    kb_end = tl.minimum(kb_start + kb_per_split, Kb)
    a_rows = a_ptr + offs_m[:, None].to(tl.int64) * stride_am
    if SWAP_AB:
        acc = tl.zeros((BLOCK_N, BLOCK_M), tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for kb0 in range(kb_start, kb_end, BLOCK_KB):
        wb, byte, s, z = _load_block_tile(w_ptr, s_ptr, z_ptr, offs_n, n_mask, kb0, Kb, G, stride_wn, stride_sn,
                                          stride_sg, stride_zn, stride_zg, WFMT, SFMT, CPB, BS, HAS_ZP, NG, BSB)
        kk = kb0 * CPB + tl.arange(0, BLOCK_KB * CPB)
        a_all = tl.load(a_rows + kk[None, :], mask=m_mask[:, None] & (kk < K)[None, :], other=0.0)
        as0, as1, as2, as3 = _split_subs(a_all, CPB)
        for sub in tl.static_range(CPB):
            if F16_CODES:
                q = _f16_codes(wb, sub, BITS, WFMT % 2 == 0)
                if HAS_ZP:
                    q = q - z[:, :, None].to(tl.float16)
                w = tl.reshape(q * s[:, :, None].to(tl.float16), (BLOCK_N, BLOCK_KB))
            else:
                q = decode_element((wb >> (sub * BITS)) & MASK, WFMT)
                if HAS_ZP:
                    q = q - z[:, :, None]
                w = tl.reshape(q * s[:, :, None], (BLOCK_N, BLOCK_KB))
            acc = _dot_acc(_pick(as0, as1, as2, as3, sub), w, acc, SWAP_AB, DOT_F32)
    if SWAP_AB:
        acc = tl.trans(acc)
    if HAS_GS:
        acc = acc * tl.load(gs_ptr).to(tl.float32)
    mask = m_mask[:, None] & n_mask[None, :]
    if not ATOMIC:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
        out = out_ptr + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :]
        tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.atomic_add(ws_ptr + offs_m[:, None].to(tl.int64) * N + offs_n[None, :], acc, mask=mask)


@triton.jit
def splitk_epilogue_kernel(ws_ptr, bias_ptr, out_ptr, M, N, stride_om, HAS_BIAS: tl.constexpr,
                           BLOCK: tl.constexpr):
    """out[m, n] = ws[m, n] + bias[n], cast to out's dtype."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    r = tl.load(ws_ptr + offs, mask=mask, other=0.0)
    n = offs % N
    if HAS_BIAS:
        r += tl.load(bias_ptr + n, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + (offs // N) * stride_om + n, r.to(out_ptr.dtype.element_ty), mask=mask)
