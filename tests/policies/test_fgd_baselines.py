"""The FGD paper's baselines as the FGD simulator (commit 8f3d6417353c5083c6d56617f255fadd8dc306bc) defines
them: ``getBestFitScore`` + ``NormalizeScore``, ``calculateDotProductScore`` (merge, max),
``getPackingScore``, ``GpuClusteringScorePlugin.Score`` and ``RandomScorePlugin`` — scores on small cases
worked out from those functions, and where each one places."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from policies.framework.contract import CycleContext
from policies.plugins.gpushare.bestfit import min_max_normalize
from policies.scheduler import Placed, Scheduler
from schemas.node import NodeSpec
from tests.policies.builders import pod, profile, scheduler


def gpu_node(name: str, cards: int, cpu: int = 32) -> NodeSpec:
    return NodeSpec.model_validate(
        {"name": name, "capacity": {"cpu": cpu, "memory": "128Gi"}, "gpus": {"count": cards, "model": "T4"}}
    )


def cluster(scorer: str, *nodes: NodeSpec) -> Scheduler:
    s = scheduler([], profile("p", score=[(scorer, 1)], filters=["GpuShareFit"]))
    for spec in nodes:
        s.upsert_node(spec)
    return s


def put(
    s: Scheduler, uid: str, node: str, cpu: str = "1", cards: list[int] | None = None, **gpu: Any
) -> None:
    """Account a pod on a node directly (the state a case starts from)."""
    p = pod(uid, cpu=cpu, scheduler_name="p", gpu=gpu or None)
    s.snapshot.assume(s.snapshot.pod_info(p), s.snapshot.row_of(node), gpu_cards=cards)


def scores(s: Scheduler, scorer: str, cpu: str = "1", **gpu: Any) -> dict[str, int]:
    p = pod("probe", cpu=cpu, scheduler_name="p", gpu=gpu or None)
    snapshot = s.snapshot
    ctx = CycleContext(p, snapshot.pod_info(p), snapshot, 0.0)
    plugin = s.profiles.get("p").plugins[scorer]  # type: ignore[union-attr]
    rows = snapshot.live_rows()
    return {snapshot.names[r] or "": int(v) for r, v in zip(rows, plugin.score(ctx, rows), strict=True)}


def place_one(s: Scheduler, uid: str = "new", cpu: str = "1", **gpu: Any) -> Placed:
    s.add_pod(pod(uid, cpu=cpu, scheduler_name="p", gpu=gpu or None), 0.0)
    (outcome,) = s.schedule(0.0)
    assert isinstance(outcome, Placed)
    return outcome


def test_best_fit_prefers_the_node_left_with_least_and_normalises_min_max() -> None:
    s = cluster("GpuBestFit", gpu_node("a", 4), gpu_node("b", 4), gpu_node("c", 8, cpu=64))
    put(s, "x", "a", cpu="16", milli=1000, count=2)
    # a: cpu 16,000 − 1,000 left, gpu 2,000 − 500: 1 − (15,000/128,000/2 + 1,500/8,000/2) → 84 (raw)
    # b: 1 − (31,000/128,000/2 + 3,500/8,000/2) → 66; c: 1 − (63,000/128,000/2 + 7,500/8,000/2) → 28.
    assert scores(s, "GpuBestFit", milli=500) == {"a": 100, "b": (66 - 28) * 100 // (84 - 28), "c": 0}
    assert place_one(s, milli=500).node == "a"
    assert min_max_normalize(np.array([5, 5])).tolist() == [0, 0]


def test_dot_product_packs_where_free_resources_align_least_with_the_pod() -> None:
    s = cluster("GpuDotProduct", gpu_node("a", 4), gpu_node("b", 8, cpu=64))
    # a: node (32,000/128,000, 4,000/8,000) · pod (1,000/128,000, 500/8,000) = 0.25·0.0078125 + 0.5·0.0625
    expected_a = int(100 * (1 - (0.25 * (1000 / 128000) + 0.5 * 0.0625) / 2))
    expected_b = int(100 * (1 - (0.5 * (1000 / 128000) + 1.0 * 0.0625) / 2))
    assert scores(s, "GpuDotProduct", milli=500) == {"a": expected_a, "b": expected_b}
    assert place_one(s, milli=500).node == "a"


PACKING_CASES = [
    pytest.param(
        {"milli": 300},
        {"shared": 96, "used": 49, "idle": 29},
        id="A share scores 100 − 40/10 on a shared card with 400 free, 49 on a free card of a used node, "
        "33 − 4 on an idle 4-card node.",
    ),
    pytest.param(
        {"milli": 1000, "count": 2},
        {"shared": 48, "used": 48, "idle": 29},
        id="Two whole cards score 50 − 2 on used nodes and 33 − 4 on an idle node.",
    ),
]


@pytest.mark.parametrize(("gpu", "expected"), PACKING_CASES)
def test_gpu_packing_orders_shared_cards_then_used_nodes_then_idle_ones(
    gpu: dict[str, int], expected: dict[str, int]
) -> None:
    s = cluster("GpuPacking", gpu_node("shared", 4), gpu_node("used", 4), gpu_node("idle", 4))
    put(s, "x", "shared", milli=600, cards=[1])
    put(s, "y", "used", milli=1000, count=1, cards=[0])
    assert scores(s, "GpuPacking", **gpu) == expected


def test_gpu_packing_puts_a_share_on_the_shared_card() -> None:
    s = cluster("GpuPacking", gpu_node("shared", 4), gpu_node("idle", 4))
    put(s, "x", "shared", milli=600, cards=[1])
    placed = place_one(s, milli=300)
    assert (placed.node, placed.gpu_cards) == ("shared", (1,))


def test_gpu_clustering_groups_pods_of_the_same_shape() -> None:
    s = cluster(
        "GpuClustering",
        gpu_node("shares", 4),
        gpu_node("mixed", 4),
        gpu_node("idle", 4),
        gpu_node("whole", 4),
    )
    put(s, "a", "shares", milli=500)
    put(s, "b", "mixed", milli=500)
    put(s, "c", "mixed", milli=1000, count=1)
    put(s, "d", "whole", milli=1000, count=2)
    # base = 25 × (8,000 − free) / 8,000: shares 3,500 free → 14; mixed 2,500 → 17; idle 4,000 → 12;
    # whole 2,000 → 18.
    assert scores(s, "GpuClustering", milli=200) == {
        "shares": 14 + 75,
        "mixed": 17 + 50,
        "idle": 12 + 25,
        "whole": 18,
    }
    assert scores(s, "GpuClustering") == {"shares": 0, "mixed": 0, "idle": 0, "whole": 0}
    assert place_one(s, milli=200).node == "shares"


def test_random_fit_is_one_node_chosen_by_the_pods_uid() -> None:
    def run() -> list[tuple[str, tuple[int, ...]]]:
        s = cluster("GpuRandomFit", *(gpu_node(f"n{i}", 4) for i in range(6)))
        out = []
        for i in range(12):
            placed = place_one(s, uid=f"p{i}", milli=250)
            out.append((placed.node, placed.gpu_cards))
        return out

    first = run()
    assert run() == first
    assert len({node for node, _ in first}) > 1
    s = cluster("GpuRandomFit", *(gpu_node(f"n{i}", 4) for i in range(6)))
    assert sorted(scores(s, "GpuRandomFit", milli=250).values()) == [0, 0, 0, 0, 0, 100]


# ------------------------------------------------------------------------------ the gpu-share-plus profile


def builtin_cluster(name: str, *nodes: NodeSpec) -> Scheduler:
    from policies.framework.profile import BUILTIN_PROFILES

    s = scheduler([], BUILTIN_PROFILES[name])
    for spec in nodes:
        s.upsert_node(spec)
    return s


@pytest.mark.parametrize("uid", [f"whole-{i}" for i in range(6)])
def test_gpu_share_plus_breaks_fgd_ties_towards_the_fuller_node(uid: str) -> None:
    """Two idle 4-card nodes, one with 24 of its 32 cpus taken: a one-card pod leaves F unchanged on both
    (FGD 50 each), and GpuBestFit sends it to the fuller node, whatever its uid."""
    s = builtin_cluster("gpu-share-plus", gpu_node("a", 4), gpu_node("b", 4))
    put(s, "busy", "b", cpu="24")
    s.add_pod(pod(uid, cpu="1", scheduler_name="gpu-share-plus", gpu={"milli": 1000}), 0.0)
    placed = [o for o in s.schedule(0.0) if isinstance(o, Placed)]
    assert [(o.uid, o.node) for o in placed] == [(uid, "b")]


def test_gpu_share_plus_places_a_share_on_the_card_fgd_chose() -> None:
    """On a node with cards of 600 and 1000 milli free, and 500 shares the only pods seen, a 500 share takes
    the free card: both cards keep room for another 500 (F stays 0), where the 600 card would leave 100
    that no such pod can use — the card FGD chose, which placement assumes."""
    s = builtin_cluster("gpu-share-plus", gpu_node("a", 2))
    put(s, "first", "a", cards=[0], milli=400)
    s.add_pod(pod("share", cpu="1", scheduler_name="gpu-share-plus", gpu={"milli": 500}), 0.0)
    placed = [o for o in s.schedule(0.0) if isinstance(o, Placed)]
    assert [(o.uid, o.node, o.gpu_cards) for o in placed] == [("share", "a", (1,))]
