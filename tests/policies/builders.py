"""Builders shared by the policy tests: nodes, pods, schedulers, profiles, in a line each."""

from __future__ import annotations

from typing import Any

from policies.explain import NodeState, build_scheduler
from policies.framework.profile import ProfileSet, parse_profile
from policies.scheduler import Placed, Scheduler, Unschedulable
from schemas.pod import PodRequest

GI = 2**30


def node(name: str, cpu: Any = "4", memory: Any = "8Gi", pods: int = 110, **fields: Any) -> NodeState:
    capacity = {"cpu": cpu, "memory": memory, "pods": pods, **fields.pop("extra", {})}
    return NodeState.model_validate({"name": name, "capacity": capacity, **fields})


def pod(uid: str, cpu: Any = None, memory: Any = None, **fields: Any) -> PodRequest:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    if requests and "containers" not in fields:
        fields["requests"] = {**requests, **fields.pop("requests", {})}
    return PodRequest.model_validate({"uid": uid, **fields})


def profile(
    name: str = "test",
    *,
    score: list[tuple[str, int]] | None = None,
    filters: list[str] | None = None,
    config: dict[str, Any] | None = None,
    **plugins: Any,
) -> dict[str, Any]:
    """A profile document; `score` replaces the default score plugins, `filters` adds filter plugins."""
    document: dict[str, Any] = {"schedulerName": name, "plugins": dict(plugins)}
    if score is not None:
        document["plugins"]["score"] = {
            "disabled": [{"name": "*"}],
            "enabled": [{"name": n, "weight": w} for n, w in score],
        }
    if filters:
        document["plugins"]["filter"] = {"enabled": [{"name": n} for n in filters]}
    if config:
        document["pluginConfig"] = [{"name": n, "args": a} for n, a in config.items()]
    return document


def scheduler(nodes: list[NodeState], *documents: dict[str, Any]) -> Scheduler:
    profiles = ProfileSet(parse_profile(d) for d in documents) if documents else None
    return build_scheduler(nodes, profiles)


def place(s: Scheduler, *pods: PodRequest, now: float = 0.0) -> dict[str, str | None]:
    """Queue and schedule the pods; uid → node (None when unschedulable)."""
    for p in pods:
        s.add_pod(p, now)
    result: dict[str, str | None] = {}
    for outcome in s.schedule(now):
        if isinstance(outcome, Placed):
            result[outcome.uid] = outcome.node
        elif isinstance(outcome, Unschedulable):
            result[outcome.uid] = None
    return result
