"""ImageLocality: favour nodes that already hold the pod's container images, as kube-scheduler v1.36 does.

Each container (init containers included) whose image the node holds adds ``int(size × nodes with the
image / all nodes)``; the sum is clamped to 23 MiB .. 1000 MiB × containers and scaled linearly to 0..100.
Image names are matched after upstream's normalisation: a reference without a tag gains ``:latest`` (no
registry or ``library/`` prefix is added, as upstream adds none). An image's size is the one reported by
the first node that held it while any node still does, as the scheduler cache keeps it.
"""

from __future__ import annotations

import numpy as np

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray, no_scores
from policies.snapshot import NODES, RowCursor, Snapshot

__all__ = [
    "MAX_CONTAINER_THRESHOLD",
    "MIN_THRESHOLD",
    "NAME",
    "ImageLocality",
    "new",
    "normalized_image_name",
]

NAME = "ImageLocality"
_MB = 1024 * 1024
MIN_THRESHOLD = 23 * _MB
MAX_CONTAINER_THRESHOLD = 1000 * _MB


def normalized_image_name(name: str) -> str:
    """upstream's normalizedImageName: add ``:latest`` where the last ``:`` is not after the last ``/``."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


class _ImageStates:
    """The scheduler cache's image states over snapshot rows: image name → (size, rows holding it), kept
    as nodes are added, updated and removed (an update removes the row's old images, then adds its new)."""

    def __init__(self) -> None:
        self.cursor = RowCursor(NODES)
        self.states: dict[str, tuple[int, set[int]]] = {}
        self.on_row: dict[int, list[str]] = {}
        self.changes = 0
        """Refreshes that found rows changed: while the same, so are `states`."""

    def refresh(self, snapshot: Snapshot) -> None:
        stale = self.cursor.stale(snapshot)
        if stale is None:
            self.states, self.on_row = {}, {}
            rows: list[int] = list(range(snapshot.rows))
        elif len(stale) == 0:
            return  # no node changed (nearly every cycle)
        else:
            rows = sorted(set(stale.tolist()))
        self.changes += 1
        for row in rows:
            for name in self.on_row.pop(row, ()):
                _, holders = self.states[name]
                holders.discard(row)
                if not holders:
                    del self.states[name]
            spec = snapshot.specs[row] if row < len(snapshot.specs) else None
            if spec is None or not spec.images:
                continue
            names: list[str] = []
            for image in spec.images:
                for name in image.names:
                    state = self.states.get(name)
                    if state is None:
                        self.states[name] = (image.size_bytes, {row})
                    else:
                        state[1].add(row)
                    if name not in names:
                        names.append(name)
            self.on_row[row] = names


_SKIP_SCORE = frozenset({"score"})
_SKIP_NONE: frozenset[str] = frozenset()


class ImageLocality:
    name = NAME
    skip_fields = ()

    def __init__(self) -> None:
        self._images = _ImageStates()

    def skip_key(self, snapshot: Snapshot) -> int:
        """`skips` reads the pod and the images nodes hold."""
        self._images.refresh(snapshot)
        return self._images.changes

    def skips(self, ctx: CycleContext) -> frozenset[str]:
        """PreScore's Skip while no node holds any image: `score` would score every node 0."""
        self._images.refresh(ctx.snapshot)
        return _SKIP_NONE if self._images.states else _SKIP_SCORE

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        pod, snapshot = ctx.pod, ctx.snapshot
        self._images.refresh(snapshot)
        states = self._images.states
        if not states:
            return no_scores(len(nodes))  # no node holds any image: every sum clamps to the floor
        containers = [*pod.init_containers, *pod.containers]
        total_nodes = snapshot.size
        sums: IntArray | None = None
        if total_nodes:
            for container in containers:
                state = states.get(normalized_image_name(container.image))
                if state is None:
                    continue
                if sums is None:
                    sums = np.zeros(len(nodes), dtype=np.int64)
                size, holders = state
                # int64(float64(size) * (float64(numNodes) / float64(total))), in Go's order.
                scaled = int(float(size) * (float(len(holders)) / float(total_nodes)))
                sums += np.where(np.isin(nodes, np.fromiter(holders, dtype=np.int64)), scaled, 0)
        max_threshold = MAX_CONTAINER_THRESHOLD * len(containers)
        if max_threshold <= MIN_THRESHOLD or sums is None:
            # No container (or a threshold below the floor), or no image of the pod on any node: every sum
            # clamps to the floor and scores 0.
            return no_scores(len(nodes))
        clamped = np.clip(sums, MIN_THRESHOLD, max_threshold)
        # Non-negative operands: Go's truncating division is a floor.
        scores: IntArray = MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)
        return scores


def new(args: None, handle: object) -> ImageLocality:
    return ImageLocality()
