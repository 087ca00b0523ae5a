"""A parsed DequantizeLinear: one description for ONNX DQ, ModelOpt's trt:: DQ and two-level chains.

`parse_dq` reads a node's structure (inputs, attributes, formats) without judging values;
passes/validate.py judges. A structure that cannot be read yields a reason instead of a QDQ.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx_ir as ir

from onnxfuse import codes
from onnxfuse.diagnostics import Diagnostic, OnnxfuseError
from onnxfuse.passes import match

TRT_DOMAIN = "trt"
# ModelOpt's MXFP8 DQ: E8M0 scales stored as uint8 codes, otherwise a blocked DequantizeLinear.
TRT_MXFP8_DQ = "TRT_MXFP8DequantizeLinear"
_FLOAT_OUTPUTS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
_KNOWN_TYPES = {int(t) for t in ir.DataType}


def is_dq(node: ir.Node) -> bool:
    return match.is_op(node, "DequantizeLinear") or match.is_op(node, TRT_MXFP8_DQ, TRT_DOMAIN)


@dataclasses.dataclass
class TwoLevel:
    """scale = DQ(inner codes, outer scalar): the inner node and its parts."""

    node: ir.Node
    codes: ir.Value  # the inner DQ's data: the block scale codes (e.g. E4M3)
    outer: ir.Value  # the inner DQ's scale: the global (tensor) scale
    outer_zero_point: ir.Value | None


@dataclasses.dataclass
class QDQ:
    """A DequantizeLinear in normalized form (axis non-negative, block_size 0 when not blocked)."""

    node: ir.Node
    data: ir.Value
    scale: ir.Value
    zero_point: ir.Value | None
    axis: int
    block_size: int
    rank: int
    data_shape: tuple[int, ...] | None
    element: object | None  # onnxfuse.formats.ElementFormat
    scale_format: object | None  # onnxfuse.formats.ScaleFormat (the inner one for two-level)
    output_dtype: ir.DataType | None
    two_level: TwoLevel | None = None
    scale_is_e8m0_uint8: bool = False  # trt::TRT_MXFP8DequantizeLinear

    @property
    def granularity(self) -> str:
        if self.block_size > 0:
            return "block"
        scale_rank = match.rank_of(self.scale if self.two_level is None else self.two_level.codes)
        return "tensor" if not scale_rank else "axis"

    @property
    def format_label(self) -> str:
        """e.g. 'float4e2m1/float8e4m3fn*float32' (two-level) or 'int4/float16'."""
        element = getattr(self.element, "name", "?")
        scale = getattr(self.scale_format, "name", "?")
        if self.two_level is not None:
            scale += "*global"
        return f"{element}/{scale}"

    @property
    def scale_codes_value(self) -> ir.Value:
        """The tensor holding the block scale's values (the inner codes for two-level)."""
        return self.two_level.codes if self.two_level is not None else self.scale


def element_of(dtype: ir.DataType | None):
    from onnxfuse import formats

    if dtype is None:
        return None
    try:
        return formats.element_format(int(dtype))
    except OnnxfuseError:
        return None


def scale_of(dtype: ir.DataType | None, *, e8m0_codes: bool = False):
    from onnxfuse import formats

    if e8m0_codes:
        return formats.scale_format("float8e8m0")
    if dtype is None:
        return None
    try:
        return formats.scale_format(int(dtype))
    except OnnxfuseError:
        return None


def _dq_output_dtype(node: ir.Node, scale_dtype: ir.DataType | None) -> ir.DataType | None:
    out = node.outputs[0]
    if out.dtype is not None:
        return out.dtype
    requested = node.attributes.get_int("output_dtype", 0)
    if requested:
        return ir.DataType(requested)
    return scale_dtype


def _two_level_of(scale: ir.Value) -> TwoLevel | None:
    inner = scale.producer()
    if inner is None or not match.is_op(inner, "DequantizeLinear"):
        return None
    ins = list(inner.inputs) + [None] * 3
    if ins[0] is None or ins[1] is None:
        return None
    return TwoLevel(node=inner, codes=ins[0], outer=ins[1], outer_zero_point=ins[2])


def parse_dq(node: ir.Node) -> QDQ | Diagnostic:
    """Read a DQ node's structure; a Diagnostic (not raised) when it cannot be read."""
    ins = list(node.inputs) + [None] * 3
    data, scale, zero_point = ins[0], ins[1], ins[2]
    label = match.node_label(node)
    if data is None or scale is None:
        return Diagnostic.error(codes.ATTRIBUTE_INVALID, "the DequantizeLinear has no data or scale input", node=label)
    rank = match.rank_of(data)
    data_shape = match.const_shape(data)
    is_trt = match.is_op(node, TRT_MXFP8_DQ, TRT_DOMAIN)
    axis = node.attributes.get_int("axis", 1 if not is_trt else -1)
    block_size = node.attributes.get_int("block_size", 0)
    if block_size < 0:
        return Diagnostic.error(codes.ATTRIBUTE_INVALID, f"block_size is {block_size}; it must be >= 0", node=label)
    if rank is not None and rank > 0:
        if not -rank <= axis < rank:
            if block_size > 0 or (match.rank_of(scale) or 0) > 0:
                return Diagnostic.error(
                    codes.ATTRIBUTE_INVALID, f"axis {axis} is out of range for data of rank {rank}", node=label
                )
        axis = axis % rank
    two_level = _two_level_of(scale) if not is_trt else None
    scale_rank = match.rank_of(scale if two_level is None else two_level.codes)
    if block_size == 0 and (scale_rank or 0) > 1:
        return Diagnostic.error(
            codes.SCALE_SHAPE_MISMATCH,
            f"the scale has rank {scale_rank}, which only blocked quantization allows, but block_size is 0",
            node=label, tensor=scale.name,
            hint="set block_size to the number of elements each scale covers along axis",
        )
    requested = node.attributes.get_int("output_dtype", 0)
    if requested and requested not in _FLOAT_OUTPUTS:
        return Diagnostic.error(
            codes.ATTRIBUTE_INVALID,
            f"output_dtype is {ir.DataType(requested).name if requested in _KNOWN_TYPES else requested}; "
            "a DequantizeLinear produces float, float16 or bfloat16",
            node=label,
        )
    if data_shape is not None and 0 in data_shape:
        return Diagnostic.info(
            codes.NOT_FUSED, f"the data has a zero-sized dimension {list(data_shape)}: nothing to fuse", node=label,
            tensor=data.name,
        )
    data_dtype = match.elem_type(data)
    element = element_of(data_dtype)
    if two_level is not None:
        scale_fmt = scale_of(match.elem_type(two_level.codes))
    else:
        scale_fmt = scale_of(match.elem_type(scale), e8m0_codes=is_trt)
    return QDQ(
        node=node,
        data=data,
        scale=scale,
        zero_point=zero_point,
        axis=axis,
        block_size=block_size,
        rank=rank if rank is not None else -1,
        data_shape=data_shape,
        element=element,
        scale_format=scale_fmt,
        output_dtype=_dq_output_dtype(node, match.elem_type(scale)),
        two_level=two_level,
        scale_is_e8m0_uint8=is_trt,
    )


def expected_scale_shape(data_shape: tuple[int, ...], axis: int, block_size: int) -> tuple[int, ...]:
    return tuple(math.ceil(d / block_size) if i == axis else d for i, d in enumerate(data_shape))


def scale_values(q: QDQ) -> np.ndarray | None:
    """The block scale as float32 values (the inner scale codes decoded for two-level), or None."""
    array = match.const_array(q.scale_codes_value)
    if array is None or q.scale_format is None:
        return None
    if q.scale_is_e8m0_uint8:
        array = array.astype(np.uint8)
    return np.asarray(q.scale_format.decode(array), dtype=np.float32)
