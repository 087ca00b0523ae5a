"""Every check a candidate passes before it is rewritten (issue 3, "Validation while rewriting").

Each check returns Diagnostics (empty when fine); an error among them means the pattern stays
exactly as it was. Warnings (zero scales, compute-range) are reported and the fusion goes ahead.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxfuse import codes
from onnxfuse.formats.legality import FIRST_BLOCKED_OPSET
from onnxfuse.diagnostics import Diagnostic
from onnxfuse.passes import match
from onnxfuse.passes.qdq import QDQ, expected_scale_shape, scale_values

FP16_MAX = 65504.0
FP16_MIN_SUBNORMAL = 2.0**-24


def _where(q: QDQ, tensor: ir.Value | None = None) -> dict:
    return {"node": match.node_label(q.node), "tensor": tensor.name if tensor is not None else None}


def check_formats(q: QDQ, opset: int) -> list[Diagnostic]:
    """Element type known, scale type legal for it at the model's opset, block_size allowed."""
    from onnxfuse import formats

    if q.element is None:
        dtype = match.elem_type(q.data)
        return [Diagnostic.error(
            codes.ELEMENT_TYPE_UNSUPPORTED,
            f"data type {getattr(dtype, 'name', dtype)} is not a quantized element format onnxfuse knows",
            **_where(q, q.data),
        )]
    out: list[Diagnostic] = []
    if q.scale_format is None:
        dtype = match.elem_type(q.scale_codes_value)
        return [Diagnostic.error(
            codes.SCALE_DTYPE_ILLEGAL,
            f"scale type {getattr(dtype, 'name', dtype)} is not a scale format onnxfuse knows",
            **_where(q, q.scale_codes_value),
        )]
    if q.block_size > 0 and opset < FIRST_BLOCKED_OPSET and not q.scale_is_e8m0_uint8:
        out.append(Diagnostic.error(
            codes.OPSET_TOO_OLD,
            f"block_size needs DequantizeLinear opset >= 21 (the model imports opset {opset})",
            **_where(q),
            hint="convert the model to opset 21 or later (onnx.version_converter)",
        ))
    if q.scale_is_e8m0_uint8:
        return out  # a ModelOpt op, not an ONNX DQ: the ONNX type rules do not apply
    reason = formats.scale_legality(q.element, q.scale_format, opset, inner_of_two_level=q.two_level is not None)
    if reason:
        code = codes.OPSET_TOO_OLD if q.element.min_opset > opset else codes.SCALE_DTYPE_ILLEGAL
        out.append(Diagnostic.error(code, reason, **_where(q, q.scale_codes_value)))
    return out


def check_shapes(q: QDQ) -> list[Diagnostic]:
    """Scale and zero-point shapes consistent with the data shape, axis and block_size."""
    out: list[Diagnostic] = []
    scale_shape = match.const_shape(q.scale_codes_value)
    if q.block_size > 0 and q.data_shape is not None and scale_shape is not None:
        want = expected_scale_shape(q.data_shape, q.axis, q.block_size)
        if tuple(scale_shape) != want:
            out.append(Diagnostic.error(
                codes.SCALE_SHAPE_MISMATCH,
                f"scale shape {list(scale_shape)} does not match data shape {list(q.data_shape)} with "
                f"axis {q.axis} and block_size {q.block_size} (expected {list(want)})",
                **_where(q, q.scale_codes_value),
            ))
    if q.zero_point is not None:
        zp_shape = match.const_shape(q.zero_point)
        zp_dtype = match.elem_type(q.zero_point)
        data_dtype = match.elem_type(q.data)
        if zp_shape is not None and scale_shape is not None and tuple(zp_shape) != tuple(scale_shape):
            out.append(Diagnostic.error(
                codes.ZERO_POINT_SHAPE_MISMATCH,
                f"zero point shape {list(zp_shape)} differs from the scale shape {list(scale_shape)}",
                **_where(q, q.zero_point),
            ))
        elif zp_dtype is not None and data_dtype is not None and zp_dtype != data_dtype:
            out.append(Diagnostic.error(
                codes.ZERO_POINT_SHAPE_MISMATCH,
                f"zero point type {zp_dtype.name} differs from the data type {data_dtype.name}",
                **_where(q, q.zero_point),
            ))
    return out


def check_zero_point(q: QDQ) -> list[Diagnostic]:
    """A float element format cannot carry a non-zero zero point."""
    if q.zero_point is None or q.element is None or not q.element.is_float:
        return []
    zp = match.const_array(q.zero_point)
    if zp is None:
        return [Diagnostic.error(
            codes.ZERO_POINT_FLOAT_FORMAT,
            f"a run-time zero point was given for the float format {q.element.name}",
            **_where(q, q.zero_point),
        )]
    values = np.asarray(q.element.decode(q.element.codes_of(zp)), dtype=np.float32)
    if np.any(values != 0):
        return [Diagnostic.error(
            codes.ZERO_POINT_FLOAT_FORMAT,
            f"the float format {q.element.name} has non-zero zero points; a float element has no zero point",
            **_where(q, q.zero_point),
        )]
    return []


def _check_values(values: np.ndarray, q: QDQ, tensor: ir.Value, what: str, e8m0: bool) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    bad = ~np.isfinite(values)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        extra = " (the E8M0 NaN code 0xFF)" if e8m0 else ""
        out.append(Diagnostic.error(
            codes.SCALE_NAN_INF,
            f"{int(bad.sum())} {what} value(s) are NaN or infinite{extra}, first at index {list(first)}",
            **_where(q, tensor),
            hint="re-export or re-quantize the model; such a block has no defined value",
        ))
    zero = values == 0
    if zero.any():
        out.append(Diagnostic.warning(
            codes.SCALE_ZERO,
            f"{int(zero.sum())} {what} value(s) are zero: those blocks dequantize to zero",
            **_where(q, tensor),
        ))
    return out


def check_scale_values(q: QDQ) -> list[Diagnostic]:
    """NaN, Inf (E8M0 0xFF included) are errors, zeros a warning; a run-time scale is not fusable."""
    if q.scale_format is None:
        return []
    values = scale_values(q)
    if values is None:
        return [Diagnostic.error(
            codes.WEIGHT_DYNAMIC,
            "the scale is computed at run time; only constant scales are fused for a weight",
            **_where(q, q.scale_codes_value),
        )]
    return _check_values(values, q, q.scale_codes_value, "scale", q.scale_format.name == "float8e8m0")


def global_scale_value(q: QDQ) -> float | None:
    """The two-level outer factor as a float (None when absent or not a readable constant scalar)."""
    if q.two_level is None:
        return None
    outer = match.const_array(q.two_level.outer)
    if outer is None or outer.size != 1:
        return None
    return float(np.asarray(outer, dtype=np.float32).reshape(()))


def check_two_level(q: QDQ) -> list[Diagnostic]:
    """The outer factor of a DQ-of-scale chain must be a constant scalar (fused, never dropped)."""
    t = q.two_level
    if t is None:
        return []
    where = {"node": match.node_label(t.node), "tensor": t.outer.name}
    outer = match.const_array(t.outer)
    if outer is None:
        return [Diagnostic.error(
            codes.GLOBAL_SCALE_NOT_CONSTANT,
            f"the outer scale of the two-level chain feeding '{match.node_label(q.node)}' is computed at run "
            "time; it cannot be fused and is never dropped, so the pattern is refused",
            **where,
        )]
    if outer.size != 1:
        return [Diagnostic.error(
            codes.GLOBAL_SCALE_NOT_SCALAR,
            f"the outer scale of the two-level chain has shape {list(outer.shape)}; only a scalar outer "
            "factor is fused, so the pattern is refused",
            **where,
        )]
    out: list[Diagnostic] = []
    if t.outer_zero_point is not None:
        zp = match.const_array(t.outer_zero_point)
        if zp is None or np.any(np.asarray(zp).astype(np.float32) != 0):
            out.append(Diagnostic.error(
                codes.ZERO_POINT_SHAPE_MISMATCH,
                "the inner DQ of the two-level chain has a non-zero zero point, which no scale format has",
                node=where["node"], tensor=t.outer_zero_point.name,
            ))
    if t.node.attributes.get_int("block_size", 0) > 0:
        out.append(Diagnostic.error(
            codes.GLOBAL_SCALE_NOT_SCALAR, "the inner DQ of the two-level chain is blocked", **where
        ))
    g = np.asarray(outer, dtype=np.float32).reshape(())
    out += _check_values(np.atleast_1d(g), q, t.outer, "global scale", False)
    return out


def check_compute_range(q: QDQ, compute_dtype: ir.DataType | None) -> list[Diagnostic]:
    """Scale values float16 cannot hold: the fused op decodes in float32, so they are kept; say so."""
    if compute_dtype != ir.DataType.FLOAT16 or q.element is None:
        return []
    values = scale_values(q)
    if values is None or not np.isfinite(values).all():
        return []
    g = abs(global_scale_value(q) or 1.0)
    magnitudes = np.abs(values.astype(np.float64)) * g
    elem_max = max(abs(q.element.max_value), abs(q.element.min_value))
    lut = np.abs(q.element.lut[np.isfinite(q.element.lut)].astype(np.float64))
    elem_min = float(lut[lut > 0].min()) if (lut > 0).any() else 1.0
    nonzero = magnitudes[magnitudes > 0]
    if nonzero.size == 0:
        return []
    top, bottom = float(nonzero.max()) * elem_max, float(nonzero.min()) * elem_min
    if top > FP16_MAX or bottom < FP16_MIN_SUBNORMAL:
        return [Diagnostic.warning(
            codes.SCALE_OUT_OF_COMPUTE_RANGE,
            f"decoded weights span {bottom:.3g}..{top:.3g}, outside float16's range "
            f"({FP16_MIN_SUBNORMAL:.3g}..{FP16_MAX:g}); the fused op decodes and accumulates in float32, "
            "so no value overflows or flushes to zero",
            **_where(q, q.scale_codes_value),
        )]
    return []


def check_constant_weight(q: QDQ) -> list[Diagnostic]:
    if match.is_constant(q.data):
        return []
    return [Diagnostic.info(
        codes.WEIGHT_DYNAMIC,
        "the quantized data is computed at run time, not a constant, so it is not fused as a weight",
        **_where(q, q.data),
    )]


def validate_weight(q: QDQ, opset: int, compute_dtype: ir.DataType | None = None) -> list[Diagnostic]:
    """All weight checks, structural ones first; later checks run only when earlier ones allow."""
    found = check_formats(q, opset)
    if any(d.is_error for d in found) and (q.element is None or q.scale_format is None):
        return found
    found += check_shapes(q)
    found += check_zero_point(q)
    found += check_two_level(q)
    if not any(d.code in (codes.GLOBAL_SCALE_NOT_CONSTANT,) for d in found):
        found += check_scale_values(q)
    found += check_compute_range(q, compute_dtype)
    return found


def errors(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diagnostics if d.is_error]
