"""supported(op_type, **attrs): which fused-op configurations a Triton kernel covers.

Answers with None (covered) or a sentence the runtime can put in an OFX402 no-kernel warning.
Pure Python: no torch or triton import.
"""

from __future__ import annotations

from onnxfuse.kernels import format_codes

_ROUNDING = ("even", "floor", "ceil")
_RULES = ("mx", "nvfp4", "absmax")


def supported(op_type: str, **attrs) -> str | None:
    """None when a kernel covers op_type with these attributes (names as in docs/ops.md)."""
    if op_type in ("DequantMatMul", "DequantGather", "Dequantize"):
        for key in ("weight_format", "scale_format", "block_size"):
            if key not in attrs:
                return f"{op_type}: attribute {key!r} is missing"
        e = format_codes.element_code(attrs["weight_format"])
        if isinstance(e, str):
            return e
        s = format_codes.scale_code(attrs["scale_format"])
        if isinstance(s, str):
            return s
        if int(attrs["block_size"]) <= 0:
            return f"block_size must be positive (got {attrs['block_size']})"
        return None
    if op_type == "QuantizeDequantize":
        e = format_codes.element_code(attrs.get("element_format", "?"))
        if isinstance(e, str):
            return e
        mode = attrs.get("mode", "static")
        if mode not in ("static", "dynamic"):
            return f"mode {mode!r} is not 'static' or 'dynamic'"
        rounding = attrs.get("rounding_mode", "even")
        if rounding not in _ROUNDING:
            return f"rounding_mode {rounding!r} is not one of {', '.join(_ROUNDING)}"
        if mode == "dynamic":
            rule = attrs.get("scale_rule", "")
            if rule not in _RULES:
                return f"scale_rule {rule!r} is not one of {', '.join(_RULES)}"
            if int(attrs.get("block_size", 0)) <= 0:
                return "dynamic block scales need block_size > 0"
            if rule == "absmax" and not e.signed:
                return f"the absmax rule is symmetric; {e.name} is unsigned (use a static scale and zero point)"
            if rule == "nvfp4" and e.name != "float4e2m1":
                return f"the nvfp4 rule quantizes float4e2m1 elements, not {e.name}"
        return None
    return f"no Triton kernel for op {op_type!r}"
