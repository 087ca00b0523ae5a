"""Clean-up after fusion: dead nodes, unused initializers and functions, opset imports, order, names."""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes import common


class CleanupPass(ir.passes.InPlacePass):
    """Runs onnx-ir's standard clean-up passes in the order that lets each see the previous one's work."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for p in (
            common.RemoveUnusedNodesPass(),  # replaced DQ / Transpose / Cast chains and their initializers
            common.RemoveUnusedFunctionsPass(),
            common.RemoveUnusedOpsetsPass(),  # e.g. trt / com.amd.quark once their nodes are gone
            common.TopologicalSortPass(),
            common.NameFixPass(),  # every node and value named, no duplicates
        ):
            modified |= p(model).modified
        return ir.passes.PassResult(model, modified)
