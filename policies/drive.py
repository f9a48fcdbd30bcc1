"""Driving a `Scheduler` offline, one event at a time: the loop the experiments and benchmarks share.

An offline run has no applier in the loop. Time is whatever clock the caller keeps, and the outcomes are
all there is to measure. `Drive` binds every placement as soon as it is made (no control plane refuses
one) and keeps where each pod is; `arrive` alone leaves placements assumed, for a caller that times the
decision itself and nothing around it. The pipeline's sequencer calls the same `Scheduler` methods with
a real applier in between.
"""

from __future__ import annotations

from collections.abc import Iterable

from policies.framework.profile import BUILTIN_PROFILES, Profile, ProfileSet, parse_profile
from policies.scheduler import Evicted, Outcome, Placed, Scheduler
from schemas.node import NodeSpec
from schemas.pod import PodRequest

__all__ = ["Drive", "arrive", "make_scheduler"]


def make_scheduler(nodes: Iterable[NodeSpec], profile: str | Profile | None = None) -> Scheduler:
    """A scheduler on `nodes` (added in order) running one profile: a built-in by name, or one already
    parsed; None runs every built-in profile, as a worker does."""
    if isinstance(profile, str):
        profile = parse_profile(BUILTIN_PROFILES[profile])
    scheduler = Scheduler(None if profile is None else ProfileSet([profile]))
    for spec in nodes:
        scheduler.upsert_node(spec)
    return scheduler


def arrive(scheduler: Scheduler, pod: PodRequest, now: float) -> list[Outcome]:
    """Queue the pod and run every cycle due at `now`: a one-by-one profile decides the pod then and
    there; a batch profile decides when its batch is full or its wait is over."""
    return [*scheduler.add_pod(pod, now), *scheduler.schedule(now)]


class Drive:
    """Pods arriving and leaving on one scheduler, each placement bound at once. Every method returns the
    outcomes it caused, for the caller's own books."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.placement: dict[str, str] = {}
        """uid → node of every pod placed and still there, in the order they were placed."""

    def arrive(self, pod: PodRequest, now: float) -> list[Outcome]:
        return self._bind(arrive(self.scheduler, pod, now))

    def delete(self, uid: str, now: float) -> list[Outcome]:
        self.placement.pop(uid, None)
        return self._bind(self.scheduler.delete_pod(uid, now))

    def tick(self, now: float) -> list[Outcome]:
        """Advance the clock: batches whose wait is over run; pods whose backoff has passed go back in the
        queue, and are tried at the next arrival."""
        return self._bind(self.scheduler.tick(now))

    def _bind(self, outcomes: list[Outcome]) -> list[Outcome]:
        for outcome in outcomes:
            if isinstance(outcome, Placed):
                self.scheduler.confirm(outcome.uid)
                self.placement[outcome.uid] = outcome.node
            elif isinstance(outcome, Evicted):
                self.placement.pop(outcome.uid, None)
        return outcomes
