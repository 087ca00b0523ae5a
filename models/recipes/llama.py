"""A Llama-style decoder: RMSNorm, rotary embedding, grouped-query attention, SwiGLU, tied LM head.

Written the way torch.onnx exports it: Linear as MatMul(x, W[K, N]), RMSNorm decomposed into
Pow/ReduceMean/Add/Sqrt/Div/Mul, rotary as cos/sin tables gathered by position_ids, GQA by
expanding the key/value heads, and the LM head reading the embedding table through a Transpose
(one initializer feeds the Gather and the LM head).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto

from models.recipes.graph import GraphBuilder


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    vocab: int = 512
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 352  # not a multiple of 32 or 128: exercises ragged last blocks
    max_positions: int = 128
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    dtype: int = TensorProto.FLOAT
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


# Benchmark size: Llama-3-8B's layer shapes, two layers, a 32000-token tied vocabulary, fp16.
LLAMA_4096 = LlamaConfig(
    vocab=32000, hidden=4096, layers=2, heads=32, kv_heads=8, intermediate=14336, max_positions=4096,
    dtype=TensorProto.FLOAT16,
)


def _rms_norm(b: GraphBuilder, x: str, dim: int, eps: float, name: str) -> str:
    xf = b.op("Cast", [x], name, to=TensorProto.FLOAT)
    ms = b.op("ReduceMean", [b.op("Pow", [xf, b.const(f"{name}.two", np.float32(2.0))], name), b.ints(f"{name}.axes", [-1])], name, keepdims=1)
    rms = b.op("Sqrt", [b.op("Add", [ms, b.const(f"{name}.eps", np.float32(eps))], name)], name)
    y = b.op("Cast", [b.op("Div", [xf, rms], name)], name, to=b.dtype)
    return b.op("Mul", [y, b.const(f"{name}.weight", np.ones(dim, dtype=b.np_dtype))], name)


def _rotate_half(b: GraphBuilder, x: str, half: int, name: str) -> str:
    x1, x2 = b.op("Split", [x, b.ints(f"{name}.split", [half, half])], name, outputs=2, axis=-1)
    return b.op("Concat", [b.op("Neg", [x2], name), x1], name, axis=-1)


def _heads(b: GraphBuilder, x: str, n: int, hd: int, name: str) -> str:
    """[b, s, n*hd] -> [b, n, s, hd]"""
    x = b.op("Reshape", [x, b.ints(f"{name}.shape", [0, 0, n, hd])], name)
    return b.op("Transpose", [x], name, perm=[0, 2, 1, 3])


def _attention(b: GraphBuilder, cfg: LlamaConfig, x: str, cos: str, sin: str, mask: str, name: str) -> str:
    hd, h, kvh = cfg.head_dim, cfg.heads, cfg.kv_heads
    q = _heads(b, b.matmul(x, cfg.hidden, h * hd, f"{name}.q_proj"), h, hd, f"{name}.q")
    k = _heads(b, b.matmul(x, cfg.hidden, kvh * hd, f"{name}.k_proj"), kvh, hd, f"{name}.k")
    v = _heads(b, b.matmul(x, cfg.hidden, kvh * hd, f"{name}.v_proj"), kvh, hd, f"{name}.v")
    rope = lambda t, tag: b.op(  # noqa: E731
        "Add",
        [b.op("Mul", [t, cos], f"{name}.rope_{tag}"), b.op("Mul", [_rotate_half(b, t, hd // 2, f"{name}.rope_{tag}"), sin], f"{name}.rope_{tag}")],
        f"{name}.rope_{tag}",
    )
    q, k = rope(q, "q"), rope(k, "k")
    if kvh != h:  # grouped-query attention: repeat each key/value head h/kvh times
        rep = h // kvh
        expand = lambda t, tag: b.op(  # noqa: E731
            "Reshape",
            [
                b.op(
                    "Expand",
                    [b.op("Unsqueeze", [t, b.ints(f"{name}.{tag}_axis", [2])], f"{name}.repeat_{tag}"), b.ints(f"{name}.{tag}_expand", [1, 1, rep, 1, 1])],
                    f"{name}.repeat_{tag}",
                ),
                b.ints(f"{name}.{tag}_heads", [0, h, -1, hd]),
            ],
            f"{name}.repeat_{tag}",
        )
        k, v = expand(k, "k"), expand(v, "v")
    kt = b.op("Transpose", [k], f"{name}.k", perm=[0, 1, 3, 2])
    scores = b.op("Mul", [b.op("MatMul", [q, kt], f"{name}.scores"), b.scalar(f"{name}.scaling", 1.0 / np.sqrt(hd))], f"{name}.scores")
    probs = b.op("Softmax", [b.op("Add", [scores, mask], f"{name}.mask")], f"{name}.probs", axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [probs, v], f"{name}.context")], f"{name}.context", perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, b.ints(f"{name}.merge", [0, 0, h * hd])], f"{name}.context")
    return b.matmul(ctx, h * hd, cfg.hidden, f"{name}.o_proj")


def _swiglu(b: GraphBuilder, cfg: LlamaConfig, x: str, name: str) -> str:
    gate = b.matmul(x, cfg.hidden, cfg.intermediate, f"{name}.gate_proj")
    up = b.matmul(x, cfg.hidden, cfg.intermediate, f"{name}.up_proj")
    act = b.op("Mul", [b.op("Mul", [gate, b.op("Sigmoid", [gate], f"{name}.silu")], f"{name}.silu"), up], f"{name}.gated")
    return b.matmul(act, cfg.intermediate, cfg.hidden, f"{name}.down_proj")


def _rope_tables(cfg: LlamaConfig) -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / cfg.rope_theta ** (np.arange(0, cfg.head_dim, 2, dtype=np.float64) / cfg.head_dim)
    freqs = np.outer(np.arange(cfg.max_positions, dtype=np.float64), inv)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


def build_llama(cfg: LlamaConfig = LlamaConfig()) -> onnx.ModelProto:
    b = GraphBuilder("llama", cfg.seed, cfg.dtype)
    ids = b.input("input_ids", TensorProto.INT64, ["batch", "seq"])
    pos = b.input("position_ids", TensorProto.INT64, ["batch", "seq"])
    embed = b.weight("model.embed_tokens.weight", (cfg.vocab, cfg.hidden), std=0.5)
    x = b.op("Gather", [embed, ids], "model.embed_tokens")

    cos_t, sin_t = _rope_tables(cfg)
    unsq = b.ints("model.rotary.head_axis", [1])
    cos = b.op("Unsqueeze", [b.op("Gather", [b.const("model.rotary.cos", cos_t.astype(b.np_dtype)), pos], "model.rotary.cos"), unsq], "model.rotary.cos")
    sin = b.op("Unsqueeze", [b.op("Gather", [b.const("model.rotary.sin", sin_t.astype(b.np_dtype)), pos], "model.rotary.sin"), unsq], "model.rotary.sin")
    # Causal mask [seq, seq]: a large negative value above the diagonal, zero elsewhere.
    seq = b.op("Gather", [b.op("Shape", [ids], "model.mask"), b.ints("model.mask.seq_dim", [1])], "model.mask", axis=0)
    square = b.op("Concat", [seq, seq], "model.mask", axis=0)
    neg = float(np.finfo(b.np_dtype).min) / 2
    full = b.op("ConstantOfShape", [square], "model.mask", value=onnx.numpy_helper.from_array(np.array([neg], dtype=b.np_dtype)))
    mask = b.op("Trilu", [full, b.const("model.mask.k", np.int64(1))], "model.mask", upper=1)

    for i in range(cfg.layers):
        name = f"model.layers.{i}"
        h = _rms_norm(b, x, cfg.hidden, cfg.rms_eps, f"{name}.input_layernorm")
        x = b.op("Add", [x, _attention(b, cfg, h, cos, sin, mask, f"{name}.self_attn")], f"{name}.residual_attn")
        h = _rms_norm(b, x, cfg.hidden, cfg.rms_eps, f"{name}.post_attention_layernorm")
        x = b.op("Add", [x, _swiglu(b, cfg, h, f"{name}.mlp")], f"{name}.residual_mlp")

    h = _rms_norm(b, x, cfg.hidden, cfg.rms_eps, "model.norm")
    head = b.op("Transpose", [embed], "lm_head", perm=[1, 0])  # tied: the LM head is embed_tokens.T
    logits = b.op("MatMul", [h, head], "lm_head")
    b.output(logits, "logits", shape=["batch", "seq", cfg.vocab])
    return b.model(f"Llama-style decoder: hidden {cfg.hidden}, {cfg.layers} layers, {cfg.heads}/{cfg.kv_heads} heads, seed {cfg.seed}")
