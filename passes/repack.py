"""Repack a quantized constant once into docs/ops.md's row layout.

The packed data is an onnx-ir LazyTensor: the codes are read (memory-mapped), moved and packed
only when the tensor is serialized or executed, one weight at a time, so optimizing a model
whose weights exceed memory never holds them all. Scales and zero points are small and packed
eagerly. Tensors are cached per (source tensors, data movement), so a weight with several
users (tied embeddings, shared weights) is stored once.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from onnxfuse.passes import match
from onnxfuse.passes.context import RunContext
from onnxfuse.passes.qdq import QDQ
from onnxfuse.passes.validate import global_scale_value
from onnxfuse.passes.weight_view import WeightView


@dataclasses.dataclass(frozen=True)
class PackedWeight:
    data: ir.Value  # uint8 [R, Kb]
    scale: ir.Value  # storage dtype [R, G]
    zero_point: ir.Value | None  # uint8 [R, G]
    global_scale: float | None
    rows: int
    K: int
    block_size: int
    weight_format: str
    scale_format: str


def _element_codes(q: QDQ, value: ir.Value) -> np.ndarray:
    return np.asarray(q.element.codes_of(match.const_array(value)), dtype=np.uint8)


def _weight_codes_once(q: QDQ, value: ir.Value) -> np.ndarray:
    """The weight's codes, then the source's memory map and unpacked cache released.

    onnx-ir's ExternalTensor caches its unpacked array after numpy(); without the release every
    repacked weight would stay resident and memory would grow with the model.
    """
    tensor = match.const_tensor(value)
    codes = np.array(q.element.codes_of(tensor.numpy()), dtype=np.uint8, copy=True)
    release = getattr(tensor, "release", None)
    if release is not None:
        try:
            release()
        except BufferError:  # someone else still holds a view of the mapping: leave it open
            pass
    return codes


def _has_zero_point(q: QDQ) -> bool:
    if q.zero_point is None:
        return False
    if q.element.is_float:
        return False  # validated all-zero: a float element has no zero point
    return True


def _stored_scale(q: QDQ) -> np.ndarray:
    array = match.const_array(q.scale_codes_value)
    if q.scale_is_e8m0_uint8:
        return np.asarray(array, dtype=np.uint8)  # already E8M0 codes
    return q.scale_format.to_storage(array)


def pack(ctx: RunContext, q: QDQ, view: WeightView) -> PackedWeight:
    key = (
        q.data.name, q.scale_codes_value.name, q.zero_point.name if q.zero_point is not None else None,
        q.two_level.outer.name if q.two_level is not None else None, view.signature, view.block_size,
    )
    if key in ctx.packed:
        return ctx.packed[key]
    from onnxfuse import formats

    element = q.element
    K = view.shape[view.axis]
    R = int(np.prod(view.shape)) // K if K else 0
    kb = int(formats.pack_rows(np.zeros((1, K), np.uint8), element).shape[1])
    data_source = q.data

    def packed_data() -> ir.Tensor:
        codes_rows = view.rows(_weight_codes_once(q, data_source), is_scale=False)
        return ir.tensor(formats.pack_rows(codes_rows, element), dtype=ir.DataType.UINT8)

    lazy = ir.LazyTensor(packed_data, dtype=ir.DataType.UINT8, shape=ir.Shape([R, kb]))
    data = ctx.initializer(f"{q.data.name}.rows", lazy)
    scale = ctx.initializer(f"{q.scale_codes_value.name}.rows", ir.tensor(view.rows(_stored_scale(q), is_scale=True)))
    zero_point = None
    if _has_zero_point(q):
        zp_rows = view.rows(_element_codes(q, q.zero_point), is_scale=True)
        zero_point = ctx.initializer(f"{q.zero_point.name}.rows", ir.tensor(zp_rows, dtype=ir.DataType.UINT8))
    packed = PackedWeight(
        data=data, scale=scale, zero_point=zero_point, global_scale=global_scale_value(q),
        rows=R, K=K, block_size=view.block_size, weight_format=element.name, scale_format=q.scale_format.name,
    )
    ctx.packed[key] = packed
    return packed


def global_scale_input(ctx: RunContext, base: str, value: float | None) -> ir.Value | None:
    """A float32 scalar initializer for the fused op's global_scale input (None when 1 and absent)."""
    if value is None:
        return None
    key = ("global", np.float32(value).tobytes())
    if key not in ctx.packed:
        ctx.packed[key] = ctx.initializer(f"{base}.global_scale", ir.tensor(np.array(value, dtype=np.float32)))
    return ctx.packed[key]
