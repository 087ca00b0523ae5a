"""Regenerate the small committed example models in models/examples/ (the README quick start).

    python models/make_examples.py            # rewrites models/examples/*.onnx
    python models/make_examples.py --check    # exit 1 if the committed files differ from a rebuild

Both are the zoo's MLP (256-512-512-256, seed 0), quantized by `onnxfuse.quantize`:
- mlp_int4.onnx:  float32 MLP, int4 blocks of 32 along K with float32 scales: DQ(W[K,N], axis 0) -> MatMul,
                  the onnxruntime-quantizer shape; onnxruntime CPU runs it before and after optimization.
- mlp_nvfp4.onnx: float16 MLP, NVFP4 as ModelOpt writes it: DQ(e4m3, fp32 scalar) -> DQ(fp4 [N,K], axis -1,
                  block 16) -> Transpose -> Cast(fp16) -> MatMul; onnxruntime CPU cannot run it until optimized.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for `models.recipes`

import onnx_ir as ir  # noqa: E402
from onnx import TensorProto  # noqa: E402

from models.recipes.mlp import MlpConfig, build_mlp  # noqa: E402
from onnxfuse.quantize_api import quantize  # noqa: E402

EXAMPLES = {
    "mlp_int4.onnx": (MlpConfig(dtype=TensorProto.FLOAT), "int4"),
    "mlp_nvfp4.onnx": (MlpConfig(dtype=TensorProto.FLOAT16), "nvfp4"),
}
SIZE_LIMIT = 1024 * 1024  # committed examples stay under 1 MB


def write_examples(folder: str) -> list[str]:
    paths = []
    for filename, (cfg, scheme) in EXAMPLES.items():
        model = quantize(build_mlp(cfg), scheme)
        model.producer_name = "onnxfuse-zoo"
        path = os.path.join(folder, filename)
        ir.save(model, path)
        size = os.path.getsize(path)
        if size >= SIZE_LIMIT:
            raise SystemExit(f"{path} is {size} bytes: examples must stay under {SIZE_LIMIT}")
        paths.append(path)
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare a rebuild with the committed files")
    args = parser.parse_args(argv)
    target = os.path.join(HERE, "examples")
    if not args.check:
        os.makedirs(target, exist_ok=True)
        for p in write_examples(target):
            print(f"wrote {os.path.relpath(p)} ({os.path.getsize(p)} bytes)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        stale = []
        for p in write_examples(tmp):
            committed = os.path.join(target, os.path.basename(p))
            with open(p, "rb") as a:
                fresh = a.read()
            if not os.path.exists(committed) or open(committed, "rb").read() != fresh:
                stale.append(os.path.basename(p))
    if stale:
        print(f"stale examples: {', '.join(stale)}; run python models/make_examples.py", file=sys.stderr)
        return 1
    print("examples are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
