"""Format names -> the small integer ids and bit facts the Triton kernels take as constexprs.

Kept free of torch/triton so `supported()` and the optimize path can use it. The values are the
docs/ops.md storage facts: how many codes share a byte in the row layout and how wide each is.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ElementCode:
    name: str
    id: int  # the WFMT constexpr of the kernels (see kernels/decode.py)
    bits: int  # bits per code in the row layout
    codes_per_byte: int
    is_float: bool
    signed: bool


@dataclasses.dataclass(frozen=True)
class ScaleCode:
    name: str
    id: int  # the SFMT constexpr
    torch_storage: str  # torch dtype name the stored scale arrives in (docs/ops.md)


# Ids are private to the kernels; only the names are the contract.
ELEMENTS = {
    e.name: e
    for e in (
        ElementCode("int2", 0, 2, 4, False, True),
        ElementCode("uint2", 1, 2, 4, False, False),
        ElementCode("int4", 2, 4, 2, False, True),
        ElementCode("uint4", 3, 4, 2, False, False),
        ElementCode("int8", 4, 8, 1, False, True),
        ElementCode("uint8", 5, 8, 1, False, False),
        ElementCode("float8e4m3fn", 6, 8, 1, True, True),
        ElementCode("float8e5m2", 7, 8, 1, True, True),
        ElementCode("float4e2m1", 8, 4, 2, True, True),
        # fp6: one 6-bit code in the low bits of each byte (docs/ops.md), so a byte load per code.
        ElementCode("float6e2m3", 9, 8, 1, True, True),
        ElementCode("float6e3m2", 10, 8, 1, True, True),
    )
}

SCALES = {
    s.name: s
    for s in (
        ScaleCode("float32", 0, "float32"),
        ScaleCode("float16", 1, "float16"),
        ScaleCode("bfloat16", 2, "uint16"),
        ScaleCode("float8e8m0", 3, "uint8"),
        ScaleCode("float8e4m3fn", 4, "uint8"),
    )
}


def element_code(name: str) -> ElementCode | str:
    """The element's kernel facts, or a sentence saying why there is none."""
    if name in ELEMENTS:
        return ELEMENTS[name]
    return f"no kernel for weight_format {name!r}; known: {', '.join(ELEMENTS)}"


def scale_code(name: str) -> ScaleCode | str:
    if name in SCALES:
        return SCALES[name]
    return f"no kernel for scale_format {name!r}; known: {', '.join(SCALES)}"


def fast_path_reason(element: ElementCode, block_size: int) -> str | None:
    """None when the tiled GEMV/GEMM kernels cover this block size, else why the generic
    (dequantize-then-matmul) path runs instead. The tiled kernels load one scale per
    (row, block) so a block must be a power of two holding whole bytes."""
    if block_size <= 0:
        return f"block_size must be positive (got {block_size})"
    if block_size & (block_size - 1):
        return f"block_size {block_size} is not a power of two"
    if block_size % element.codes_per_byte:
        return f"block_size {block_size} splits a byte of {element.name} ({element.codes_per_byte} codes per byte)"
    return None
