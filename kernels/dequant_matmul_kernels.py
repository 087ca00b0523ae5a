"""The DequantMatMul tiled tl.dot GEMM (M > 4; the GEMV is kernels/dequant_gemv_kernel.py).

It reads the docs/ops.md row layout W[N, Kb] directly. A K step of one program covers BLOCK_KB
bytes of BLOCK_N rows, viewed as [BLOCK_N, NG, BSB]: NG scale blocks of BSB bytes each, so every
byte load is a contiguous run along the row (16-byte vector loads) and scales/zero points are
loaded once per (row, block), never per element. The codes sharing a byte (sub-position `sub`)
are decoded one sub-position at a time; the activation is loaded at the matching K positions
(k = byte * CPB + sub), so no interleaving shuffle of the weight is needed.

SWAP_AB computes the transposed product, acc[BLOCK_N, BLOCK_M] = W_tile @ A^T: the decoded weight
is then the dot's left operand, which wgmma reads from registers (the right operand goes through
shared memory; sm_90 SASS). With F16_CODES (fp16 A; integer codes
with fp16 scales, or NVFP4's e2m1 codes with E4M3 scales) the codes are made in fp16 lanes straight
from their bits and scaled with an fp16 multiply: bit-identical to the float32 decode cast to fp16,
since q * s is exact in float32 (at most 8 + 11 significant bits) and both round it once (e2m1
codes come out times 2^-14, and q * s * 2^-14 is exact in fp16; the sum is multiplied back).
HW_FP8 (a GPU) decodes e4m3 codes by the GPU's conversion.

NATURAL_K (with SWAP_AB) interleaves the sub-positions' values in registers into the row's K order
instead, for one dot against A's tile as loaded: A then goes to shared memory by cp.async alone and
the loop's wgmmas overlap (sm_90 SASS, docs/kernels.md).

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
def _f16_fp4_codes(wb, SUB: tl.constexpr):
    """Sub-position SUB's e2m1 codes as fp16 times 2^-14: the sign to bit 15, exponent and mantissa
    to bits 11-9 (fp16's exponent bias 15 against e2m1's 1; code 1, 0.5, lands on fp16's subnormal
    2^-15). Exact, as is the product with an E4M3 scale (at most 6 significant bits, from 2^-24)."""
    c = (wb.to(tl.int16) >> (SUB * 4)) & 0xF
    return (((c & 7) << 9) | ((c & 8) << 12)).to(tl.float16, bitcast=True)


@triton.jit
def _hw_e4m3(c):
    """e4m3 codes c (int32, one a byte) in float32 by the GPU's conversion, through fp16: exact, NaN
    included (the interpreter's fp8 type has no NaN, so it takes kernels/decode.py). With fp16 scales
    the compiler then multiplies in fp16 lanes (HMUL2, no FMUL in the sm_90 SASS): exact products,
    rounded once as the cast would."""
    return c.to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float16).to(tl.float32)


@triton.jit
def _sub_values(wb, s, z, SUB: tl.constexpr, WFMT: tl.constexpr, BITS: tl.constexpr, HAS_ZP: tl.constexpr,
                F16_CODES: tl.constexpr, HW_FP8: tl.constexpr):
    """Sub-position SUB of the bytes wb [BLOCK_N, NG, BSB] as (q - z) * s: in fp16 lanes with
    F16_CODES (e2m1 codes times 2^-14), else in float32."""
    if F16_CODES and WFMT == 8:
        v = _f16_fp4_codes(wb, SUB) * s[:, :, None].to(tl.float16)
    elif F16_CODES:
        q = _f16_codes(wb, SUB, BITS, WFMT % 2 == 0)
        if HAS_ZP:
            q = q - z[:, :, None].to(tl.float16)
        v = q * s[:, :, None].to(tl.float16)
    else:
        if WFMT == 6 and HW_FP8:
            q = _hw_e4m3(wb)
        else:
            q = decode_element((wb >> (SUB * BITS)) & ((1 << BITS) - 1), WFMT)
        if HAS_ZP:
            q = q - z[:, :, None]
        v = q * s[:, :, None]
    return v


@triton.jit
def _natural_k(wb, s, z, DT: tl.constexpr, WFMT: tl.constexpr, BITS: tl.constexpr, CPB: tl.constexpr,
               HAS_ZP: tl.constexpr, F16_CODES: tl.constexpr, HW_FP8: tl.constexpr):
    """Every sub-position of wb [R, NG, BSB] in DT, interleaved in registers into the row's K order,
    [R, NG * BSB * CPB] (k = byte * CPB + sub): a thread's two codes of a byte become one fp16 pair
    of the wgmma operand."""
    v0 = _sub_values(wb, s, z, 0, WFMT, BITS, HAS_ZP, F16_CODES, HW_FP8).to(DT)
    if CPB == 1:
        w = v0
    elif CPB == 2:
        w = tl.join(v0, _sub_values(wb, s, z, 1, WFMT, BITS, HAS_ZP, F16_CODES, HW_FP8).to(DT))
    else:  # [..., i, o] holds sub 2 i + o
        v1 = _sub_values(wb, s, z, 1, WFMT, BITS, HAS_ZP, F16_CODES, HW_FP8).to(DT)
        v2 = _sub_values(wb, s, z, 2, WFMT, BITS, HAS_ZP, F16_CODES, HW_FP8).to(DT)
        v3 = _sub_values(wb, s, z, 3, WFMT, BITS, HAS_ZP, F16_CODES, HW_FP8).to(DT)
        w = tl.join(tl.join(v0, v2), tl.join(v1, v3))
    return tl.reshape(w, (wb.shape[0], wb.shape[1] * wb.shape[2] * CPB))


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
                     SWAP_AB: tl.constexpr, F16_CODES: tl.constexpr, NATURAL_K: tl.constexpr,
                     HW_FP8: tl.constexpr):
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
        if NATURAL_K:
            # rounded to A's dtype (as _dot_acc rounds) before the interleave: half the registers moved
            w = _natural_k(wb, s, z, a_all.dtype, WFMT, BITS, CPB, HAS_ZP, F16_CODES, HW_FP8)
            acc = _dot_acc(a_all, w, acc, SWAP_AB, DOT_F32)
        else:
            as0, as1, as2, as3 = _split_subs(a_all, CPB)
            for sub in tl.static_range(CPB):
                w = tl.reshape(_sub_values(wb, s, z, sub, WFMT, BITS, HAS_ZP, F16_CODES, HW_FP8),
                               (BLOCK_N, BLOCK_KB))
                acc = _dot_acc(_pick(as0, as1, as2, as3, sub), w, acc, SWAP_AB, DOT_F32)
    if F16_CODES and WFMT == 8:
        acc = acc * 16384.0  # the fp16-lane e2m1 codes' 2^-14
    if HAS_GS:
        acc = acc * tl.load(gs_ptr).to(tl.float32)
    # With SWAP_AB the [BLOCK_N, BLOCK_M] tile is stored as it lies, through transposed pointers: a
    # tl.trans here sent it through shared memory, and ptxas then serialised the loop's wgmmas (C7515).
    if SWAP_AB:
        at_m = offs_m[None, :].to(tl.int64)
        at_n = offs_n[:, None]
        mask = n_mask[:, None] & m_mask[None, :]
    else:
        at_m = offs_m[:, None].to(tl.int64)
        at_n = offs_n[None, :]
        mask = m_mask[:, None] & n_mask[None, :]
    if not ATOMIC:
        if HAS_BIAS:
            b = tl.load(bias_ptr + at_n, mask=at_n < N, other=0.0)
            acc += b.to(tl.float32)
        tl.store(out_ptr + at_m * stride_om + at_n, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.atomic_add(ws_ptr + at_m * N + at_n, acc, mask=mask)


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
