"""DefaultPreemption (PostFilter): when a pod fits nowhere, find the node where evicting the
fewest pods of lower priority makes it fit, and evict them.

For each node rejected only by filters that evictions can satisfy, all lower-priority pods are removed
(in the snapshot, temporarily); if the pod then passes the profile's whole filter chain, pods are given
back one at a time, highest priority first, and whoever does not fit back is a victim. Among candidate
nodes the winner has the fewest victims, then the lowest highest-victim priority, then the lowest sum of
victim priorities, then the first name. The snapshot is restored before returning.
"""

from __future__ import annotations

import numpy as np

from policies.framework.contract import CycleContext, PostFilterResult
from policies.framework.profile import Handle
from policies.framework.status import Code, Status
from policies.snapshot import PodRecord

__all__ = ["NAME", "RESOLVABLE_BY_EVICTION", "DefaultPreemption", "new"]

NAME = "DefaultPreemption"
RESOLVABLE_BY_EVICTION = frozenset({"NodeResourcesFit", "NodePorts", "LimitSum", "RoleSpread"})


class DefaultPreemption:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def _fits(self, ctx: CycleContext, row: int) -> bool:
        profile = self.handle.profile
        assert profile is not None
        nodes = np.array([row], dtype=np.int64)
        for plugin in profile.filter:
            keep = plugin.filter(ctx, nodes)
            if keep is not None and not keep[0]:
                return False
        return True

    def _victims(self, ctx: CycleContext, row: int) -> list[PodRecord] | None:
        snapshot = ctx.snapshot
        lower = [
            snapshot.pods[uid]
            for uid in sorted(snapshot.pods_on_row[row])
            if snapshot.pods[uid].info.pod.priority < ctx.pod.priority
        ]
        if not lower:
            return None
        version = int(snapshot.version[row])
        for record in lower:
            snapshot.forget(record.info.pod.uid)
        try:
            if not self._fits(ctx, row):
                return None
            victims = []
            for record in sorted(lower, key=lambda r: (-r.info.pod.priority, r.info.pod.uid)):
                snapshot.assume(record.info, row, bound=record.bound, at=record.at, attempt=record.attempt)
                if not self._fits(ctx, row):
                    snapshot.forget(record.info.pod.uid)
                    victims.append(record)
            return victims
        finally:
            for record in lower:
                if record.info.pod.uid not in snapshot.pods:
                    snapshot.assume(
                        record.info, row, bound=record.bound, at=record.at, attempt=record.attempt
                    )
            snapshot.version[row] = version  # a what-if is not a change of the node

    def post_filter(self, ctx: CycleContext, rejected: dict[int, str]) -> PostFilterResult:
        best: tuple[tuple[int, int, int, str], int, list[PodRecord]] | None = None
        for row, plugin in rejected.items():
            if plugin not in RESOLVABLE_BY_EVICTION:
                continue
            victims = self._victims(ctx, row)
            if not victims:
                continue
            priorities = [v.info.pod.priority for v in victims]
            key = (len(victims), max(priorities), sum(priorities), ctx.snapshot.names[row] or "")
            if best is None or key < best[0]:
                best = (key, row, victims)
        if best is None:
            return PostFilterResult(
                Status.unschedulable(
                    "preemption: no node can be freed by evicting lower-priority pods", plugin=NAME
                )
            )
        _, row, victims = best
        return PostFilterResult(
            Status(Code.UNSCHEDULABLE, ("preempting",), NAME), row, [v.info.pod.uid for v in victims]
        )


def new(args: None, handle: Handle) -> DefaultPreemption:
    return DefaultPreemption(handle)
