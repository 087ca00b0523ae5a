"""The model zoo: every recipe by name, built on demand into a cache folder.

    python models/zoo.py --list
    python models/zoo.py --build llama_toy_nvfp4 [--cache-dir DIR]

`build(name, cache_dir=None) -> path` writes `<cache>/<recipe hash>/<name>.onnx` once and then
returns the cached file; the hash covers the recipe sources and onnxfuse's quantizer, so editing
a recipe never serves a stale model. The cache is ONNXFUSE_CACHE_DIR, else ~/.cache/onnxfuse/zoo.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # `python models/zoo.py` puts models/ first; recipes import as models.recipes
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx_ir as ir  # noqa: E402
from onnx import TensorProto  # noqa: E402

from models.recipes import exports  # noqa: E402
from models.recipes.bert import BertConfig, build_bert  # noqa: E402
from models.recipes.llama import LLAMA_4096, LlamaConfig, build_llama  # noqa: E402
from models.recipes.mlp import MlpConfig, build_mlp  # noqa: E402


@dataclasses.dataclass(frozen=True)
class ZooModel:
    name: str
    family: str  # mlp, llama, bert: decides the feeds
    scheme: str  # "float" for the float bases
    pattern: str  # the exporter shape it reproduces (models/README.md)
    make: Callable[["Builder"], object]  # -> onnx.ModelProto or onnx_ir.Model
    base: str | None = None  # the float model it was quantized from (cosine similarity)
    ci: bool = True  # small enough for the CI regression tests
    large: bool = False  # saved with external data
    activations: str = ""  # element format of activation quantization ("" for weight-only)


# -- feeds ----------------------------------------------------------------------------------
FEED_SEED = 1234


def feeds(entry: ZooModel, batch: int = 1, seq: int = 8) -> dict[str, np.ndarray]:
    """Deterministic inputs for a zoo model: the same for a quantized model and its float base."""
    rng = np.random.default_rng(FEED_SEED)
    fp16 = "fp16" in (entry.base or entry.name) or entry.name.startswith("modelopt")
    if entry.family == "mlp":
        x = rng.standard_normal((batch * 2, MlpConfig.d_in), dtype=np.float32)
        return {"x": x.astype(np.float16) if fp16 else x}
    if entry.family == "llama":
        vocab = LLAMA_4096.vocab if "4096" in entry.name else LlamaConfig.vocab
        ids = rng.integers(0, vocab, (batch, seq), dtype=np.int64)
        return {"input_ids": ids, "position_ids": np.tile(np.arange(seq, dtype=np.int64), (batch, 1))}
    if entry.family == "bert":
        return {"input_ids": rng.integers(0, BertConfig.vocab, (batch, seq), dtype=np.int64)}
    raise ValueError(entry.family)


# -- recipes --------------------------------------------------------------------------------
def _q(base: str, scheme: str, **kw) -> Callable[["Builder"], ir.Model]:
    def make(b: "Builder") -> ir.Model:
        from onnxfuse.quantize_api import quantize

        return quantize(b.path(base), scheme, **kw)

    return make


def _calibrated(base: str, scheme: str, add: Callable, quantize_kw: dict, blocks: bool = False) -> Callable[["Builder"], ir.Model]:
    """Quantize the weights, then add activation quantizers calibrated on the base model's feeds
    (per-tensor amax, or the activations themselves for block scales)."""

    def make(b: "Builder") -> ir.Model:
        from onnxfuse.quantize_api import quantize

        model = quantize(b.path(base), scheme, **quantize_kw)
        tensors = sorted({mm.inputs[0].name for mm in exports._quantized_matmuls(model.graph)})
        calib = exports.activation_values if blocks else exports.activation_amax
        return add(model, calib(onnx.load(b.path(base)), feeds(ENTRIES[base]), tensors))

    return make


def _modelopt_mxfp8(b: "Builder") -> ir.Model:
    from onnxfuse.quantize_api import quantize

    model = quantize(b.path("llama_toy_fp16"), "mxfp8", layout="nk", op_types=("MatMul",), exclude=("lm_head*",))
    return exports.to_trt_mxfp8(model)


def _ort_qdq(b: "Builder") -> onnx.ModelProto:
    return exports.ort_matmul_nbits_qdq(onnx.load(b.path("llama_toy")), block_size=32, symmetric=False)


def _quark(scheme: str) -> Callable[["Builder"], ir.Model]:
    return lambda b: exports.quark_mx_fake_quant(onnx.load(b.path("bert")), scheme)


FP16 = TensorProto.FLOAT16
# The rotary cos/sin tables are Gather tables as well; exporters keep them in float.
NO_ROPE = ("model.rotary.*",)
_ALL = (
    # float bases
    ZooModel("mlp", "mlp", "float", "float MLP 256-512-512-256", lambda b: build_mlp()),
    ZooModel("mlp_fp16", "mlp", "float", "float16 MLP", lambda b: build_mlp(MlpConfig(dtype=FP16))),
    ZooModel("mlp_batch2", "mlp", "float", "float MLP with a fixed batch of 2", lambda b: build_mlp(MlpConfig(batch=2))),
    ZooModel("llama_toy", "llama", "float", "Llama decoder, hidden 128, 2 layers, tied head", lambda b: build_llama()),
    ZooModel("llama_toy_fp16", "llama", "float", "float16 Llama decoder", lambda b: build_llama(LlamaConfig(dtype=FP16))),
    ZooModel("bert", "bert", "float", "BERT encoder, hidden 128, 2 layers, Gemm pooler", lambda b: build_bert()),
    # onnxfuse quantize, every scheme on the MLP
    ZooModel("mlp_int4", "mlp", "int4", "DQ(int4 [K,N], axis 0, block 32) -> MatMul", _q("mlp", "int4"), "mlp"),
    ZooModel("mlp_uint4", "mlp", "uint4", "DQ(uint4 + zero point, axis 0, block 32) -> MatMul", _q("mlp", "uint4"), "mlp"),
    ZooModel("mlp_int4_nk", "mlp", "int4", "DQ(int4 [N,K], axis 1) -> Transpose -> MatMul", _q("mlp", "int4", layout="nk"), "mlp"),
    ZooModel("mlp_int4_bf16", "mlp", "int4", "DQ(int4, bfloat16 scale, output_dtype float) -> MatMul", _q("mlp", "int4", scale_dtype="bfloat16"), "mlp"),
    ZooModel("mlp_int8", "mlp", "int8", "DQ(int8, axis 0, block 128) -> MatMul", _q("mlp", "int8"), "mlp"),
    ZooModel("mlp_int2", "mlp", "int2", "DQ(int2, axis 0, block 32) -> MatMul (opset 25)", _q("mlp", "int2"), "mlp"),
    ZooModel("mlp_fp8", "mlp", "fp8", "DQ(float8e4m3fn, axis 0, block 128) -> MatMul", _q("mlp", "fp8"), "mlp"),
    ZooModel("mlp_mxfp8", "mlp", "mxfp8", "DQ(e4m3, float8e8m0 scale, block 32) -> MatMul (opset 24)", _q("mlp", "mxfp8"), "mlp"),
    ZooModel("mlp_mxfp6", "mlp", "mxfp6e2m3", "DQ(float6e2m3, float8e8m0 scale) -> MatMul (opset 28)", _q("mlp", "mxfp6"), "mlp"),
    ZooModel("mlp_mxfp4", "mlp", "mxfp4", "DQ(float4e2m1, float8e8m0 scale, block 32) -> MatMul", _q("mlp", "mxfp4"), "mlp"),
    ZooModel("mlp_nvfp4", "mlp", "nvfp4", "DQ(e4m3, fp32) -> DQ(fp4 [N,K], axis -1, block 16) -> Transpose -> Cast -> MatMul",
             _q("mlp_fp16", "nvfp4"), "mlp_fp16"),
    # larger graphs
    ZooModel("llama_toy_int4", "llama", "int4", "int4 weights; tied table: DQ -> Gather and DQ -> Transpose -> MatMul",
             _q("llama_toy", "int4", exclude=NO_ROPE), "llama_toy"),
    ZooModel("llama_toy_mxfp4", "llama", "mxfp4", "mxfp4 weights and tied table", _q("llama_toy", "mxfp4", exclude=NO_ROPE), "llama_toy"),
    ZooModel("bert_int8", "bert", "int8", "int8; Gemm(transB=1) pooler/classifier: DQ(W[N,K], axis 1) -> Gemm",
             _q("bert", "int8", block_size=32), "bert"),
    # exporter look-alikes
    ZooModel("modelopt_nvfp4", "llama", "nvfp4",
             "ModelOpt NVFP4: two-level DQ -> Transpose -> Cast(fp16) -> MatMul; trt::TRT_FP4DynamicQuantize activations",
             _calibrated("llama_toy_fp16", "nvfp4", exports.add_trt_fp4_activations,
                         dict(layout="nk", op_types=("MatMul",), exclude=("lm_head*",))), "llama_toy_fp16",
             activations="float4e2m1"),
    ZooModel("modelopt_mxfp8", "llama", "mxfp8",
             "ModelOpt MXFP8: trt::TRT_MXFP8DequantizeLinear (uint8 E8M0) -> Transpose -> MatMul; trt::TRT_MXFP8DynamicQuantize",
             _modelopt_mxfp8, "llama_toy_fp16", activations="float8e4m3fn"),
    ZooModel("modelopt_int4", "llama", "int4", "ModelOpt INT4: DQ(int4 [K,N], axis 0, block 128, fp16 scale) -> MatMul",
             _q("llama_toy_fp16", "int4", block_size=128, op_types=("MatMul",), exclude=("lm_head*",)), "llama_toy_fp16"),
    ZooModel("ort_int4_qdq", "llama", "uint4", "onnxruntime matmul_nbits_quantizer QDQ: DQ(uint4 + zp, axis 0, block 32) -> MatMul",
             _ort_qdq, "llama_toy"),
    ZooModel("quark_mxfp4", "bert", "mxfp4", "Quark: com.amd.quark::MXQuantizeDequantize on weights and activations",
             _quark("mxfp4"), "bert", activations="float4e2m1"),
    ZooModel("quark_mxfp8", "bert", "mxfp8", "Quark: com.amd.quark::MXQuantizeDequantize (fp8_e4m3)", _quark("mxfp8"), "bert", activations="float8e4m3fn"),
    ZooModel("static_qdq_int8", "mlp", "int8", "static activation Q -> DQ (int8, per tensor) before DQ(int8 W) -> MatMul",
             _calibrated("mlp", "int8", exports.add_static_int8_activations, dict(block_size=32)), "mlp", activations="int8"),
    ZooModel("static_qdq_fp8_blocks", "mlp", "fp8",
             "static activation Q -> DQ (float8e4m3fn, block 32 along K, calibrated) before DQ(fp8 W) -> MatMul",
             _calibrated("mlp_batch2", "fp8", exports.add_static_fp8_block_activations, dict(block_size=32), blocks=True),
             "mlp_batch2", activations="float8e4m3fn"),
    # benchmark sizes (GPU benchmarks; never in CI)
    ZooModel("llama_4096", "llama", "float", "Llama decoder, hidden 4096, 2 layers, fp16 (benchmarks)",
             lambda b: build_llama(LLAMA_4096), ci=False, large=True),
    ZooModel("llama_4096_int4", "llama", "int4", "int4 block 32 (benchmarks)", _q("llama_4096", "int4", exclude=NO_ROPE), "llama_4096", ci=False, large=True),
    ZooModel("llama_4096_nvfp4", "llama", "nvfp4", "NVFP4 ModelOpt chain (benchmarks)", _q("llama_4096", "nvfp4", exclude=NO_ROPE), "llama_4096", ci=False, large=True),
    ZooModel("llama_4096_mxfp4", "llama", "mxfp4", "MXFP4 (benchmarks)", _q("llama_4096", "mxfp4", exclude=NO_ROPE), "llama_4096", ci=False, large=True),
    ZooModel("llama_4096_mxfp8", "llama", "mxfp8", "MXFP8 (benchmarks)", _q("llama_4096", "mxfp8", exclude=NO_ROPE), "llama_4096", ci=False, large=True),
)
ENTRIES = {e.name: e for e in _ALL}


def names(ci_only: bool = False) -> list[str]:
    return [e.name for e in _ALL if e.ci or not ci_only]


def entry(name: str) -> ZooModel:
    if name not in ENTRIES:
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(ENTRIES)}")
    return ENTRIES[name]


# -- building -------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def recipe_hash() -> str:
    """Hash of everything that decides a zoo file's bytes: the recipes and onnxfuse's quantizer/formats."""
    import onnxfuse

    pkg = Path(onnxfuse.__file__).resolve().parent
    files = sorted([*HERE.glob("*.py"), *(HERE / "recipes").glob("*.py"), *pkg.glob("quantize*.py"), *(pkg / "formats").glob("*.py")])
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def default_cache_dir() -> Path:
    return Path(os.environ.get("ONNXFUSE_CACHE_DIR") or Path.home() / ".cache" / "onnxfuse" / "zoo")


class Builder:
    def __init__(self, cache_dir: Path):
        self.folder = Path(cache_dir) / recipe_hash()

    def path(self, name: str) -> str:
        target = self.folder / f"{name}.onnx"
        if not target.exists():
            self._write(entry(name), target)
        return str(target)

    def _write(self, e: ZooModel, target: Path) -> None:
        model = e.make(self)
        target.parent.mkdir(parents=True, exist_ok=True)
        # Build in a temporary folder of the cache, then rename: concurrent test workers never see half a file.
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            tmp_path = Path(tmp) / target.name
            data = target.name + ".data"
            if isinstance(model, onnx.ModelProto):
                if e.large:
                    onnx.save_model(model, tmp_path, save_as_external_data=True, location=data)
                else:
                    onnx.save_model(model, tmp_path)
            else:
                if e.large:
                    ir.save(model, tmp_path, external_data=data)
                else:
                    ir.save(model, tmp_path)
            if (Path(tmp) / data).exists():
                os.replace(Path(tmp) / data, target.parent / data)
            os.replace(tmp_path, target)


def build(name: str, cache_dir: str | os.PathLike | None = None) -> str:
    """Path of zoo model `name`, generating it (and the models it derives from) when not cached."""
    return Builder(Path(cache_dir) if cache_dir else default_cache_dir()).path(name)


def markdown_table() -> str:
    """The models/README.md table: every model, its scheme and pattern, and (from the golden files)
    the fused counts and the quantized model's output cosine similarity to its float model."""
    from models import regression

    rows = ["| model | scheme | pattern | fused (golden) | cosine vs float |", "| --- | --- | --- | --- | --- |"]
    for e in _ALL:
        g = regression.load_golden(e.name) if e.base else None
        if e.base is None:
            fused, cos = "(float base)", ""
        elif g is None:
            fused, cos = "(benchmark size, not in CI)" if not e.ci else "(no golden file)", ""
        else:
            fused = "<br>".join(f"{p}: {fmt} x{n}" for p, fmts in sorted(g["fused"].items()) for fmt, n in sorted(fmts.items())) or "nothing"
            cos = ", ".join(f"{c:.4f}" for c in g["cosine_similarity"])
        pattern = e.pattern.replace("|", "\\|")
        rows.append(f"| `{e.name}` | {e.scheme} | {pattern} | {fused} | {cos} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="onnxfuse model zoo")
    p.add_argument("--list", action="store_true", help="list the zoo models")
    p.add_argument("--table", action="store_true", help="print the models/README.md table (from the golden files)")
    p.add_argument("--build", nargs="+", metavar="NAME", help="build these models ('all' or 'ci' for groups)")
    p.add_argument("--cache-dir", default=None, help="default: $ONNXFUSE_CACHE_DIR or ~/.cache/onnxfuse/zoo")
    args = p.parse_args(argv)
    if args.table:
        print(markdown_table())
        return 0
    if args.list or not args.build:
        for e in _ALL:
            tag = "" if e.ci else "  [benchmark size]"
            print(f"{e.name:18} {e.scheme:10} {e.pattern}{tag}")
        return 0
    wanted = names() if args.build == ["all"] else names(ci_only=True) if args.build == ["ci"] else args.build
    for name in wanted:
        try:
            print(build(name, args.cache_dir))
        except KeyError as err:
            print(err.args[0], file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
