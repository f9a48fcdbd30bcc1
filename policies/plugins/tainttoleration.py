"""TaintToleration: NoSchedule/NoExecute taints must be tolerated (filter); fewer untolerated
PreferNoSchedule taints score higher (score, reversed DefaultNormalizeScore)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from policies.framework.contract import (
    MAX_NODE_SCORE,
    BoolArray,
    CycleContext,
    Int32Array,
    IntArray,
    Nodes,
)
from policies.plugins.noderesources.common import default_normalize

if TYPE_CHECKING:
    from policies.snapshot import Snapshot

__all__ = ["NAME", "TaintToleration", "new", "untolerated_taint"]

NAME = "TaintToleration"
_UNTOLERATED = "tainttoleration.untolerated"
_WORD_BITS = 64
"""Taints per word of `Snapshot.taint_words` (taint id = word index × 64 + bit)."""


def _untolerated(ctx: CycleContext) -> tuple[list[int], list[int]]:
    """`Snapshot.untolerated_taints` of the pod, once per cycle (Filter and Score both read it)."""
    found: tuple[list[int], list[int]] | None = ctx.state.get(_UNTOLERATED)
    if found is None:
        found = ctx.state[_UNTOLERATED] = ctx.snapshot.untolerated_taints(ctx.pod.tolerations)
    return found


def untolerated_taint(key: str, value: str) -> str:
    return f"node(s) had untolerated taint {{{key}: {value}}}"


class TaintToleration:
    name = NAME

    def __init__(self) -> None:
        self._normalized: dict[int, IntArray] = {}
        self._normalized32: dict[int, Int32Array] = {}
        self._full: Int32Array = np.zeros(0, dtype=np.int32)

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        hard, _ = _untolerated(ctx)
        if not any(hard):
            return None
        fits: BoolArray = ctx.snapshot.taint_counts(hard)[nodes] == 0
        return fits

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        # Upstream reports the first untolerated taint in the node's own order. Where a node has exactly one
        # (nearly always), the snapshot's taint bits name it without reading the node; only nodes with
        # several are read taint by taint.
        untolerated, lowest_id = self._untolerated_bits(ctx, nodes)
        named = self._named(ctx.snapshot)
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

    def reason_counts(self, ctx: CycleContext, nodes: IntArray) -> Counter[str]:
        """`reasons` counted: the nodes with one untolerated taint counted per taint at once."""
        untolerated, lowest_id = self._untolerated_bits(ctx, nodes)
        named = self._named(ctx.snapshot)
        histogram: Counter[str] = Counter()
        ids, counts = np.unique(lowest_id[untolerated == 1], return_counts=True)
        for taint_id, count in zip(ids.tolist(), counts.tolist(), strict=True):
            histogram[named[taint_id][0]] += count
        for row in nodes[untolerated > 1].tolist():
            histogram.update(self._first_untolerated(ctx, row))
        return histogram

    @staticmethod
    def _untolerated_bits(ctx: CycleContext, nodes: IntArray) -> tuple[IntArray, IntArray]:
        """Per node, how many untolerated NoSchedule/NoExecute taints it has, and the lowest one's id."""
        snapshot = ctx.snapshot
        hard, _ = _untolerated(ctx)
        untolerated = np.zeros(len(nodes), dtype=np.int64)
        lowest_id = np.zeros(len(nodes), dtype=np.int64)
        for index, (word, mask) in enumerate(zip(snapshot.taint_words, hard, strict=True)):
            if mask:
                bits = word[nodes] & np.uint64(mask)
                untolerated += np.bitwise_count(bits)
                lowest_bit = bits & (~bits + np.uint64(1))
                bit_index = np.bitwise_count(lowest_bit - np.uint64(1)).astype(np.int64)
                lowest_id = np.where(bits != 0, index * _WORD_BITS + bit_index, lowest_id)
        return untolerated, lowest_id

    @staticmethod
    def _named(snapshot: Snapshot) -> dict[int, list[str]]:
        return {tid: [untolerated_taint(key, value)] for (key, value, _), tid in snapshot.taint_ids.items()}

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
        _, soft = _untolerated(ctx)
        if not any(soft):
            return np.full(len(nodes), MAX_NODE_SCORE, dtype=np.int64)  # what normalising all zeros gives
        counts = ctx.snapshot.taint_counts(soft).take(nodes)
        highest = int(counts.max()) if len(counts) else 0
        if highest == 0:
            return np.full(len(nodes), MAX_NODE_SCORE, dtype=np.int64)
        scores: IntArray = self._table(highest).take(counts)
        return scores

    def score_rows(self, ctx: CycleContext, passing: BoolArray | None) -> Int32Array:
        """`score` over every row (`RowScorePlugin`), normalised by the highest count on a passing row."""
        snapshot = ctx.snapshot
        rows = snapshot.rows
        _, soft = _untolerated(ctx)
        if any(soft):
            counts = snapshot.taint_counts(soft)[:rows]
            highest = int(counts.max())
            if highest and passing is not None and not ((counts == highest) & passing).any():
                highest = int(counts.max(where=passing, initial=0))  # the most tainted nodes all failed
            if highest:
                # Rows that failed may count more than `highest`: clipped, and never read.
                scores: Int32Array = self._table32(highest).take(counts, mode="clip")
                return scores
        if len(self._full) < rows:
            self._full = np.full(2 * rows, MAX_NODE_SCORE, dtype=np.int32)
            self._full.flags.writeable = False
        return self._full[:rows]

    def _table32(self, highest: int) -> Int32Array:
        table = self._normalized32.get(highest)
        if table is None:
            table = self._normalized32[highest] = self._table(highest).astype(np.int32)
        return table

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
