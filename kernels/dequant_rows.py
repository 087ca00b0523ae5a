"""Decode whole rows of the docs/ops.md row layout: Dequantize, DequantGather, and the
materialising path of DequantMatMul (large M, and any block size).

Block sizes the tiled kernels cover (a power of two of whole bytes, kernels/format_codes.py) run
dequant_blocks_kernel: a program loads [BLOCK_R, NG, BSB] bytes as contiguous runs and one scale
per (row, block), decodes each sub-position of a byte, and interleaves them back into K order, so
the output is written with wide stores at close to the write bandwidth (the output, 2-4x the
input, dominates the traffic). Other block sizes run dequant_rows_kernel, element by element (a
code's byte is k // CPB, its bit offset (k % CPB) * BITS, its scale loaded per element from L1).
Both compute (q - z) * s (* global scale) in float32 and round once: the same values.
"""

from __future__ import annotations

from onnxfuse.kernels import format_codes, triton_env
from onnxfuse.kernels.decode import decode_element, decode_scale
from onnxfuse.kernels.launch_math import cdiv, next_pow2

torch, triton, tl = triton_env.load()


@triton.jit
def dequant_rows_kernel(x_ptr, s_ptr, z_ptr, gs_ptr, idx_ptr, out_ptr,
                        R, K, Kb, G, V, stride_xr, stride_sr, stride_sg, stride_zr, stride_zg, stride_or,
                        WFMT: tl.constexpr, SFMT: tl.constexpr, BITS: tl.constexpr, CPB: tl.constexpr,
                        BS: tl.constexpr, HAS_ZP: tl.constexpr, HAS_GS: tl.constexpr, HAS_IDX: tl.constexpr,
                        BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[r, k] = decoded row (idx[r] if HAS_IDX else r), element k. Bad indices give NaN rows."""
    MASK: tl.constexpr = (1 << BITS) - 1
    offs_r, r_mask, rows, valid = _rows(idx_ptr, R, V, HAS_IDX, BLOCK_R)
    pid_k = tl.program_id(1)
    k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    k_mask = k < K
    mask = (r_mask & valid)[:, None] & k_mask[None, :]
    byte = tl.load(x_ptr + rows[:, None] * stride_xr + (k // CPB)[None, :], mask=mask, other=0).to(tl.int32)
    codes = (byte >> ((k % CPB) * BITS)[None, :]) & MASK
    v = decode_element(codes, WFMT)
    g = (k // BS)[None, :]
    raw_s = tl.load(s_ptr + rows[:, None] * stride_sr + g * stride_sg, mask=mask, other=0)
    if HAS_ZP:
        raw_z = tl.load(z_ptr + rows[:, None] * stride_zr + g * stride_zg, mask=mask, other=0).to(tl.int32)
        v = v - decode_element(raw_z, WFMT)
    v = v * decode_scale(raw_s, SFMT)
    if HAS_GS:
        v = v * tl.load(gs_ptr).to(tl.float32)
    _store_rows(v, out_ptr, offs_r, r_mask, valid, k, K, stride_or, HAS_IDX)


@triton.jit
def _rows(idx_ptr, R, V, HAS_IDX: tl.constexpr, BLOCK_R: tl.constexpr):
    """This program's output rows, the source row of each (int64) and whether it exists."""
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    r_mask = offs_r < R
    if HAS_IDX:
        rows = tl.load(idx_ptr + offs_r, mask=r_mask, other=0).to(tl.int64)
        rows = tl.where(rows < 0, rows + V, rows)
        valid = (rows >= 0) & (rows < V)
        rows = tl.where(valid, rows, 0)
    else:
        rows = offs_r.to(tl.int64)
        valid = r_mask
    return offs_r, r_mask, rows, valid


@triton.jit
def _store_rows(v, out_ptr, offs_r, r_mask, valid, k, K, stride_or, HAS_IDX: tl.constexpr):
    if HAS_IDX:
        v = tl.where(valid[:, None], v, float("nan"))
    out = out_ptr + offs_r[:, None].to(tl.int64) * stride_or + k[None, :]
    tl.store(out, v.to(out_ptr.dtype.element_ty), mask=r_mask[:, None] & (k < K)[None, :])


@triton.jit
def _decoded_sub(wb, s, z, SUB: tl.constexpr, WFMT: tl.constexpr, BITS: tl.constexpr, HAS_ZP: tl.constexpr):
    """(code at sub-position SUB of each byte - z) * s: [BLOCK_R, NG, BSB] float32."""
    q = decode_element((wb >> (SUB * BITS)) & ((1 << BITS) - 1), WFMT)
    if HAS_ZP:
        q = q - z[:, :, None]
    return q * s[:, :, None]


@triton.jit
def dequant_blocks_kernel(x_ptr, s_ptr, z_ptr, gs_ptr, idx_ptr, out_ptr,
                          R, K, Kb, G, V, stride_xr, stride_sr, stride_sg, stride_zr, stride_zg, stride_or,
                          WFMT: tl.constexpr, SFMT: tl.constexpr, BITS: tl.constexpr, CPB: tl.constexpr,
                          BS: tl.constexpr, HAS_ZP: tl.constexpr, HAS_GS: tl.constexpr, HAS_IDX: tl.constexpr,
                          BLOCK_R: tl.constexpr, NG: tl.constexpr, BSB: tl.constexpr):
    """out[r, k] as dequant_rows_kernel, for BS a power of two of whole bytes (BSB = BS / CPB bytes):
    a program covers NG blocks of BLOCK_R rows."""
    offs_r, r_mask, rows, valid = _rows(idx_ptr, R, V, HAS_IDX, BLOCK_R)
    g = tl.program_id(1) * NG + tl.arange(0, NG)
    byte = g[:, None] * BSB + tl.arange(0, BSB)[None, :]
    row_ok = (r_mask & valid)[:, None]
    wb = tl.load(x_ptr + rows[:, None, None] * stride_xr + byte[None, :, :],
                 mask=row_ok[:, :, None] & (byte < Kb)[None, :, :], other=0).to(tl.int32)
    smask = row_ok & (g < G)[None, :]
    s = decode_scale(tl.load(s_ptr + rows[:, None] * stride_sr + g[None, :] * stride_sg, mask=smask, other=0), SFMT)
    if HAS_GS:  # (q - z) * s * gs, in the order of dequant_rows_kernel
        s_gs = tl.load(gs_ptr).to(tl.float32)
    z = s
    if HAS_ZP:
        z = decode_element(tl.load(z_ptr + rows[:, None] * stride_zr + g[None, :] * stride_zg, mask=smask,
                                   other=0).to(tl.int32), WFMT)
    v0 = _decoded_sub(wb, s, z, 0, WFMT, BITS, HAS_ZP)
    if CPB == 1:
        v = v0
    elif CPB == 2:
        v = tl.join(v0, _decoded_sub(wb, s, z, 1, WFMT, BITS, HAS_ZP))
    else:  # join(join(0, 2), join(1, 3)) has last axes (sub // 2, sub % 2): flattened, sub order
        v1 = _decoded_sub(wb, s, z, 1, WFMT, BITS, HAS_ZP)
        v2 = _decoded_sub(wb, s, z, 2, WFMT, BITS, HAS_ZP)
        v = tl.join(tl.join(v0, v2), tl.join(v1, _decoded_sub(wb, s, z, 3, WFMT, BITS, HAS_ZP)))
    v = tl.reshape(v, (BLOCK_R, NG * BSB * CPB))
    if HAS_GS:
        v = v * s_gs
    k = tl.program_id(1) * (NG * BSB * CPB) + tl.arange(0, NG * BSB * CPB)
    _store_rows(v, out_ptr, offs_r, r_mask, valid, k, K, stride_or, HAS_IDX)


def decode_rows_device(x, scale, zero_point, global_scale, *, K, block_size, element, scale_code,
                       out_dtype, indices=None):
    """Rows of x (or x[indices]) -> [R, K] tensor of out_dtype. Scale and zero point: [V, G] of any strides."""
    V = x.shape[0]
    if indices is not None:
        idx = indices.reshape(-1).contiguous()
        R = idx.numel()
    else:
        idx = None
        R = V
    out = torch.empty((R, K), dtype=out_dtype, device=x.device)
    if R == 0 or K == 0:
        return out
    G = scale.shape[1]
    dummy = x
    z = zero_point
    args = (x, scale, z if z is not None else dummy, global_scale if global_scale is not None else dummy,
            idx if idx is not None else dummy, out, R, K, x.shape[1], G, V, x.stride(0), scale.stride(0),
            scale.stride(1), z.stride(0) if z is not None else 0, z.stride(1) if z is not None else 0, out.stride(0))
    consts = dict(WFMT=element.id, SFMT=scale_code.id, BITS=element.bits, CPB=element.codes_per_byte, BS=block_size,
                  HAS_ZP=z is not None, HAS_GS=global_scale is not None, HAS_IDX=idx is not None, num_warps=4)
    bsb = block_size // element.codes_per_byte
    if format_codes.fast_path_reason(element, block_size) is None and bsb <= 2048:
        ng = max(1, min(next_pow2(G), 256 // bsb))  # 256-byte steps of a row (at least one block)
        block_r = max(1, min(next_pow2(R), 4096 // (ng * bsb)))
        dequant_blocks_kernel[(cdiv(R, block_r), cdiv(G, ng))](*args, BLOCK_R=block_r, NG=ng, BSB=bsb, **consts)
        return out
    block_k = min(1024, next_pow2(K))
    block_r = max(1, min(next_pow2(R), 4096 // block_k))
    dequant_rows_kernel[(cdiv(R, block_r), cdiv(K, block_k))](*args, BLOCK_R=block_r, BLOCK_K=block_k, **consts)
    return out
