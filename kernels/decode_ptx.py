"""Inline-PTX decoders for the GPU: four code bytes (one 32-bit register) at a time to fp16.

Triton's own decode of sub-byte codes spends an integer op per field and a conversion per code.
These work on whole registers instead: the fields of four bytes are moved with a few shifts and
LOP3s into the bits of fp16 (integers) or e4m3 (fp4) patterns, and the hardware's packed ops finish
two codes at once. Used where the activations are fp16 on a GPU (the interpreter runs no PTX):
by the swap-AB kernel (kernels/dequant_mma_kernel.py) and, for fp4, the GEMV.
"""

from __future__ import annotations

from onnxfuse.kernels import triton_env

torch, triton, tl = triton_env.load()


def _int4_ptx(signed: bool) -> str:
    """Two int4/uint4 codes a byte -> (low, high nibbles) in fp16: each field under 0x6400 (1024),
    low nibbles minus 1024 (+ 8), high nibbles (16x) scaled by 1/16 and offset in one HFMA2. Signed
    fields get their sign bit flipped by the LOP3 (field ^ 8, LUT 0x6A) so each is code + 8."""
    lo, hi, lut, off = ("0x64086408", "0x64806480", "0x6A", "0xD480D480") if signed else \
        ("0x64006400", "0x64006400", "0xEA", "0xD400D400")
    return f"""{{
            .reg .b32 t0, t1, z, c1, c2, c3;
            mov.b32 z, 0;
            prmt.b32 t0, $4, z, 0x4140;
            prmt.b32 t1, $4, z, 0x4342;
            lop3.b32 $0, t0, 0x000F000F, {lo}, {lut};
            lop3.b32 $1, t1, 0x000F000F, {lo}, {lut};
            lop3.b32 $2, t0, 0x00F000F0, {hi}, {lut};
            lop3.b32 $3, t1, 0x00F000F0, {hi}, {lut};
            mov.b32 c1, {lo};
            mov.b32 c2, 0x2C002C00;
            mov.b32 c3, {off};
            sub.f16x2 $0, $0, c1;
            sub.f16x2 $1, $1, c1;
            fma.rn.f16x2 $2, $2, c2, c3;
            fma.rn.f16x2 $3, $3, c2, c3;
            }}"""


def _int8_ptx(signed: bool) -> str:
    """Four int8/uint8 codes -> fp16: each byte under 0x64 (1024 + byte), minus 1024 (+ 128); signed
    bytes get their sign bit flipped first (byte ^ 0x80 is code + 128)."""
    src, flip, c = ("y", "xor.b32 y, $2, 0x80808080;", "0x64806480") if signed else ("$2", "", "0x64006400")
    return f"""{{
            .reg .b32 y, hi, c;
            {flip}
            mov.b32 hi, 0x64646464;
            prmt.b32 $0, {src}, hi, 0x4140;
            prmt.b32 $1, {src}, hi, 0x4342;
            mov.b32 c, {c};
            sub.f16x2 $0, $0, c;
            sub.f16x2 $1, $1, c;
            }}"""


# e2m1 (s, ee, m) -> the e4m3 byte s00eem00, whose value is the code's times 2^-6 (exponent bias 7
# against 1; the subnormal code m * 0.5 lands on e4m3's subnormal m * 2^-7 too). Low nibbles: eem
# up by 2, the sign (bit 3) up by 4; high nibbles: eem down by 2, the sign (bit 7) stays. Then one
# cvt.rn.f16x2.e4m3x2 per two bytes (the low byte to the low half), exact.
FP4_E4M3_EXP = 6
_FP4_E4M3_PTX = """{
        .reg .b32 t, s, l, h;
        .reg .b16 l0, l1, h0, h1;
        shl.b32 t, $4, 2;
        and.b32 s, $4, 0x08080808;
        shl.b32 s, s, 4;
        lop3.b32 l, t, 0x1C1C1C1C, s, 0xEA;
        shr.b32 t, $4, 2;
        and.b32 s, $4, 0x80808080;
        lop3.b32 h, t, 0x1C1C1C1C, s, 0xEA;
        mov.b32 {l0, l1}, l;
        mov.b32 {h0, h1}, h;
        cvt.rn.f16x2.e4m3x2 $0, l0;
        cvt.rn.f16x2.e4m3x2 $1, l1;
        cvt.rn.f16x2.e4m3x2 $2, h0;
        cvt.rn.f16x2.e4m3x2 $3, h1;
        }"""

_INT4_SIGNED: tl.constexpr = tl.constexpr(_int4_ptx(True))
_INT4_UNSIGNED: tl.constexpr = tl.constexpr(_int4_ptx(False))
_INT8_SIGNED: tl.constexpr = tl.constexpr(_int8_ptx(True))
_INT8_UNSIGNED: tl.constexpr = tl.constexpr(_int8_ptx(False))
_FP4_E4M3: tl.constexpr = tl.constexpr(_FP4_E4M3_PTX)


@triton.jit
def asm_int4(w, SIGNED: tl.constexpr):
    """Four bytes of two int4/uint4 codes each -> (low nibbles, high nibbles) as fp16 (_int4_ptx)."""
    if SIGNED:
        v = tl.inline_asm_elementwise(_INT4_SIGNED, "=r,=r,=r,=r,r", [w], dtype=(tl.float16, tl.float16),
                                      is_pure=True, pack=4)
    else:
        v = tl.inline_asm_elementwise(_INT4_UNSIGNED, "=r,=r,=r,=r,r", [w], dtype=(tl.float16, tl.float16),
                                      is_pure=True, pack=4)
    return v


@triton.jit
def asm_int8(w, SIGNED: tl.constexpr):
    """Four int8/uint8 codes -> fp16 (_int8_ptx)."""
    if SIGNED:
        v = tl.inline_asm_elementwise(_INT8_SIGNED, "=r,=r,r", [w], dtype=tl.float16, is_pure=True, pack=4)
    else:
        v = tl.inline_asm_elementwise(_INT8_UNSIGNED, "=r,=r,r", [w], dtype=tl.float16, is_pure=True, pack=4)
    return v


@triton.jit
def asm_fp4(w):
    """Four bytes of two e2m1 codes each -> (low, high nibbles) as fp16 holding value * 2^-6
    (FP4_E4M3_EXP), through e4m3 and the hardware's conversion (_FP4_E4M3_PTX)."""
    return tl.inline_asm_elementwise(_FP4_E4M3, "=r,=r,=r,=r,r", [w], dtype=(tl.float16, tl.float16),
                                     is_pure=True, pack=4)
