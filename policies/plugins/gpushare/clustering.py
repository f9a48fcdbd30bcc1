"""GpuClustering: the FGD simulator's ``GpuClusteringScore`` — pods of one GPU shape together.

A GPU pod's affinity is ``share-gpu`` (a share) or ``<n>-gpu`` (n whole cards); a node's affinities are
those of the GPU pods on it. With b = 25 × (8,000 − free GPU milli) / 8,000 (integer): a node holding only
the pod's affinity scores b + 75, one holding it among others b + 50, a node without GPU pods b + 25, a
node with other affinities only b. Pods without GPUs score 0. Cards: the default best-fit rule. The
affinities per node are kept as pods come and go (recounted only on the nodes that changed).
"""

from __future__ import annotations

import numpy as np

from policies.framework.contract import MAX_NODE_SCORE, BoolArray, CycleContext, IntArray
from policies.plugins.gpushare.common import MAX_SPEC_GPU, go_div, gpu_left
from policies.snapshot import NODES, PODS, RowCursor, Snapshot
from schemas.gpu import MAX_CARDS
from schemas.pod import PodRequest

__all__ = ["NAME", "GpuClustering", "affinity", "new"]

NAME = "GpuClustering"
_SHARE = 0
"""Affinity index of shares; n whole cards are index n."""


def affinity(pod: PodRequest) -> int | None:
    """``GetGpuAffinityFromPodAnnotation`` as an index: 0 for a share, n for n whole cards, None without
    GPUs."""
    gpu = pod.gpu
    if gpu is None:
        return None
    return _SHARE if gpu.is_share else gpu.count


class GpuClustering:
    name = NAME

    def __init__(self) -> None:
        self._cursor = RowCursor(PODS, NODES)
        self._has: BoolArray = np.zeros((0, MAX_CARDS + 1), dtype=np.bool_)

    def _refresh(self, snapshot: Snapshot) -> BoolArray:
        stale = self._cursor.stale(snapshot)
        if stale is None or len(self._has) != snapshot.rows:
            self._has = np.zeros((snapshot.rows, MAX_CARDS + 1), dtype=np.bool_)
            rows: list[int] = list(range(snapshot.rows))
        else:
            rows = sorted(set(stale.tolist()))
        has = self._has
        for row in rows:
            has[row] = False
            for uid in snapshot.pods_on_row[row]:
                tag = affinity(snapshot.pods[uid].info.pod)
                if tag is not None:
                    has[row, tag] = True
        return has

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        tag = affinity(ctx.pod)
        if tag is None:
            return np.zeros(len(nodes), dtype=np.int64)
        has = self._refresh(ctx.snapshot)[nodes]
        kinds = np.count_nonzero(has, axis=1)
        same = has[:, tag]
        quarter = MAX_NODE_SCORE // 4
        base = go_div(quarter * (MAX_SPEC_GPU - gpu_left(ctx, nodes)), MAX_SPEC_GPU)
        bonus = np.where(
            same,
            np.where(kinds == 1, MAX_NODE_SCORE * 3 // 4, MAX_NODE_SCORE * 2 // 4),
            np.where(kinds == 0, MAX_NODE_SCORE // 4, 0),
        )
        result: IntArray = (base + bonus).astype(np.int64)
        return result


def new(args: None, handle: object) -> GpuClustering:
    return GpuClustering()
