"""How a quantized weight looks after Transpose / Reshape look-through, without touching its bytes.

A WeightView records the logical shape, where the blocked axis went, and the data movements
to replay on the codes, scales and zero points when the weight is finally repacked. A movement
that would split a block, or scatter one block over several rows, is refused with a reason.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from onnxfuse.passes.qdq import expected_scale_shape


@dataclasses.dataclass(frozen=True)
class WeightView:
    shape: tuple[int, ...]
    axis: int
    block_size: int
    scale_shape: tuple[int, ...]
    ops: tuple = ()  # ("transpose", perm) | ("reshape", data_shape, scale_shape)

    @classmethod
    def of(cls, data_shape: tuple[int, ...], axis: int, block_size: int) -> "WeightView":
        return cls(tuple(data_shape), axis, block_size, expected_scale_shape(data_shape, axis, block_size))

    @property
    def signature(self) -> tuple:
        """Identifies the rows this view produces, for sharing one repacked tensor between users.

        Transposes alone compose to one permutation of the source axes (so a tied embedding's
        Gather view and its LM head's transposed view give the same rows); with a Reshape the
        movement itself is the key.
        """
        if all(op[0] == "transpose" for op in self.ops):
            source = list(range(len(self.shape)))
            for op in self.ops:
                source = [source[p] for p in op[1]]
            order = [source[i] for i in range(len(source)) if i != self.axis] + [source[self.axis]]
            return ("perm", tuple(order))
        return ("ops", self.shape, self.axis, self.ops)

    def transpose(self, perm: list[int] | None) -> "WeightView | str":
        rank = len(self.shape)
        perm = list(range(rank))[::-1] if perm is None else [p % rank for p in perm]
        if sorted(perm) != list(range(rank)):
            return f"Transpose perm {perm} is not a permutation of rank {rank}"
        return WeightView(
            tuple(self.shape[p] for p in perm),
            perm.index(self.axis),
            self.block_size,
            tuple(self.scale_shape[p] for p in perm),
            self.ops + (("transpose", tuple(perm)),),
        )

    def reshape(self, target: list[int], allowzero: bool = False) -> "WeightView | str":
        new = _resolve_shape(self.shape, target, allowzero)
        if isinstance(new, str):
            return new
        if self.shape[self.axis] == 1:
            return "the blocked axis has size 1, so a Reshape cannot be followed"
        groups = _groups(self.shape, new)
        if groups is None:
            return f"Reshape {list(self.shape)} -> {list(new)} does not regroup whole dimensions"
        for gi, gj in groups:
            if self.axis not in gi:
                continue
            if gi[-1] != self.axis or len(gj) != 1:
                return (f"Reshape {list(self.shape)} -> {list(new)} splits the blocked axis {self.axis} or merges it "
                        "with an inner dimension, so blocks would not stay contiguous along one axis")
            d = self.shape[self.axis]
            if len(gi) > 1 and d % self.block_size:
                return (f"Reshape merges the blocked axis (size {d}) into a larger one, but block_size "
                        f"{self.block_size} does not divide it (ragged blocks cannot be merged)")
            new_axis = gj[0]
            outer = math.prod(self.shape[k] for k in gi[:-1])
            scale_new = list(new)
            scale_new[new_axis] = outer * self.scale_shape[self.axis]
            return WeightView(
                tuple(new), new_axis, self.block_size, tuple(scale_new),
                self.ops + (("reshape", tuple(new), tuple(scale_new)),),
            )
        return "internal: the blocked axis was not found in the Reshape grouping"

    def apply(self, array: np.ndarray, *, is_scale: bool) -> np.ndarray:
        """Replay the data movement on the codes (is_scale False) or on a scale / zero point."""
        for op in self.ops:
            if op[0] == "transpose":
                array = array.transpose(op[1])
            else:
                array = array.reshape(op[2] if is_scale else op[1])
        return array

    def rows(self, array: np.ndarray, *, is_scale: bool) -> np.ndarray:
        """[R, K] (or [R, G]) with the blocked axis last: docs/ops.md's row order."""
        moved = np.moveaxis(self.apply(array, is_scale=is_scale), self.axis, -1)
        return np.ascontiguousarray(moved.reshape(-1, moved.shape[-1]))


def _resolve_shape(shape: tuple[int, ...], target: list[int], allowzero: bool) -> tuple[int, ...] | str:
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(shape):
                return f"Reshape copies dimension {i}, which the input does not have"
            d = shape[i]
        out.append(int(d))
    if out.count(-1) > 1:
        return "Reshape has more than one -1"
    total = math.prod(shape)
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            return f"Reshape {list(shape)} -> {list(target)} is not a valid reshape"
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        return f"Reshape {list(shape)} -> {list(target)} changes the number of elements"
    return tuple(out)


def _groups(a: tuple[int, ...], b: tuple[int, ...]) -> list[tuple[list[int], list[int]]] | None:
    """Pair runs of dims of `a` and `b` with equal products (size-1 dims ignored), row-major."""
    ia = [i for i, d in enumerate(a) if d != 1]
    ib = [j for j, d in enumerate(b) if d != 1]
    groups, p, q = [], 0, 0
    while p < len(ia) and q < len(ib):
        gi, gj = [ia[p]], [ib[q]]
        pa, pb = a[ia[p]], b[ib[q]]
        p, q = p + 1, q + 1
        while pa != pb:
            if pa < pb:
                if p >= len(ia):
                    return None
                pa *= a[ia[p]]
                gi.append(ia[p])
                p += 1
            else:
                if q >= len(ib):
                    return None
                pb *= b[ib[q]]
                gj.append(ib[q])
                q += 1
        groups.append((gi, gj))
    if p != len(ia) or q != len(ib):
        return None
    return groups
