"""Decode whole rows of the docs/ops.md row layout: Dequantize, DequantGather, and the generic
materialising path of DequantMatMul (any block size, including ones that split a byte).

Each program decodes a [BLOCK_R, BLOCK_K] tile element by element (a code's byte is k // CPB,
its bit offset (k % CPB) * BITS); the output write dominates the traffic, so per-element scale
loads (served from L1) cost little here.
"""

from __future__ import annotations

from onnxfuse.kernels import triton_env
from onnxfuse.kernels.decode import decode_element, decode_scale
from onnxfuse.kernels.launch_math import cdiv, next_pow2

torch, triton, tl = triton_env.load()


@triton.jit
def dequant_rows_kernel(x_ptr, s_ptr, z_ptr, gs_ptr, idx_ptr, out_ptr,
                        R, K, Kb, G, V, stride_xr, stride_sr, stride_zr, stride_or,
                        WFMT: tl.constexpr, SFMT: tl.constexpr, BITS: tl.constexpr, CPB: tl.constexpr,
                        BS: tl.constexpr, HAS_ZP: tl.constexpr, HAS_GS: tl.constexpr, HAS_IDX: tl.constexpr,
                        BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[r, k] = decoded row (idx[r] if HAS_IDX else r), element k. Bad indices give NaN rows."""
    pid_r = tl.program_id(0)
    pid_k = tl.program_id(1)
    MASK: tl.constexpr = (1 << BITS) - 1
    offs_r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    r_mask = offs_r < R
    if HAS_IDX:
        rows = tl.load(idx_ptr + offs_r, mask=r_mask, other=0).to(tl.int64)
        rows = tl.where(rows < 0, rows + V, rows)
        valid = (rows >= 0) & (rows < V)
        rows = tl.where(valid, rows, 0)
    else:
        rows = offs_r.to(tl.int64)
        valid = r_mask
    k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    k_mask = k < K
    mask = (r_mask & valid)[:, None] & k_mask[None, :]
    byte = tl.load(x_ptr + rows[:, None] * stride_xr + (k // CPB)[None, :], mask=mask, other=0).to(tl.int32)
    codes = (byte >> ((k % CPB) * BITS)[None, :]) & MASK
    v = decode_element(codes, WFMT)
    g = (k // BS)[None, :]
    raw_s = tl.load(s_ptr + rows[:, None] * stride_sr + g, mask=mask, other=0)
    if HAS_ZP:
        raw_z = tl.load(z_ptr + rows[:, None] * stride_zr + g, mask=mask, other=0).to(tl.int32)
        v = v - decode_element(raw_z, WFMT)
    v = v * decode_scale(raw_s, SFMT)
    if HAS_GS:
        v = v * tl.load(gs_ptr).to(tl.float32)
    if HAS_IDX:
        v = tl.where(valid[:, None], v, float("nan"))
    out = out_ptr + offs_r[:, None].to(tl.int64) * stride_or + k[None, :]
    tl.store(out, v.to(out_ptr.dtype.element_ty), mask=r_mask[:, None] & k_mask[None, :])


def decode_rows_device(x, scale, zero_point, global_scale, *, K, block_size, element, scale_code,
                       out_dtype, indices=None, block_r=None, block_k=None):
    """Launch dequant_rows_kernel: rows of x (or x[indices]) -> [R, K] tensor of out_dtype."""
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
    if block_k is None:
        block_k = min(1024, next_pow2(K))
    if block_r is None:
        block_r = max(1, min(next_pow2(R), 4096 // block_k))
    grid = (cdiv(R, block_r), cdiv(K, block_k))
    dummy = x
    dequant_rows_kernel[grid](
        x, scale, zero_point if zero_point is not None else dummy,
        global_scale if global_scale is not None else dummy, idx if idx is not None else dummy, out,
        R, K, x.shape[1], G, V, x.stride(0), scale.stride(0),
        zero_point.stride(0) if zero_point is not None else 0, out.stride(0),
        WFMT=element.id, SFMT=scale_code.id, BITS=element.bits, CPB=element.codes_per_byte, BS=block_size,
        HAS_ZP=zero_point is not None, HAS_GS=global_scale is not None, HAS_IDX=idx is not None,
        BLOCK_R=block_r, BLOCK_K=block_k, num_warps=4,
    )
    return out
