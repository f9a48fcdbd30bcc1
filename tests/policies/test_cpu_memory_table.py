"""NodeResourcesFit's and BalancedAllocation's per-row table (`CpuMemoryTable`) decides exactly as their
general paths, over most of the rows or a few, while pods come and go and nodes change under it (retainted,
cordoned, removed, added, one without allocatable memory); and a cycle that scores whole rows decides as one
that scores the candidates."""

from __future__ import annotations

import random
from typing import Any

import pytest

from policies.scheduler import Evicted, Placed, Scheduler, Unschedulable
from schemas.node import NodeSpec, Taint
from schemas.pod import PodRequest, Toleration
from tests.policies.builders import node, pod, scheduler

GIB = 2**30
SOFT = Taint(key="spot", value="yes", effect="PreferNoSchedule")
SOFT_TOO = Taint(key="old-kernel", value="", effect="PreferNoSchedule")
HARD = Taint(key="dedicated", value="db", effect="NoSchedule")


def a_node(rng: random.Random, i: int) -> Any:
    taints = [t for t in (SOFT, SOFT_TOO, HARD) if rng.random() < 0.25]
    residents = [
        pod(f"n{i}-r{j}", cpu=f"{rng.randint(0, 3000)}m", memory=rng.randint(0, 6 * GIB))
        for j in range(rng.randint(0, 3))
    ]
    return node(
        f"node-{i:03d}",
        cpu=str(rng.choice((4, 8, 16))),
        memory=f"{rng.choice((16, 32, 64))}Gi",
        labels={"pool": rng.choice(("a", "b", "c", "d"))},
        taints=[t.model_dump() for t in taints],
        pod_requests=residents,
    )


def a_pod(rng: random.Random, k: int) -> PodRequest:
    fields: dict[str, Any] = {"priority": rng.randint(0, 3)}
    if rng.random() < 0.3:
        fields["node_selector"] = {"pool": rng.choice(("a", "b"))}  # fewer than half the rows: per node
    if rng.random() < 0.3:
        fields["tolerations"] = [Toleration(key="spot", operator="Exists").model_dump()]
    cpu = None if rng.random() < 0.2 else f"{rng.randint(1, 4000)}m"
    memory = None if rng.random() < 0.2 else rng.randint(1, 8 * GIB)
    return pod(f"p{k}", cpu=cpu, memory=memory, **fields)


def churn(seed: int) -> tuple[list[Any], list[tuple[str, Any]]]:
    """Nodes, and a seeded stream of pods arriving and leaving, nodes retainted, cordoned, removed and
    added, and one without allocatable memory (the table's general path)."""
    rng = random.Random(seed)
    nodes = [a_node(rng, i) for i in range(30)]
    events: list[tuple[str, Any]] = []
    placed: list[str] = []
    for k in range(160):
        roll = rng.random()
        if roll < 0.7:
            events.append(("pod", a_pod(rng, k)))
            placed.append(f"p{k}")
        elif roll < 0.8 and placed:
            events.append(("delete", placed.pop(rng.randrange(len(placed)))))
        elif roll < 0.9:
            i = rng.randrange(len(nodes) + 2)
            taints = [t for t in (SOFT, SOFT_TOO) if rng.random() < 0.5]
            memory = 0 if k == 100 else rng.choice((16, 32)) * GIB
            spec = NodeSpec(name=f"node-{i:03d}", allocatable={"cpu": 8000, "memory": memory}, taints=taints)
            events.append(("node", spec))
        else:
            events.append(("remove", f"node-{rng.randrange(len(nodes)):03d}"))
    return nodes, events


def outcomes(s: Scheduler, events: list[tuple[str, Any]]) -> list[tuple[Any, ...]]:
    seen: list[tuple[Any, ...]] = []
    for kind, what in events:
        if kind == "pod":
            s.add_pod(what, 0.0)
            found = s.schedule(0.0)
        elif kind == "delete":
            found = s.delete_pod(what, 0.0)
        elif kind == "node":
            s.upsert_node(what)
            found = []
        else:
            found = s.remove_node(what, 0.0)
        for o in found:
            if isinstance(o, Placed):
                seen.append(("placed", o.uid, o.node, o.score, tuple(sorted(o.plugin_scores.items()))))
            elif isinstance(o, Unschedulable):
                seen.append(("unschedulable", o.uid, o.message))
            elif isinstance(o, Evicted):
                seen.append(("evicted", o.uid, o.node))
    return seen


def plain_paths(s: Scheduler) -> Scheduler:
    """The same scheduler with Fit's and BalancedAllocation's cpu-and-memory shortcuts turned off."""
    profile = s.profiles.get("default")
    assert profile is not None
    profile.plugin("NodeResourcesFit").cpu_memory_weights = None
    profile.plugin("NodeResourcesBalancedAllocation").cpu_memory = False
    return s


@pytest.mark.parametrize(
    "seed",
    [1, 2, 3, 4, 5],
    ids=lambda seed: f"churning cluster {seed} is decided the same with the cpu and memory table or without",
)
def test_the_cpu_and_memory_table_decides_as_the_general_paths(seed):
    nodes, events = churn(seed)
    with_table = outcomes(scheduler(nodes), events)
    assert with_table == outcomes(plain_paths(scheduler(nodes)), events)
    assert sum(1 for o in with_table if o[0] == "placed") > 50


def candidates_only(s: Scheduler) -> Scheduler:
    """The same scheduler scoring the candidates only, never whole rows (`RowScorePlugin`)."""
    s._score_rows = lambda *args: False  # type: ignore[method-assign]
    return s


@pytest.mark.parametrize(
    "seed",
    [1, 2, 3, 4, 5],
    ids=lambda seed: f"churning cluster {seed} is decided the same scored over whole rows or over candidates",
)
def test_scoring_whole_rows_decides_as_scoring_the_candidates(seed):
    nodes, events = churn(seed)
    s = scheduler(nodes)
    by_rows = 0
    score_rows = s._score_rows

    def counted(*args: Any) -> bool:
        nonlocal by_rows
        placed: bool = score_rows(*args)
        by_rows += placed
        return placed

    s._score_rows = counted  # type: ignore[method-assign]
    assert outcomes(s, events) == outcomes(candidates_only(scheduler(nodes)), events)
    assert by_rows > 15
