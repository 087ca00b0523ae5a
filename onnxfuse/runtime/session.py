"""onnxfuse.InferenceSession: run an optimized model like onnxruntime.InferenceSession does.

    sess = onnxfuse.InferenceSession("model.fused.onnx")            # backend="auto"
    logits, = sess.run(None, {"input_ids": ids})                     # NumPy out
    logits, = sess.run(None, {"input_ids": ids_cuda}, output_type="torch")   # torch out, no copy

backend="auto" picks "triton" when torch sees a CUDA GPU and "ort" otherwise.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from onnxfuse import codes
from onnxfuse.diagnostics import OnnxfuseError
from onnxfuse.runtime.feeds import IOInfo, check_feeds, graph_inputs, graph_outputs
from onnxfuse.runtime.model_source import load_source

BACKENDS = ("auto", "ort", "triton")
OUTPUT_TYPES = ("numpy", "torch")


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def resolve_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise OnnxfuseError.of(codes.USAGE, f"unknown backend '{backend}'; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "triton" if cuda_available() else "ort"
    return backend


class InferenceSession:
    """Runs a (fused) ONNX model.

    path_or_model: a path, onnx.ModelProto, onnx_ir.Model or onnx_graphsurgeon.Graph.
    providers: ORT providers (backend "ort"); the triton backend picks CUDA or CPU itself.
    sess_options: an onnxruntime.SessionOptions for the ORT sessions.
    cuda_graph: triton backend on a GPU: capture each input signature's run once and replay it.
    """

    def __init__(self, path_or_model, providers=None, backend: str = "auto", sess_options=None,
                 cuda_graph: bool = False, *, kernels=None):
        self.backend_name = resolve_backend(backend)
        self._source = load_source(path_or_model)
        self._inputs = graph_inputs(self._source.proto)
        self._outputs = graph_outputs(self._source.proto)
        if self.backend_name == "ort":
            from onnxfuse.runtime.ort_backend import OrtBackend

            self._backend = OrtBackend(self._source, providers=providers, sess_options=sess_options)
        else:
            from onnxfuse.runtime.triton_backend import TritonBackend

            self._backend = TritonBackend(self._source, providers=providers, sess_options=sess_options,
                                          cuda_graph=cuda_graph, kernels=kernels)

    # -- onnxruntime-compatible surface -----------------------------------------------------
    def get_inputs(self) -> list[IOInfo]:
        return list(self._inputs)

    def get_outputs(self) -> list[IOInfo]:
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        return self._backend.providers()

    @property
    def plan(self):
        """The segment plan (triton backend), None for backend "ort"."""
        return getattr(self._backend, "plan", None)

    @property
    def diagnostics(self):
        """Warnings raised while planning, e.g. fused ops without a kernel (OFX402)."""
        return list(getattr(self._backend, "diagnostics", []))

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options=None,
            *, output_type: str = "numpy") -> list:
        """Like onnxruntime: outputs in the order of output_names (None: all).

        output_type="torch" returns torch tensors (on the GPU for the triton backend on CUDA,
        without a host copy); "numpy" (default) returns NumPy arrays.
        """
        if output_type not in OUTPUT_TYPES:
            raise OnnxfuseError.of(codes.USAGE, f"output_type must be one of {', '.join(OUTPUT_TYPES)}, not '{output_type}'")
        names = self._output_names(output_names)
        check_feeds(self._inputs, input_feed, file=self._source.name)
        if self.backend_name == "ort":
            outs = self._backend.run(names, dict(input_feed), run_options)
            if output_type == "torch":
                from onnxfuse.runtime.torch_dtypes import to_torch

                return [to_torch(o) for o in outs]
            return outs
        outs = self._backend.run_torch(names, dict(input_feed))
        if output_type == "torch":
            return outs
        from onnxfuse.runtime.torch_dtypes import to_numpy

        return [to_numpy(o) for o in outs]

    def run_torch(self, output_names, input_feed, run_options=None) -> list:
        """run(..., output_type="torch")."""
        return self.run(output_names, input_feed, run_options, output_type="torch")

    def _output_names(self, output_names) -> list[str]:
        known = [o.name for o in self._outputs]
        if output_names is None:
            return known
        if isinstance(output_names, str):
            raise OnnxfuseError.of(codes.USAGE, "output_names must be a list of names or None, not a string")
        for n in output_names:
            if n not in known:
                raise OnnxfuseError.of(codes.INPUT_INVALID, f"Invalid output name: {n}", tensor=n,
                                       file=self._source.name, hint=f"the model's outputs are {', '.join(known)}")
        return list(output_names)
