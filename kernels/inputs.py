"""Checks and normalisation of the tensors handed to the kernels (docs/ops.md storage)."""

from __future__ import annotations

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.kernels import format_codes


def formats(weight_format: str, scale_format: str):
    """(ElementCode, ScaleCode) or OnnxfuseError(NO_KERNEL)."""
    e = format_codes.element_code(weight_format)
    s = format_codes.scale_code(scale_format)
    for fact in (e, s):
        if isinstance(fact, str):
            raise OnnxfuseError.of(codes.NO_KERNEL, fact)
    return e, s


def scale_storage(torch, scale, scale_code):
    """The stored scale as a tensor the kernels load: float32/float16 values, int16 bf16 bits,
    uint8 E8M0/E4M3 codes. Accepts the storage dtypes of docs/ops.md and torch's own
    bfloat16/float8 dtypes (reinterpreted, never converted)."""
    name = scale_code.name
    if name in ("float32", "float16"):
        want = torch.float32 if name == "float32" else torch.float16
        if scale.dtype != want:
            raise OnnxfuseError.of(codes.INPUT_INVALID, f"{name} scale must be stored as {want}, got {scale.dtype}")
        return scale
    if name == "bfloat16":
        if scale.dtype in (torch.bfloat16, torch.int16) or scale.dtype == getattr(torch, "uint16", None):
            return scale.view(torch.int16)
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"bfloat16 scale must be stored as uint16 bits, got {scale.dtype}")
    if scale.dtype == torch.uint8:
        return scale
    if scale.dtype.itemsize == 1:  # torch.float8_e8m0fnu / float8_e4m3fn / int8 raw bytes
        return scale.view(torch.uint8)
    raise OnnxfuseError.of(codes.INPUT_INVALID, f"{name} scale must be stored as uint8 codes, got {scale.dtype}")


def codes_uint8(torch, t, what: str):
    if t is None:
        return None
    if t.dtype == torch.uint8:
        return t
    if t.dtype.itemsize == 1:
        return t.view(torch.uint8)
    raise OnnxfuseError.of(codes.INPUT_INVALID, f"{what} must be uint8 codes, got {t.dtype}")


def check_rows(packed, scale, zero_point, *, K: int, block_size: int, element, what: str):
    """Shapes of a row-layout tensor [R, Kb] and its [R, G] scale / zero point."""
    if packed.dim() != 2:
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"{what} must be 2-D row layout [R, Kb], got shape {tuple(packed.shape)}")
    kb = -(-K // element.codes_per_byte)
    if packed.shape[1] != kb:
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"{what} rows hold {packed.shape[1]} bytes; K={K} {element.name} needs {kb}")
    if block_size <= 0:
        raise OnnxfuseError.of(codes.ATTRIBUTE_INVALID, f"block_size must be positive, got {block_size}")
    g = -(-K // block_size)
    want = (packed.shape[0], g)
    if tuple(scale.shape) != want:
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"{what} scale has shape {tuple(scale.shape)}; expected {want}")
    if zero_point is not None:
        if element.is_float:
            raise OnnxfuseError.of(codes.ZERO_POINT_FLOAT_FORMAT, f"zero points are not allowed with {element.name}")
        if tuple(zero_point.shape) != want:
            raise OnnxfuseError.of(codes.INPUT_INVALID, f"{what} zero_point has shape {tuple(zero_point.shape)}; expected {want}")


def same_device(*tensors):
    devs = {t.device for t in tensors if t is not None}
    if len(devs) > 1:
        raise OnnxfuseError.of(codes.INPUT_INVALID, f"inputs are on several devices: {sorted(map(str, devs))}")


def global_scale_tensor(torch, gs, device):
    """The optional float32 scalar as a 1-element device tensor (loaded in-kernel: no host sync)."""
    if gs is None:
        return None
    if not torch.is_tensor(gs):
        gs = torch.tensor(float(gs), dtype=torch.float32, device=device)
    if gs.numel() != 1:
        raise OnnxfuseError.of(codes.GLOBAL_SCALE_NOT_SCALAR, f"global_scale must be a scalar, got shape {tuple(gs.shape)}")
    return gs.reshape(1).to(device=device, dtype=torch.float32)
