"""The memory layout in which the kernels read a constant input fastest, chosen once at load.

A layout changes strides, never values, so every kernel accepts either layout; only the speed
differs. DequantMatMul reads its [N, G] block scales (and zero points) one block at a time across
the BLOCK_N rows of a tile: stored column-major (strides (1, N)), each of those loads is one
contiguous run instead of BLOCK_N scattered 1-2 byte reads. On the H200 this took int4 block 32 at
M = 1 from 57.7 to 46.5 us and NVFP4 at M = 4 from 147 to 116 us on 28672x8192
(benchmarks/RESULTS.md). DequantGather reads a few whole rows: it keeps the row-major layout.
"""

from __future__ import annotations

_COLUMN_MAJOR_USES = {("DequantMatMul", "scale"), ("DequantMatMul", "zero_point")}


def prepare_constant(tensor, uses):
    """tensor (a torch tensor), laid out for the (op_type, input role) pairs of the nodes that read it."""
    uses = set(uses)
    if tensor.dim() == 2 and uses and uses <= _COLUMN_MAJOR_USES:
        return tensor.t().contiguous().t()
    return tensor
