"""QuantizeDequantize: fake quantization of an activation in one pass.

Static mode: elementwise with the given scale (per tensor, per axis or blocked) and zero point,
as ONNX QuantizeLinear then DequantizeLinear: q = clamp(round(x / s) + zp), y = (q - zp) * s.
Dynamic mode: each program holds whole blocks [BLOCK_R, BLOCK_G, next_pow2(block_size)] so the
block amax is a register reduction, then the scale rule of onnxfuse.formats.scale_rules:
  mx      s = 2^(floor(log2 amax) - emax_elem) (MXINT8: a further 2^-6, codes within +-127)
  nvfp4   s = e4m3(max(amax / 6 / g, 2^-9)) * g, g the per-tensor scale (global_scale input;
          absent: amax(|x|) / (6 * 448), computed on the device first)
  absmax  s = amax / max_elem (float32; 1.0 for an all-zero block)
Elements round with `rounding_mode` (docs/ops.md): nearest with ties "even" (ONNX), "away"
(from zero) or "up" (toward +inf), or directed "floor" / "ceil", on the element's grid; floats
saturate to +-max when `saturate` (else overflow gives NaN for float8e4m3fn, Inf for
float8e5m2; fp4/fp6 always saturate).
MX shared exponents are those of onnxfuse.formats.scale_rules.mx and the function bodies:
floor(log2 amax) (at most 127) - emax, clipped to [-127, 127], -127 for an all-zero block;
2^-127 is the E8M0 subnormal. A NaN in a block makes its scale NaN (as the bodies do).
"""

from __future__ import annotations

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.kernels import format_codes, inputs, triton_env
from onnxfuse.kernels.decode import decode_element
from onnxfuse.kernels.launch_math import cdiv, next_pow2

torch, triton, tl = triton_env.load()

# float formats: (mantissa bits, min normal exponent, max value, overflow without saturation: 0 NaN, 1 Inf, 2 saturate)
_FLOAT_GRID = {
    "float8e4m3fn": (3, -6, 448.0, 0),
    "float8e5m2": (2, -14, 57344.0, 1),
    "float4e2m1": (1, 0, 6.0, 2),
    "float6e2m3": (3, 0, 7.5, 2),
    "float6e3m2": (2, -2, 28.0, 2),
}
_MX_EMAX = {"float8e4m3fn": 8, "float8e5m2": 15, "float6e2m3": 2, "float6e3m2": 4, "float4e2m1": 2, "int8": 6}
# (int8: MXINT8's implicit 2^-6 folded in, so s = 2^(floor(log2 amax) - 6))
_ROUND = {"even": 0, "floor": 1, "ceil": 2, "away": 3, "up": 4}
_RULE = {"mx": 0, "nvfp4": 1, "absmax": 2}


@triton.jit
def _round(x, ROUND: tl.constexpr):
    if ROUND == 0:  # half to even: adding 1.5 * 2^23 leaves no fraction bits (|x| < 2^22)
        r = (x + 12582912.0) - 12582912.0
    elif ROUND == 1:
        r = tl.floor(x)
    elif ROUND == 2:
        r = tl.ceil(x)
    else:  # nearest, ties away from zero (3) or toward +inf (4); a - floor(a) is exact for a >= 0
        a = tl.abs(x)
        whole = tl.floor(a)
        frac = a - whole
        carry = frac >= 0.5
        if ROUND == 4:  # a negative value's tie rounds its magnitude down
            carry = tl.where(x < 0, frac > 0.5, carry)
        m = whole + tl.where(carry, 1.0, 0.0)
        r = tl.where(x < 0, -m, m)
    return r


@triton.jit
def _exp2_int(e):
    """2^e as float32 for integer tensors -126 <= e <= 127."""
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _e8m0_value(e):
    """2^e for shared exponents -127 <= e <= 127: E8M0's values (2^-127 is a float32 subnormal)."""
    return tl.where(e == -127, 5.877471754111438e-39, _exp2_int(tl.maximum(e, -126)))


@triton.jit
def _floor_log2(a):
    """floor(log2(a)) for a normal positive float32 (subnormals give -127)."""
    return ((a.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127


@triton.jit
def _to_grid(v, zp, IS_FLOAT: tl.constexpr, QMIN: tl.constexpr, QMAX: tl.constexpr, MBITS: tl.constexpr,
             EMIN: tl.constexpr, FMAX: tl.constexpr, OVERFLOW: tl.constexpr, SATURATE: tl.constexpr,
             ROUND: tl.constexpr):
    """v (x / scale) -> the value its quantized code decodes to (zp already subtracted)."""
    if IS_FLOAT:
        a = tl.abs(v)
        e = tl.maximum(_floor_log2(a), EMIN)  # Inf/NaN give 128: step stays a float
        step = _exp2_int(e - MBITS)
        r = _round(v / step, ROUND) * step
        ra = tl.abs(r)
        if SATURATE or OVERFLOW == 2:
            r = tl.where(ra > FMAX, tl.where(r < 0, -FMAX, FMAX), r)
        elif OVERFLOW == 0:
            r = tl.where(ra > FMAX, float("nan"), r)
        else:
            r = tl.where(ra > FMAX, tl.where(r < 0, float("-inf"), float("inf")), r)
        # The sign of v, zeros included: the element's code keeps it (-0.3 -> -0 as the references give)
        sign = (v.to(tl.int32, bitcast=True) >> 31) << 31
        r = (tl.abs(r).to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)
        r = tl.where(v != v, float("nan"), r)
    else:
        t = tl.minimum(tl.maximum(v, QMIN - 1.0 - zp), QMAX + 1.0 - zp)  # keeps _round's |x| < 2^22
        q = tl.minimum(tl.maximum(_round(t, ROUND) + zp, QMIN), QMAX)
        r = q - zp
    return r


@triton.jit
def qdq_static_kernel(x_ptr, s_ptr, z_ptr, out_ptr, R, K, stride_sr, stride_zr, BS,
                      WFMT: tl.constexpr, HAS_ZP: tl.constexpr, IS_FLOAT: tl.constexpr, QMIN: tl.constexpr,
                      QMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr, FMAX: tl.constexpr,
                      OVERFLOW: tl.constexpr, SATURATE: tl.constexpr, ROUND: tl.constexpr,
                      BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_r = tl.program_id(0)
    pid_k = tl.program_id(1)
    r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (r < R)[:, None] & (k < K)[None, :]
    offs = r[:, None].to(tl.int64) * K + k[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = (k // BS)[None, :]
    s = tl.load(s_ptr + r[:, None].to(tl.int64) * stride_sr + g, mask=mask, other=1.0).to(tl.float32)
    if HAS_ZP:
        zp = decode_element(tl.load(z_ptr + r[:, None].to(tl.int64) * stride_zr + g, mask=mask, other=0).to(tl.int32), WFMT)
    else:
        zp = tl.zeros_like(x)
    y = _to_grid(x / s, zp, IS_FLOAT, QMIN, QMAX, MBITS, EMIN, FMAX, OVERFLOW, SATURATE, ROUND) * s
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def qdq_dynamic_kernel(x_ptr, gs_ptr, out_ptr, R, K, G, BS,
                       RULE: tl.constexpr, IS_FLOAT: tl.constexpr, QMIN: tl.constexpr, QMAX: tl.constexpr,
                       MBITS: tl.constexpr, EMIN: tl.constexpr, FMAX: tl.constexpr, OVERFLOW: tl.constexpr,
                       SATURATE: tl.constexpr, ROUND: tl.constexpr, MX_EMAX: tl.constexpr,
                       BLOCK_R: tl.constexpr, BLOCK_G: tl.constexpr, BSP: tl.constexpr):
    pid_r = tl.program_id(0)
    pid_g = tl.program_id(1)
    r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    g = pid_g * BLOCK_G + tl.arange(0, BLOCK_G)
    j = tl.arange(0, BSP)
    k = g[:, None] * BS + j[None, :]  # [BLOCK_G, BSP]
    kmask = (j < BS)[None, :] & (k < K) & (g < G)[:, None]
    mask = (r < R)[:, None, None] & kmask[None, :, :]
    offs = r[:, None, None].to(tl.int64) * K + k[None, :, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=2)  # [BLOCK_R, BLOCK_G]
    if RULE == 0:  # mx: a power of two
        e = tl.minimum(_floor_log2(amax), 127) - MX_EMAX  # Inf: floor_log2 128, clipped to 127 as the bodies do
        e = tl.where(amax == 0, -127, tl.minimum(tl.maximum(e, -127), 127))
        s = tl.where(amax != amax, float("nan"), _e8m0_value(e))
    elif RULE == 1:  # nvfp4: E4M3 block scale times the per-tensor scale
        gsc = tl.load(gs_ptr).to(tl.float32)
        target = tl.maximum((amax / 6.0) / gsc, 0.001953125)
        s = _to_grid(target, 0.0, True, 0, 0, 3, -6, 448.0, 0, True, 0) * gsc
    else:  # absmax
        s = tl.where(amax == 0, 1.0, amax / FMAX)
    v = x / s[:, :, None]
    y = _to_grid(v, 0.0, IS_FLOAT, QMIN, QMAX, MBITS, EMIN, FMAX, OVERFLOW, SATURATE, ROUND) * s[:, :, None]
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def _element_params(element_format: str, rule: str | None):
    e = format_codes.element_code(element_format)
    if isinstance(e, str):
        raise OnnxfuseError.of(codes.NO_KERNEL, e)
    if e.is_float:
        mbits, emin, fmax, overflow = _FLOAT_GRID[e.name]
        return e, dict(IS_FLOAT=True, QMIN=0, QMAX=0, MBITS=mbits, EMIN=emin, FMAX=fmax, OVERFLOW=overflow)
    bits = {"int2": 2, "uint2": 2, "int4": 4, "uint4": 4, "int8": 8, "uint8": 8}[e.name]
    qmin, qmax = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if e.signed else (0, (1 << bits) - 1)
    if rule == "mx" and e.name == "int8":
        qmin = -127  # MXINT8 is symmetric (OCP reference; onnxfuse.formats.scale_rules)
    return e, dict(IS_FLOAT=False, QMIN=qmin, QMAX=qmax, MBITS=0, EMIN=0, FMAX=float(qmax), OVERFLOW=2)


def _rows_of(t, axis, K):
    moved = t.movedim(axis, -1)
    return moved.reshape(-1, K).contiguous(), moved.shape


def quantize_dequantize(x, scale, zero_point, global_scale, *, element_format, axis, block_size, mode,
                        scale_rule, rounding_mode="even", saturate=True):
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"X must be float32, float16 or bfloat16, got {x.dtype}")
    if rounding_mode not in _ROUND:
        raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, f"rounding_mode {rounding_mode!r} is not one of {list(_ROUND)}")
    if x.dim() == 0:
        x_nd, axis = x.reshape(1), 0
    else:
        x_nd = x
    axis = axis + x_nd.dim() if axis < 0 else axis
    if not 0 <= axis < x_nd.dim():
        raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, f"axis {axis} is out of range for rank {x.dim()}")
    K = x_nd.shape[axis]
    rows, moved_shape = _rows_of(x_nd, axis, K)
    R = rows.shape[0]
    out = torch.empty_like(rows)
    e, params = _element_params(element_format, scale_rule if mode == "dynamic" else None)
    common = dict(SATURATE=bool(saturate), ROUND=_ROUND[rounding_mode], **params)
    if R and K:
        if mode == "static":
            _static(rows, scale, zero_point, out, axis=axis, K=K, block_size=block_size, x_nd=x_nd, e=e, common=common)
        elif mode == "dynamic":
            _dynamic(rows, global_scale, out, K=K, block_size=block_size, e=e, rule=scale_rule, common=common)
        else:
            raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, f"mode {mode!r} is not 'static' or 'dynamic'")
    y = out.reshape(moved_shape).movedim(-1, axis)
    return y.reshape(x.shape).contiguous()


def _static(rows, scale, zero_point, out, *, axis, K, block_size, x_nd, e, common):
    if scale is None:
        raise OnnxfuseError.of(codes.INPUT_INVALID, "static QuantizeDequantize needs a scale")
    scale = scale.to(device=rows.device)
    zp = inputs.codes_uint8(torch, zero_point, "zero_point")
    if zp is not None and e.is_float:
        raise OnnxfuseError.of(codes.ZERO_POINT_FLOAT_FORMAT, f"zero points are not allowed with {e.name}")
    R = rows.shape[0]

    def as_rows(t):  # -> ([R or 1, G] tensor, row stride, block size)
        if t.numel() == 1:
            return t.reshape(1, 1), 0, K
        if t.dim() == 1 and block_size == 0:
            if t.numel() != K:
                raise OnnxfuseError.of(codes.SCALE_SHAPE_MISMATCH, f"per-axis scale has {t.numel()} values; axis has {K}")
            return t.reshape(1, K).contiguous(), 0, 1
        if block_size <= 0 or t.dim() != x_nd.dim():
            raise OnnxfuseError.of(codes.SCALE_SHAPE_MISMATCH, f"blocked scale of shape {tuple(t.shape)} needs block_size > 0 and rank {x_nd.dim()}")
        G = -(-K // block_size)
        want = list(x_nd.shape)
        want[axis] = G
        if list(t.shape) != want:
            raise OnnxfuseError.of(codes.SCALE_SHAPE_MISMATCH, f"blocked scale has shape {tuple(t.shape)}; expected {tuple(want)}")
        r, _ = _rows_of(t, axis, G)
        return r, r.stride(0), block_size

    s_rows, stride_sr, bs = as_rows(scale.to(torch.float32) if scale.dtype != torch.float32 else scale)
    if zp is not None:
        z_rows, stride_zr, _ = as_rows(zp.to(rows.device))
    else:
        z_rows, stride_zr = rows, 0
    block_k = min(1024, next_pow2(K))
    block_r = max(1, min(next_pow2(R), 4096 // block_k))
    grid = (cdiv(R, block_r), cdiv(K, block_k))
    qdq_static_kernel[grid](rows, s_rows, z_rows, out, R, K, stride_sr, stride_zr, bs, WFMT=e.id,
                            HAS_ZP=zp is not None, BLOCK_R=block_r, BLOCK_K=block_k, num_warps=4, **common)


def _dynamic(rows, global_scale, out, *, K, block_size, e, rule, common):
    if rule not in _RULE:
        raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, f"scale_rule {rule!r} is not one of {list(_RULE)}")
    if block_size <= 0:
        raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, "dynamic block scales need block_size > 0")
    if rule == "mx" and e.name not in _MX_EMAX:
        raise OnnxfuseError.of(codes.NO_KERNEL, f"no MX scheme quantizes {e.name} elements")
    if rule == "nvfp4" and e.name != "float4e2m1":
        raise OnnxfuseError.of(codes.NO_KERNEL, f"the nvfp4 rule quantizes float4e2m1, not {e.name}")
    if rule == "absmax" and not e.signed:
        raise OnnxfuseError.of(codes.NO_KERNEL, f"the absmax rule is symmetric; {e.name} is unsigned")
    gs = None
    if rule == "nvfp4":
        if global_scale is None:
            amax = rows.abs().amax().to(torch.float32)
            gs = torch.where(amax == 0, torch.ones_like(amax), amax / 2688.0).reshape(1)
        else:
            gs = inputs.global_scale_tensor(torch, global_scale, rows.device)
    R = rows.shape[0]
    G = cdiv(K, block_size)
    bsp = next_pow2(block_size)
    block_g = max(1, min(next_pow2(G), 1024 // bsp))
    block_r = max(1, min(next_pow2(R), 4096 // (bsp * block_g)))
    grid = (cdiv(R, block_r), cdiv(G, block_g))
    qdq_dynamic_kernel[grid](rows, gs if gs is not None else rows, out, R, K, G, block_size, RULE=_RULE[rule],
                             MX_EMAX=_MX_EMAX.get(e.name, 0), BLOCK_R=block_r, BLOCK_G=block_g, BSP=bsp,
                             num_warps=4, **common)
