"""TaintToleration: NoSchedule/NoExecute taints must be tolerated (filter); fewer untolerated
PreferNoSchedule taints score higher (score, reversed DefaultNormalizeScore)."""

from __future__ import annotations

import numpy as np

from policies.framework.contract import (
    MAX_NODE_SCORE,
    BoolArray,
    CycleContext,
    IntArray,
    Nodes,
)
from policies.plugins.noderesources.common import default_normalize

__all__ = ["NAME", "TaintToleration", "new", "untolerated_taint"]

NAME = "TaintToleration"
_WORD_BITS = 64
"""Taints per word of `Snapshot.taint_words` (taint id = word index × 64 + bit)."""


def untolerated_taint(key: str, value: str) -> str:
    return f"node(s) had untolerated taint {{{key}: {value}}}"


class TaintToleration:
    name = NAME

    def __init__(self) -> None:
        self._normalized: dict[int, IntArray] = {}

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        hard, _ = ctx.snapshot.untolerated_taints(ctx.pod.tolerations)
        if not any(hard):
            return None
        fits: BoolArray = ctx.snapshot.taint_counts(hard)[nodes] == 0
        return fits

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        # Upstream reports the first untolerated taint in the node's own order. Where a node has exactly one
        # (nearly always), the snapshot's taint bits name it without reading the node; only nodes with
        # several are read taint by taint.
        snapshot = ctx.snapshot
        hard, _ = snapshot.untolerated_taints(ctx.pod.tolerations)
        untolerated = np.zeros(len(nodes), dtype=np.int64)
        lowest_id = np.zeros(len(nodes), dtype=np.int64)
        for index, (word, mask) in enumerate(zip(snapshot.taint_words, hard, strict=True)):
            if mask:
                bits = word[nodes] & np.uint64(mask)
                untolerated += np.bitwise_count(bits)
                lowest_bit = bits & (~bits + np.uint64(1))
                bit_index = np.bitwise_count(lowest_bit - np.uint64(1)).astype(np.int64)
                lowest_id = np.where(bits != 0, index * _WORD_BITS + bit_index, lowest_id)
        named = {tid: [untolerated_taint(key, value)] for (key, value, _), tid in snapshot.taint_ids.items()}
        result: list[list[str]] = []
        counts, ids = untolerated.tolist(), lowest_id.tolist()
        for row, count, taint_id in zip(nodes.tolist(), counts, ids, strict=True):
            if count == 1:
                result.append(named[taint_id])  # shared: callers read reasons, never change them
            elif count == 0:
                result.append([])
            else:
                result.append(self._first_untolerated(ctx, row))
        return result

    def _first_untolerated(self, ctx: CycleContext, row: int) -> list[str]:
        spec = ctx.snapshot.specs[row]
        assert spec is not None
        for taint in spec.taints:
            if taint.effect in ("NoSchedule", "NoExecute") and not any(
                t.tolerates(taint.key, taint.value, taint.effect) for t in ctx.pod.tolerations
            ):
                return [untolerated_taint(taint.key, taint.value)]
        return []

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        _, soft = ctx.snapshot.untolerated_taints(ctx.pod.tolerations)
        if not any(soft):
            return np.full(len(nodes), MAX_NODE_SCORE, dtype=np.int64)  # what normalising all zeros gives
        counts = ctx.snapshot.taint_counts(soft).take(nodes)
        highest = int(counts.max()) if len(counts) else 0
        if highest == 0:
            return np.full(len(nodes), MAX_NODE_SCORE, dtype=np.int64)
        scores: IntArray = self._table(highest).take(counts)
        return scores

    def _table(self, highest: int) -> IntArray:
        """DefaultNormalizeScore, reversed, for counts 0..highest: looked up rather than divided per node,
        and kept per highest count (a handful of values over a run)."""
        normalized = self._normalized.get(highest)
        if normalized is None:
            normalized = default_normalize(np.arange(highest + 1, dtype=np.int64), reverse=True)
            self._normalized[highest] = normalized
        return normalized


def new(args: None, handle: object) -> TaintToleration:
    return TaintToleration()
