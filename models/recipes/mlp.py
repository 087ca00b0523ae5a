"""A three-layer MLP: the smallest model with every MatMul shape the passes care about."""

from __future__ import annotations

import dataclasses

import onnx
from onnx import TensorProto

from models.recipes.graph import GraphBuilder


@dataclasses.dataclass(frozen=True)
class MlpConfig:
    d_in: int = 256
    d_hidden: int = 512
    d_out: int = 256
    dtype: int = TensorProto.FLOAT
    seed: int = 0
    batch: int | str = "batch"  # a fixed size for models with static activation block scales


def build_mlp(cfg: MlpConfig = MlpConfig()) -> onnx.ModelProto:
    b = GraphBuilder("mlp", cfg.seed, cfg.dtype)
    x = b.input("x", cfg.dtype, [cfg.batch, cfg.d_in])
    h = b.op("Relu", [b.matmul(x, cfg.d_in, cfg.d_hidden, "fc1", bias=True)], "act1")
    h = b.op("Relu", [b.matmul(h, cfg.d_hidden, cfg.d_hidden, "fc2", bias=True)], "act2")
    y = b.matmul(h, cfg.d_hidden, cfg.d_out, "fc3", bias=True)
    b.output(y, "y", shape=[cfg.batch, cfg.d_out])
    return b.model(f"MLP {cfg.d_in}-{cfg.d_hidden}-{cfg.d_hidden}-{cfg.d_out}, seed {cfg.seed}")
