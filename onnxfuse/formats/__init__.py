"""The format layer: element and scale formats, schemes, the NumPy reference of ONNX Q/DQ, and
the row layout of the fused ops (docs/ops.md). NumPy, ml_dtypes and onnx only: no torch.
docs/formats.md describes every rule implemented here."""

from onnxfuse.formats.elements import ELEMENT_FORMATS, ElementFormat, element_format
from onnxfuse.formats.legality import dq_input_types, element_legality, scale_legality
from onnxfuse.formats.quantized import QuantizedTensor
from onnxfuse.formats.reference import (
    block_broadcast,
    blocked_scale_shape,
    dequantize_linear,
    normalize_axis,
    quantize_linear,
)
from onnxfuse.formats.rows import (
    RowPacked,
    decode_rows,
    expand_blocks,
    from_rows,
    pack_quantized,
    pack_rows,
    to_rows,
    unpack_rows,
)
from onnxfuse.formats.scales import SCALE_FORMATS, ScaleFormat, e8m0_from_exponent, scale_format
from onnxfuse.formats.schemes import SCHEMES, Scheme, scheme

__all__ = [
    "ELEMENT_FORMATS", "ElementFormat", "element_format",
    "SCALE_FORMATS", "ScaleFormat", "scale_format", "e8m0_from_exponent",
    "dq_input_types", "element_legality", "scale_legality",
    "block_broadcast", "blocked_scale_shape", "dequantize_linear", "normalize_axis", "quantize_linear",
    "RowPacked", "decode_rows", "expand_blocks", "from_rows", "pack_quantized", "pack_rows", "to_rows", "unpack_rows",
    "SCHEMES", "Scheme", "scheme", "QuantizedTensor",
]
