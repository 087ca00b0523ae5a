"""Which scale and element types a standard DequantizeLinear accepts, per opset.

Read from onnx's own DequantizeLinear schemas (onnx.defs), so the answer follows the
installed onnx; formats carry `min_opset` for messages and tests check the two agree.
"""

from __future__ import annotations

import functools

import onnx
from onnx import TensorProto

from onnxfuse.formats.elements import ElementFormat
from onnxfuse.formats.scales import ScaleFormat

FIRST_DQ_OPSET = 10
FIRST_BLOCKED_OPSET = 21


def dq_input_types(opset: int, input_index: int) -> frozenset[int]:
    """TensorProto types DequantizeLinear accepts at `input_index` (0 x, 1 x_scale) at `opset`."""
    return _dq_input_types(max(int(opset), FIRST_DQ_OPSET), input_index) if opset >= FIRST_DQ_OPSET else frozenset()


@functools.lru_cache(maxsize=None)
def _dq_input_types(opset: int, input_index: int) -> frozenset[int]:
    schema = onnx.defs.get_schema("DequantizeLinear", opset)
    type_str = schema.inputs[input_index].type_str
    allowed = next((c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == type_str), [type_str])
    return frozenset(_tensor_type(t) for t in allowed)


def _tensor_type(type_str: str) -> int:
    inner = type_str[len("tensor("):-1]
    return {"float": TensorProto.FLOAT, "double": TensorProto.DOUBLE}.get(inner) or getattr(TensorProto, inner.upper())


def element_legality(element: ElementFormat, opset: int) -> str | None:
    """None when DequantizeLinear accepts `element` data at `opset`, else why not."""
    if opset < FIRST_DQ_OPSET:
        return f"DequantizeLinear needs opset >= {FIRST_DQ_OPSET} (model has {opset})"
    if element.onnx_type not in dq_input_types(opset, 0):
        return f"{element.name} data needs opset >= {element.min_opset} (model has {opset})"
    return None


def scale_legality(element: ElementFormat, scale: ScaleFormat, opset: int, *, inner_of_two_level: bool = False) -> str | None:
    """None when `scale` is a legal DequantizeLinear scale for `element` data at `opset`.

    With inner_of_two_level the scale is the inner block scale of a two-level chain
    (NVFP4: DQ(e4m3 block scale, fp32 scalar) feeding the scale of DQ(fp4 data)): that
    block scale is then the *data* of the inner DQ, so it is legal where DQ accepts it as
    data (and the inner DQ's float output is a legal scale of the outer one).
    """
    why = element_legality(element, opset)
    if why:
        return why
    if inner_of_two_level:
        if scale.onnx_type not in dq_input_types(opset, 0):
            first = _first_opset(scale.onnx_type, 0, opset)
            if first is not None:
                return f"{scale.name} block scales (inner DequantizeLinear data) need opset >= {first} (model has {opset})"
            return (f"{scale.name} cannot be the data of the inner DequantizeLinear of a two-level scale: "
                    f"DequantizeLinear does not accept it as data at any opset")
        return None
    allowed = dq_input_types(opset, 1)
    if scale.onnx_type in allowed:
        return None
    if scale.name == "float8e4m3fn":
        return ("float8e4m3fn is not a legal DequantizeLinear scale type; NVFP4 stores it as a two-level chain: "
                "DequantizeLinear(e4m3 block scale, float32 scalar) feeding the scale input of the data's DequantizeLinear")
    first = _first_opset(scale.onnx_type, 1, opset)
    if first is not None:
        return f"{scale.name} scales need opset >= {first} (model has {opset})"
    names = ", ".join(sorted(TensorProto.DataType.Name(t).lower() for t in allowed))
    return f"{scale.name} is not a legal DequantizeLinear scale type at opset {opset} (legal: {names})"


def _first_opset(onnx_type: int, input_index: int, after: int) -> int | None:
    """The first opset above `after` whose DequantizeLinear accepts the type at that input."""
    return next((v for v in range(after + 1, onnx.defs.onnx_opset_version() + 1)
                 if onnx_type in dq_input_types(v, input_index)), None)
