"""A BERT-style encoder: word + position embeddings, LayerNorm, multi-head attention, GELU FFN, pooler.

Encoder linears are MatMul(x, W[K, N]) + Add as torch.onnx writes them for 3-D activations; the
pooler and classifier on the [CLS] vector are Gemm(x, W[N, K], b, transB=1), the 2-D export of a
Linear, so the zoo covers both weight orientations.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto

from models.recipes.graph import GraphBuilder


@dataclasses.dataclass(frozen=True)
class BertConfig:
    vocab: int = 1024
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    intermediate: int = 512
    max_positions: int = 64
    labels: int = 8
    ln_eps: float = 1e-12
    dtype: int = TensorProto.FLOAT
    seed: int = 0


def _layer_norm(b: GraphBuilder, x: str, dim: int, eps: float, name: str) -> str:
    gamma = b.const(f"{name}.weight", np.ones(dim, dtype=b.np_dtype))
    beta = b.const(f"{name}.bias", np.zeros(dim, dtype=b.np_dtype))
    return b.op("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=eps)


def _gelu(b: GraphBuilder, x: str, name: str) -> str:
    # 0.5 * x * (1 + erf(x / sqrt(2))): the exact GELU, decomposed as torch exports it
    e = b.op("Erf", [b.op("Div", [x, b.scalar(f"{name}.sqrt2", np.sqrt(2.0))], name)], name)
    return b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, b.scalar(f"{name}.one", 1.0)], name)], name), b.scalar(f"{name}.half", 0.5)], name)


def _self_attention(b: GraphBuilder, cfg: BertConfig, x: str, name: str) -> str:
    hd = cfg.hidden // cfg.heads

    def heads(t: str, tag: str, perm) -> str:
        t = b.op("Reshape", [t, b.ints(f"{name}.{tag}.shape", [0, 0, cfg.heads, hd])], f"{name}.{tag}")
        return b.op("Transpose", [t], f"{name}.{tag}", perm=perm)

    q = heads(b.matmul(x, cfg.hidden, cfg.hidden, f"{name}.self.query", bias=True), "q", [0, 2, 1, 3])
    kt = heads(b.matmul(x, cfg.hidden, cfg.hidden, f"{name}.self.key", bias=True), "k", [0, 2, 3, 1])
    v = heads(b.matmul(x, cfg.hidden, cfg.hidden, f"{name}.self.value", bias=True), "v", [0, 2, 1, 3])
    scores = b.op("Div", [b.op("MatMul", [q, kt], f"{name}.scores"), b.scalar(f"{name}.sqrt_hd", np.sqrt(hd))], f"{name}.scores")
    probs = b.op("Softmax", [scores], f"{name}.probs", axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [probs, v], f"{name}.context")], f"{name}.context", perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, b.ints(f"{name}.merge", [0, 0, cfg.hidden])], f"{name}.context")
    return b.matmul(ctx, cfg.hidden, cfg.hidden, f"{name}.output.dense", bias=True)


def build_bert(cfg: BertConfig = BertConfig()) -> onnx.ModelProto:
    b = GraphBuilder("bert", cfg.seed, cfg.dtype)
    ids = b.input("input_ids", TensorProto.INT64, ["batch", "seq"])
    words = b.op("Gather", [b.weight("embeddings.word_embeddings.weight", (cfg.vocab, cfg.hidden), std=0.5), ids], "embeddings.word_embeddings")
    seq = b.op("Gather", [b.op("Shape", [ids], "embeddings.seq"), b.ints("embeddings.seq_dim", [1])], "embeddings.seq", axis=0)
    positions = b.op("Range", [b.const("embeddings.zero", np.int64(0)), b.op("Squeeze", [seq], "embeddings.seq"), b.const("embeddings.step", np.int64(1))], "embeddings.positions")
    pos = b.op("Gather", [b.weight("embeddings.position_embeddings.weight", (cfg.max_positions, cfg.hidden), std=0.1), positions], "embeddings.position_embeddings")
    x = _layer_norm(b, b.op("Add", [words, pos], "embeddings"), cfg.hidden, cfg.ln_eps, "embeddings.LayerNorm")

    for i in range(cfg.layers):
        name = f"encoder.layer.{i}"
        a = _self_attention(b, cfg, x, f"{name}.attention")
        x = _layer_norm(b, b.op("Add", [x, a], f"{name}.attention.residual"), cfg.hidden, cfg.ln_eps, f"{name}.attention.output.LayerNorm")
        h = _gelu(b, b.matmul(x, cfg.hidden, cfg.intermediate, f"{name}.intermediate.dense", bias=True), f"{name}.intermediate.gelu")
        h = b.matmul(h, cfg.intermediate, cfg.hidden, f"{name}.output.dense", bias=True)
        x = _layer_norm(b, b.op("Add", [x, h], f"{name}.output.residual"), cfg.hidden, cfg.ln_eps, f"{name}.output.LayerNorm")

    cls = b.op("Gather", [x, b.const("pooler.cls_index", np.int64(0))], "pooler.first_token", axis=1)
    pooled = b.op("Tanh", [b.gemm(cls, cfg.hidden, cfg.hidden, "pooler.dense")], "pooler.activation")
    logits = b.gemm(pooled, cfg.hidden, cfg.labels, "classifier")
    b.output(x, "last_hidden_state", shape=["batch", "seq", cfg.hidden])
    b.output(logits, "logits", shape=["batch", cfg.labels])
    return b.model(f"BERT-style encoder: hidden {cfg.hidden}, {cfg.layers} layers, {cfg.heads} heads, seed {cfg.seed}")
