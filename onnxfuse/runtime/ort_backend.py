"""backend="ort": stock onnxruntime on the optimized model, the fused ops running as their
model-local function bodies (standard ops only), on whatever providers ORT offers."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx

from onnxfuse import codes, model_io
from onnxfuse.diagnostics import OnnxfuseError


def import_ort():
    try:
        import onnxruntime
    except ImportError as e:
        raise OnnxfuseError.of(
            codes.MISSING_DEPENDENCY, "onnxruntime is not installed",
            hint="pip install onnxruntime (CPU) or onnxruntime-gpu (CUDA), not both",
        ) from e
    return onnxruntime


def default_providers(ort) -> list[str]:
    available = ort.get_available_providers()
    preferred = [p for p in ("CUDAExecutionProvider",) if p in available]
    return preferred + ["CPUExecutionProvider"]


def create_ort_session(model: onnx.ModelProto, *, path: str | None, providers=None, sess_options=None, name: str):
    """An onnxruntime.InferenceSession, ORT's own failures turned into one OnnxfuseError."""
    ort = import_ort()
    providers = providers or default_providers(ort)
    try:
        if path is not None:
            return ort.InferenceSession(path, sess_options=sess_options, providers=providers)
        if model.ByteSize() < model_io.EXTERNAL_DATA_THRESHOLD:  # protobuf's 2 GiB limit; above: a file
            return ort.InferenceSession(model.SerializeToString(), sess_options=sess_options, providers=providers)
        with tempfile.TemporaryDirectory(prefix="onnxfuse-ort-") as tmp:
            file = os.path.join(tmp, "model.onnx")
            copy = onnx.ModelProto()  # onnx.save with external data rewrites the proto it is given
            copy.CopyFrom(model)
            onnx.save(copy, file, save_as_external_data=True, location="model.onnx.data")
            return ort.InferenceSession(file, sess_options=sess_options, providers=providers)
    except OnnxfuseError:
        raise
    except Exception as e:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
        raise OnnxfuseError.of(
            codes.BACKEND_UNAVAILABLE,
            f"onnxruntime {ort.__version__} cannot create a session for the model: {_first_line(e)}",
            file=name,
            hint="if the model holds formats ORT lacks (bf16/e8m0 scales, fp4), optimize it with "
            "`onnxfuse optimize` first: the fused ops' function bodies run in stock ORT",
        ) from e


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class OrtBackend:
    name = "ort"

    def __init__(self, source, *, providers=None, sess_options=None):
        self.source = source
        self.session = create_ort_session(
            source.proto, path=source.path, providers=providers, sess_options=sess_options, name=source.name
        )

    def providers(self) -> list[str]:
        return self.session.get_providers()

    def run(self, output_names: list[str], feeds: dict, run_options=None) -> list:
        """feeds: NumPy arrays or torch tensors (copied to the host for ORT). Returns NumPy."""
        host = {k: _host_array(v) for k, v in feeds.items()}
        try:
            return self.session.run(output_names, host, run_options)
        except Exception as e:
            raise OnnxfuseError.of(
                codes.BACKEND_UNAVAILABLE, f"onnxruntime failed while running the model: {_first_line(e)}",
                file=self.source.name,
            ) from e


def _host_array(x) -> np.ndarray:
    if type(x).__module__.startswith("torch"):
        from onnxfuse.runtime.torch_dtypes import to_numpy

        return to_numpy(x)
    return np.asarray(x)
