"""Coscheduling (gang scheduling, after scheduler-plugins): a pod group is placed all together
or not at all.

The plugin is a thin adapter over `Manager`, which holds the groups' state:
- QueueSort keeps a group's pods together: priority, then the group's first arrival, then its name.
- PreFilter rejects at once a pod whose group has fewer known pods than ``min_available``, or is backing off.
- PostFilter, when a member fits nowhere, releases every member waiting in Permit, so a group never holds
  resources it cannot use (two half-placed groups cannot deadlock).
- Permit holds each member (reserved) until ``min_available`` are reserved, then lets all of them bind; on
  timeout (the group's ``timeout_s``) every waiting member is unreserved and the group backs off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from policies.framework.contract import CycleContext, PostFilterResult
from policies.framework.profile import Handle
from policies.framework.status import SUCCESS, Code, Status
from policies.plugins.noderesources.common import StrictArgs
from schemas.pod import PodRequest

__all__ = ["NAME", "Args", "Coscheduling", "Manager", "new"]

NAME = "Coscheduling"


class Args(StrictArgs):
    backoff_seconds: Annotated[float, Field(ge=0.0, le=3600.0, alias="podGroupBackoffSeconds")] = 10.0


@dataclass(slots=True)
class Group:
    name: str
    min_available: int
    timeout_s: float
    first_arrival: int
    members: set[str] = field(default_factory=set)
    placed: set[str] = field(default_factory=set)
    backoff_until: float = 0.0


class Manager:
    """The state of every pod group this profile has seen (kube's PodGroupManager)."""

    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self.group_of: dict[str, str] = {}

    def add(self, pod: PodRequest, arrival: int) -> None:
        if pod.pod_group is None:
            return
        spec = pod.pod_group
        group = self.groups.get(spec.name)
        if group is None:
            group = self.groups[spec.name] = Group(spec.name, spec.min_available, spec.timeout_s, arrival)
        group.members.add(pod.uid)
        self.group_of[pod.uid] = spec.name

    def remove(self, uid: str) -> None:
        name = self.group_of.pop(uid, None)
        group = self.groups.get(name) if name else None
        if group is None:
            return
        group.members.discard(uid)
        group.placed.discard(uid)
        if not group.members:
            del self.groups[group.name]

    def group(self, pod: PodRequest) -> Group | None:
        return self.groups.get(pod.pod_group.name) if pod.pod_group is not None else None


class Coscheduling:
    name = NAME

    def __init__(self, args: Args, handle: Handle) -> None:
        self.backoff_s = args.backoff_seconds
        self.handle = handle
        self.manager = Manager()

    # Checkpoints (`policies.framework.contract.CheckpointedPlugin`): the groups are state no event replays.
    def checkpoint_state(self) -> dict[str, Any]:
        groups = [
            [
                g.name,
                g.min_available,
                g.timeout_s,
                g.first_arrival,
                sorted(g.members),
                sorted(g.placed),
                g.backoff_until,
            ]
            for g in self.manager.groups.values()
        ]
        return {"groups": groups, "group_of": dict(self.manager.group_of)}

    def restore_state(self, state: dict[str, Any]) -> None:
        manager = self.manager = Manager()
        for name, minimum, timeout, first, members, placed, backoff in state["groups"]:
            manager.groups[name] = Group(name, minimum, timeout, first, set(members), set(placed), backoff)
        manager.group_of = dict(state["group_of"])

    # Queue events (called by the scheduler for every plugin that has them).
    def on_pod_added(self, pod: PodRequest, arrival: int) -> None:
        self.manager.add(pod, arrival)

    def on_pod_deleted(self, uid: str) -> None:
        self.manager.remove(uid)

    def sort_key(self, pod: PodRequest, arrival: int) -> tuple[Any, ...]:
        group = self.manager.group(pod)
        if group is None:
            return (-pod.priority, arrival, pod.uid, arrival)
        return (-pod.priority, group.first_arrival, group.name, arrival)

    def pre_filter(self, ctx: CycleContext) -> Status:
        group = self.manager.group(ctx.pod)
        if group is None:
            return SUCCESS
        if ctx.now < group.backoff_until:
            return Status.unschedulable(
                f"pod group {group.name} is backing off", plugin=NAME, retry_at=group.backoff_until
            )
        if len(group.members) < group.min_available:
            known = len(group.members)
            reason = f"pod group {group.name} has {known} of min_available {group.min_available} pods"
            return Status.unschedulable(reason, plugin=NAME)
        return SUCCESS

    def post_filter(self, ctx: CycleContext, rejected: Mapping[int, str]) -> PostFilterResult:
        group = self.manager.group(ctx.pod)
        if group is None:
            return PostFilterResult(Status(Code.SUCCESS))
        released = self._reject_group(
            group, ctx.now, f"pod group {group.name} cannot be placed: member {ctx.pod.uid} fits no node"
        )
        note = f"(released {released} waiting members of pod group {group.name})" if released else ""
        return PostFilterResult(Status.unschedulable(note, plugin=NAME) if note else Status(Code.SUCCESS))

    def reserve(self, ctx: CycleContext, node: int) -> Status:
        return SUCCESS

    def unreserve(self, ctx: CycleContext, node: int) -> None:
        group = self.manager.group(ctx.pod)
        if group is not None:
            self._reject_group(
                group,
                ctx.now,
                f"pod group {group.name} released: "
                f"{ctx.state.get('unreserve.reason', 'a member was unreserved')}",
            )

    def permit(self, ctx: CycleContext, node: int) -> tuple[Status, float]:
        group = self.manager.group(ctx.pod)
        if group is None or group.min_available <= 1:
            if group is not None:
                group.placed.add(ctx.pod.uid)
            return SUCCESS, 0.0
        waiting = self._waiting_members(group)
        if len(waiting) + len(group.placed) + 1 >= group.min_available:
            group.placed.update(waiting)
            group.placed.add(ctx.pod.uid)
            ctx.state["permit.allow"] = waiting
            return SUCCESS, 0.0
        return Status.wait(f"waiting for pod group {group.name}", plugin=NAME), group.timeout_s

    def _waiting_members(self, group: Group) -> list[str]:
        waiting = self.handle.waiting
        if waiting is None:
            return []
        return [uid for uid in waiting.waiting_uids() if self.manager.group_of.get(uid) == group.name]

    def _reject_group(self, group: Group, now: float, reason: str) -> int:
        group.backoff_until = now + self.backoff_s
        waiting = self.handle.waiting
        members = self._waiting_members(group)
        if waiting is not None:
            for uid in members:
                waiting.reject_waiting(uid, reason)
        return len(members)


def new(args: Args | None, handle: Handle) -> Coscheduling:
    return Coscheduling(args or Args(), handle)
