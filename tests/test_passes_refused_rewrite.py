"""A rewrite refused after its weight was repacked leaves nothing behind in the model."""

import onnx_ir as ir

import onnxfuse
from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.passes import functions
from qdq_builders import count_ops, make_weight, matmul_model


def test_refused_rewrite_leaves_no_repacked_weight(monkeypatch):
    model, _ = matmul_model(make_weight("int4", (64, 24), axis=0, block_size=32, seed=5))

    def refuse(*args, **kwargs):
        raise OnnxfuseError.of(codes.ELEMENT_TYPE_UNSUPPORTED, "no function body for this combination (test)")

    monkeypatch.setattr(functions, "function_for", refuse)
    fused, report = onnxfuse.optimize(model)
    assert report.fused == []
    assert list(fused.graph.initializers) == [t.name for t in model.graph.initializer]
    assert count_ops(ir.to_proto(fused), "DequantizeLinear") == 1
