"""Every diagnostic code onnxfuse can emit, in one place.

Codes are stable: a code once published keeps its meaning. docs/diagnostics.md documents each
one (tests/test_codes.py checks that the two agree). Ranges:

  OFX0xx  usage and environment        OFX3xx  pattern structure
  OFX1xx  reading and writing models   OFX4xx  runtime and verification
  OFX2xx  scales and formats           OFX5xx  quantizer
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Code:
    id: str  # "OFX201"
    name: str  # "scale-dtype-illegal": readable and greppable
    summary: str  # one line, for docs/diagnostics.md and --explain


# --- OFX0xx: usage and environment -------------------------------------------------
USAGE = Code("OFX001", "usage", "The command line or API call is invalid.")
MISSING_DEPENDENCY = Code("OFX002", "missing-dependency", "An optional package this feature needs is not installed.")
INTERNAL = Code("OFX099", "internal-error", "An unexpected internal failure; please report it with --debug output.")

# --- OFX1xx: reading and writing models --------------------------------------------
FILE_NOT_FOUND = Code("OFX101", "file-not-found", "The input path does not exist or is not a file.")
FILE_UNREADABLE = Code("OFX102", "file-unreadable", "The input file cannot be read (permissions, a directory, I/O error).")
NOT_ONNX = Code("OFX103", "not-onnx", "The file is empty, truncated or not an ONNX ModelProto.")
MODEL_INVALID = Code("OFX104", "model-invalid", "The model is structurally invalid (onnx.checker or IR conversion failed).")
EXTERNAL_DATA_ESCAPES = Code("OFX105", "external-data-escapes", "An external-data location points outside the model's folder.")
EXTERNAL_DATA_MISSING = Code("OFX106", "external-data-missing", "An external-data file is missing or shorter than the tensor it holds.")
TENSOR_SIZE_MISMATCH = Code("OFX107", "tensor-size-mismatch", "A tensor's declared shape and type do not match the bytes it holds.")
OUTPUT_PATH_INVALID = Code("OFX108", "output-path-invalid", "The output path cannot be written (missing folder, equal to the input, a directory).")
WRITE_FAILED = Code("OFX109", "write-failed", "Writing the output failed; nothing was left at the output path.")
OPSET_INVALID = Code("OFX110", "opset-invalid", "The model's opset imports are missing or inconsistent with its ops.")

# --- OFX2xx: scales and formats ------------------------------------------------------
SCALE_DTYPE_ILLEGAL = Code("OFX201", "scale-dtype-illegal", "The scale's data type is not legal for this element type and opset.")
SCALE_SHAPE_MISMATCH = Code("OFX202", "scale-shape-mismatch", "The scale's shape does not match the data shape, axis and block_size.")
SCALE_NAN_INF = Code("OFX203", "scale-nan-inf", "A scale value is NaN or infinite (including the E8M0 NaN code 0xFF).")
SCALE_ZERO = Code("OFX204", "scale-zero", "A scale value is zero: the whole block dequantizes to zero.")
ZERO_POINT_FLOAT_FORMAT = Code("OFX205", "zero-point-float-format", "A non-zero zero point was given for a floating-point element format.")
ZERO_POINT_SHAPE_MISMATCH = Code("OFX206", "zero-point-shape-mismatch", "The zero point's shape or type does not match the scale and data.")
GLOBAL_SCALE_NOT_SCALAR = Code("OFX207", "global-scale-not-scalar", "The outer scale of a two-level chain is not a scalar.")
GLOBAL_SCALE_NOT_CONSTANT = Code("OFX208", "global-scale-not-constant", "The outer scale of a two-level chain is not a constant.")
SCALE_OUT_OF_COMPUTE_RANGE = Code("OFX209", "scale-out-of-compute-range", "Scale values overflow or underflow the compute dtype; computing in float32 instead.")
ELEMENT_TYPE_UNSUPPORTED = Code("OFX210", "element-type-unsupported", "The data type is not a quantized element format onnxfuse knows.")
ATTRIBUTE_INVALID = Code("OFX211", "attribute-invalid", "A Q/DQ attribute is invalid (axis out of range, block_size <= 0, bad output_dtype).")
OPSET_TOO_OLD = Code("OFX212", "opset-too-old", "The model's opset is older than the one this type or attribute needs.")

# --- OFX3xx: pattern structure ------------------------------------------------------
NOT_FUSED = Code("OFX301", "not-fused", "A Q/DQ node was left as it was; the message says why.")
FUSED = Code("OFX302", "fused", "A pattern was fused into an onnxfuse op.")
WEIGHT_DYNAMIC = Code("OFX303", "weight-dynamic", "The quantized weight is computed at run time, not a constant: not fused as a weight.")
WEIGHT_SHARED = Code("OFX304", "weight-shared", "A quantized weight feeds several consumers.")
UNKNOWN_CUSTOM_OP = Code("OFX305", "unknown-custom-op", "An exporter's custom op was recognised by name but its attributes are not understood.")

# --- OFX4xx: runtime and verification ----------------------------------------------
BACKEND_UNAVAILABLE = Code("OFX401", "backend-unavailable", "The requested backend cannot run here.")
NO_KERNEL = Code("OFX402", "no-kernel", "No Triton kernel covers this op and format; its function body runs instead.")
INPUT_INVALID = Code("OFX403", "input-invalid", "A feed has a wrong name, dtype or shape.")
VERIFY_MISMATCH = Code("OFX404", "verify-mismatch", "An output differs from the reference beyond the tolerance.")

# --- OFX5xx: quantizer ------------------------------------------------------------------
SCHEME_UNKNOWN = Code("OFX501", "scheme-unknown", "The quantization scheme is not one onnxfuse knows.")
NOTHING_TO_QUANTIZE = Code("OFX502", "nothing-to-quantize", "No weight matched the quantizer's op types and exclusions.")


def all_codes() -> list[Code]:
    return [v for v in globals().values() if isinstance(v, Code)]
