"""Integer arithmetic for launch configs and grids, on the host.

Not triton.cdiv / triton.next_power_of_2: in triton 3.6 and 3.9 cdiv is a ConstexprFunction, whose
host call unwraps its arguments through Triton's constexpr machinery, microseconds a call. Building
a DequantMatMul's candidate list made about 70 such calls; on the H200 machine that list was half
of the call's host time.
"""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_pow2(x: int) -> int:
    """The smallest power of two >= x (1 for x <= 1)."""
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def pow2_floor(x: int) -> int:
    """The largest power of two <= x (1 for x <= 1)."""
    return 1 if x <= 1 else 1 << (x.bit_length() - 1)
