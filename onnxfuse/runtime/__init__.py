"""Running fused models: InferenceSession (backends "ort" and "triton"), verify and bench helpers.

Nothing here imports torch or triton at import time; the triton backend imports them when a
session is created with it.
"""


def __getattr__(name):
    if name == "InferenceSession":
        from onnxfuse.runtime.session import InferenceSession

        return InferenceSession
    raise AttributeError(f"module 'onnxfuse.runtime' has no attribute {name!r}")
