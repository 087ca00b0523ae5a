"""A tensor quantized by a scheme: what a Q/DQ model stores for it."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto

from onnxfuse.formats.reference import dequantize_linear
from onnxfuse.formats.rows import RowPacked, pack_quantized

if TYPE_CHECKING:
    from onnxfuse.formats.schemes import Scheme


@dataclasses.dataclass(frozen=True, eq=False)
class QuantizedTensor:
    data: np.ndarray  # element np_dtype, the shape of w
    scale: np.ndarray  # scale np_dtype, blocked shape (w's rank, dim[axis] = ceil(n / block_size))
    zero_point: np.ndarray | None  # element np_dtype, the scale's shape
    global_scale: np.ndarray | None  # float32 scalar, two-level schemes only
    axis: int  # non-negative
    block_size: int
    scheme: "Scheme"

    def dequantize(self, output_dtype: int = TensorProto.FLOAT) -> np.ndarray:
        """The values a standard DQ graph gives: for a two-level scale the chain
        DQ(data, DQ(block scale, global_scale)), the inner DQ in float32."""
        scale = self.scale
        if self.global_scale is not None:
            scale = dequantize_linear(self.scale, self.global_scale, output_dtype=TensorProto.FLOAT)
        return dequantize_linear(self.data, scale, self.zero_point, axis=self.axis,
                                 block_size=self.block_size, output_dtype=output_dtype)

    def to_rows(self) -> RowPacked:
        """docs/ops.md's row layout of this tensor (global scale kept separate)."""
        return pack_quantized(self.data, self.scale, self.zero_point, axis=self.axis,
                              block_size=self.block_size, global_scale=self.global_scale)
