"""GPU pods in queue order: GpuDemandSort's order, and ``algorithm: orders`` (the gpu-share-batch profile)
placing a window of queued pods in the best of a few orders."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from policies.batch.orders import candidate_orders, plan_orders
from policies.framework.contract import CycleContext
from policies.framework.profile import BUILTIN_PROFILES, parse_profile
from policies.plugins.queuesort.gpudemand import GpuDemandSort
from policies.scheduler import Scheduler
from schemas.pod import PodRequest
from tests.policies.builders import node, place, pod, scheduler


def gpu_pod(
    uid: str, milli: int | None = None, count: int = 1, priority: int = 0, **fields: Any
) -> PodRequest:
    """A pod asking for `count` whole cards, or a share of `milli` of one card; no GPU when both are None."""
    gpu = None if milli is None and count == 0 else {"milli": milli or 1000, "count": count}
    return pod(uid, cpu="1", priority=priority, gpu=gpu, **fields)


def gpu_node(name: str, cards: int) -> Any:
    return node(name, cpu="32", memory="64Gi", gpus={"count": cards})


def batch_profile(size: int = 16) -> dict[str, Any]:
    document = copy.deepcopy(BUILTIN_PROFILES["gpu-share-batch"])
    document["batch_size"] = size
    return document


# --- GpuDemandSort ---------------------------------------------------------------------------------------

ORDER_CASES = [
    pytest.param(
        [gpu_pod("share-200", 200), gpu_pod("one", 1000), gpu_pod("eight", count=8), gpu_pod("two", count=2)],
        ["eight", "two", "one", "share-200"],
        id="Whole-card pods go first by card count, then shares.",
    ),
    pytest.param(
        [gpu_pod("share-300", 300), gpu_pod("cpu", count=0), gpu_pod("share-810", 810)],
        ["share-810", "share-300", "cpu"],
        id="Shares go by their milli of a card, largest first, and pods without GPUs last.",
    ),
    pytest.param(
        [gpu_pod("first", 500), gpu_pod("second", 500), gpu_pod("third", 500)],
        ["first", "second", "third"],
        id="Equal requests keep their arrival order.",
    ),
    pytest.param(
        [gpu_pod("big", count=4), gpu_pod("urgent-share", 100, priority=10)],
        ["urgent-share", "big"],
        id="A higher priority comes before a larger request, as in PrioritySort.",
    ),
]


@pytest.mark.parametrize(("arrivals", "expected"), ORDER_CASES)
def test_gpu_demand_sort_puts_larger_gpu_requests_first(
    arrivals: list[PodRequest], expected: list[str]
) -> None:
    sort = GpuDemandSort()
    ordered = sorted(range(len(arrivals)), key=lambda i: sort.sort_key(arrivals[i], i))
    assert [arrivals[i].uid for i in ordered] == expected


def test_a_profile_with_gpu_demand_sort_schedules_its_queue_in_that_order() -> None:
    document = copy.deepcopy(BUILTIN_PROFILES["gpu-share"])
    document["plugins"]["queueSort"] = {"disabled": [{"name": "*"}], "enabled": [{"name": "GpuDemandSort"}]}
    s = scheduler([gpu_node("n0", 2)], document)
    # One node with two cards: in arrival order the share would break a card and the two-card pod fail.
    placed = place(
        s,
        gpu_pod("share", 300, scheduler_name="gpu-share"),
        gpu_pod("pair", count=2, scheduler_name="gpu-share"),
    )
    assert placed == {"pair": "n0", "share": None}


# --- algorithm: orders -----------------------------------------------------------------------------------

CANDIDATE_CASES = [
    pytest.param(
        [gpu_pod("a", 300), gpu_pod("b", count=2), gpu_pod("c", 500), gpu_pod("d", 1000)],
        [[0, 1, 2, 3], [1, 3, 0, 2], [1, 3, 2, 0]],
        id="Queue order, whole cards first, then every GPU pod largest first.",
    ),
    pytest.param(
        [gpu_pod("a", 300), gpu_pod("b", 500)],
        [[0, 1], [1, 0]],
        id="Shares only: whole cards first is the queue order and is not tried twice.",
    ),
    pytest.param(
        [gpu_pod("a", count=2), gpu_pod("b", 500)],
        [[0, 1]],
        id="A batch already largest first has one candidate.",
    ),
]


@pytest.mark.parametrize(("pods", "expected"), CANDIDATE_CASES)
def test_the_candidate_orders(pods: list[PodRequest], expected: list[list[int]]) -> None:
    assert candidate_orders(pods) == expected


def test_a_window_placed_largest_first_when_the_queue_order_would_leave_a_pod_out() -> None:
    s = scheduler([gpu_node("n0", 2)], batch_profile(size=2))
    placed = place(
        s,
        gpu_pod("share", 300, scheduler_name="gpu-share-batch"),
        gpu_pod("pair", count=2, scheduler_name="gpu-share-batch"),
    )
    assert placed == {"pair": "n0", "share": None}
    assert s.snapshot.pods["pair"].gpu_cards == (0, 1)


def test_a_window_that_every_order_places_whole_is_placed_whole() -> None:
    s = scheduler([gpu_node("n0", 2), gpu_node("n1", 2)], batch_profile(size=2))
    placed = place(
        s,
        gpu_pod("share", 300, scheduler_name="gpu-share-batch"),
        gpu_pod("pair", count=2, scheduler_name="gpu-share-batch"),
    )
    assert placed["pair"] is not None and placed["share"] is not None
    assert placed["pair"] != placed["share"]


def trial_scheduler() -> tuple[Scheduler, list[CycleContext]]:
    document = batch_profile(size=8)
    s = scheduler([gpu_node("n0", 2), gpu_node("n1", 4)], document)
    s.add_pod(gpu_pod("held", 500, scheduler_name="gpu-share-batch"), 0.0)
    s.schedule(0.0)
    s.tick(10.0)  # the one-pod batch waits out its wait
    pods = [
        gpu_pod(f"p{i}", milli, scheduler_name="gpu-share-batch") for i, milli in enumerate((300, 700, 1000))
    ]
    contexts = [CycleContext(p, s.snapshot.pod_info(p), s.snapshot, 10.0) for p in pods]
    return s, contexts


def test_the_trials_leave_the_snapshot_as_it_was_and_the_chosen_cards_in_each_pod_s_state() -> None:
    s, contexts = trial_scheduler()
    assert "held" in s.snapshot.pods
    free_before = s.snapshot.gpu_free.copy()
    requested_before = s.snapshot.requested.copy()
    plan = plan_orders(parse_profile(batch_profile(size=8)), s.snapshot, contexts)
    assert np.array_equal(s.snapshot.gpu_free, free_before)
    assert np.array_equal(s.snapshot.requested, requested_before)
    assert set(s.snapshot.pods) == {"held"}
    assert (plan.rows >= 0).all()
    assert plan.tried == 3  # as queued, the whole card first, largest first
    for ctx, row in zip(contexts, plan.rows.tolist(), strict=True):
        assert row in ctx.state["gpu/cards"]
