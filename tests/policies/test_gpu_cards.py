"""Per-card GPU accounting: card choice, the snapshot's per-card arrays, the GpuShareFit filter, placement."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from policies.framework.contract import CycleContext
from policies.gpu.cards import CARDS_STATE, RULE_STATE, card_fit, choose_cards, planned_cards
from policies.plugins.gpushare.fit import (
    REASON_MODEL,
    REASON_NO_CARDS,
    REASON_SHARE,
    REASON_WHOLE,
    GpuShareFit,
)
from policies.scheduler import Placed, Unschedulable
from policies.snapshot import Snapshot
from schemas.exceptions import InvalidInput
from schemas.gpu import GpuCards, GpuRequest
from schemas.node import NodeSpec
from schemas.pod import PodRequest
from tests.policies.builders import node, pod, profile, scheduler


def gpu(milli: int = 1000, count: int = 1, models: list[str] | None = None) -> GpuRequest:
    return GpuRequest(milli=milli, count=count, models=models or [])


def gpu_node(name: str, cards: int, model: str = "V100M16", cpu: str = "64") -> NodeSpec:
    return NodeSpec(
        name=name, capacity={"cpu": cpu, "memory": "256Gi"}, gpus=GpuCards(count=cards, model=model)
    )


def gpu_pod(uid: str, milli: int = 1000, count: int = 1, models: list[str] | None = None) -> PodRequest:
    return PodRequest(uid=uid, requests={"cpu": "1"}, gpu=gpu(milli, count, models))


def free(*cards: int) -> np.ndarray[Any, Any]:
    return np.array(cards, dtype=np.int64)


def snapshot_with(*specs: NodeSpec) -> Snapshot:
    snapshot = Snapshot()
    for spec in specs:
        snapshot.upsert_node(spec)
    return snapshot


def assume(snapshot: Snapshot, p: PodRequest, on: str, **kwargs: Any) -> tuple[int, ...]:
    return snapshot.assume(snapshot.pod_info(p), snapshot.row_of(on), **kwargs).gpu_cards


# --------------------------------------------------------------------------------------- choose_cards


@pytest.mark.parametrize(
    ("case", "row", "request_", "rule", "expected"),
    [
        (
            "a share takes the fitting card with least free milli",
            free(1000, 400, 700),
            gpu(300),
            "best-fit",
            (1,),
        ),
        ("best-fit ties go to the lowest index", free(500, 1000, 500), gpu(500), "best-fit", (0,)),
        ("a share never takes a card with too little left", free(200, 100, 1000), gpu(300), "best-fit", (2,)),
        ("worst-fit takes the card with most free milli", free(400, 1000, 700), gpu(300), "worst-fit", (1,)),
        ("first-fit takes the lowest fitting index", free(100, 700, 1000), gpu(300), "first-fit", (1,)),
        (
            "whole cards take the lowest untouched cards",
            free(1000, 600, 1000, 1000),
            gpu(count=2),
            "best-fit",
            (0, 2),
        ),
        ("a whole card never lands on a partly used card", free(999, 1000), gpu(), "best-fit", (1,)),
        ("too few untouched cards fit nothing", free(1000, 500, 1000), gpu(count=3), "best-fit", None),
        ("cards the node lacks (-1) never fit", free(1000, -1, -1), gpu(count=2), "best-fit", None),
        (
            "a share that fits no single card is refused even when the sum would hold it",
            free(300, 300),
            gpu(500),
            "best-fit",
            None,
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_choose_cards_picks_cards_by_rule(case, row, request_, rule, expected):
    assert choose_cards(row, request_, rule) == expected


def test_choose_cards_refuses_an_unknown_rule():
    with pytest.raises(ValueError, match="unknown card rule"):
        choose_cards(free(1000), gpu(), "random")


def test_card_fit_answers_every_row_at_once():
    rows = np.array([[1000, 1000], [400, 1000], [400, 300], [-1, -1]], dtype=np.int64)
    assert card_fit(rows, gpu(count=2)).tolist() == [True, False, False, False]
    assert card_fit(rows, gpu(350)).tolist() == [True, True, True, False]


def test_planned_cards_prefers_a_plugins_choice_then_the_cycles_rule():
    row = free(1000, 400)
    assert planned_cards({CARDS_STATE: {3: (0,)}}, 3, row, gpu(300)) == (0,)
    assert planned_cards({RULE_STATE: "worst-fit"}, 3, row, gpu(300)) == (0,)
    assert planned_cards({}, 3, row, gpu(300)) is None
    assert planned_cards({CARDS_STATE: {3: (0,)}}, 3, row, None) is None


# --------------------------------------------------------------------------------------- the snapshot


def test_assume_and_forget_keep_each_card_in_step():
    snapshot = snapshot_with(gpu_node("n", 4))
    row = snapshot.row_of("n")
    assert snapshot.gpu_free[row].tolist() == [1000] * 4
    assert assume(snapshot, gpu_pod("share", 300), "n") == (0,)
    assert assume(snapshot, gpu_pod("share2", 600), "n") == (0,)  # best fit: the card with 700 left
    assert assume(snapshot, gpu_pod("whole", count=2), "n") == (1, 2)
    assert snapshot.gpu_free[row].tolist() == [100, 0, 0, 1000]
    snapshot.forget("share")
    assert snapshot.gpu_free[row].tolist() == [400, 0, 0, 1000]
    snapshot.forget("whole")
    snapshot.forget("share2")
    assert snapshot.gpu_free[row].tolist() == [1000] * 4


def test_bind_keeps_the_cards_and_delete_releases_them():
    snapshot = snapshot_with(gpu_node("n", 2))
    assume(snapshot, gpu_pod("p", 250), "n")
    snapshot.bind("p")
    assert snapshot.pods["p"].bound and snapshot.pods["p"].gpu_cards == (0,)
    assert snapshot.gpu_free[snapshot.row_of("n")].tolist() == [750, 1000]
    snapshot.forget("p")  # what a PodDeleted does
    assert snapshot.gpu_free[snapshot.row_of("n")].tolist() == [1000, 1000]


def test_nodes_with_different_card_counts_share_one_array_padded_with_no_card():
    snapshot = snapshot_with(gpu_node("two", 2), gpu_node("eight", 8, "A100"), NodeSpec(name="cpu"))
    assert snapshot.gpu_free.shape[1] == 8
    assert snapshot.gpu_free[snapshot.row_of("two")].tolist() == [1000, 1000] + [-1] * 6
    assert snapshot.gpu_free[snapshot.row_of("cpu")].tolist() == [-1] * 8
    assert snapshot.gpu_cards[[0, 1, 2]].tolist() == [2, 8, 0]
    assert snapshot.gpu_model[[0, 1, 2]].tolist() == [0, 1, -1]
    assert snapshot.gpu_model_vocab == {"V100M16": 0, "A100": 1}


def test_an_updated_node_keeps_what_its_pods_hold():
    snapshot = snapshot_with(gpu_node("n", 2))
    assume(snapshot, gpu_pod("p", 300), "n")
    snapshot.upsert_node(gpu_node("n", 4, "T4"))
    row = snapshot.row_of("n")
    assert snapshot.gpu_free[row].tolist() == [700, 1000, 1000, 1000]
    assert snapshot.gpu_model[row] == snapshot.gpu_model_id("T4")


def test_a_removed_node_frees_its_row_of_cards_and_forgets_its_pods():
    snapshot = snapshot_with(gpu_node("n", 2))
    assume(snapshot, gpu_pod("p", 300), "n")
    assert snapshot.remove_node("n") == ["p"]
    assert snapshot.gpu_free[0].tolist() == [-1, -1] and snapshot.gpu_cards[0] == 0
    snapshot.upsert_node(gpu_node("m", 1))  # the freed row is reused whole
    assert snapshot.gpu_free[0].tolist() == [1000, -1]


def test_rows_grow_past_the_initial_size_with_their_cards():
    snapshot = snapshot_with(*(gpu_node(f"n{i:03}", 1 + i % 3) for i in range(100)))
    assert snapshot.gpu_free.shape[0] >= 100
    assert (
        snapshot.gpu_cards[snapshot.row_of("n099")] == 1
        and snapshot.gpu_free[snapshot.row_of("n099"), 0] == 1000
    )


def test_explicit_cards_are_used_as_given_and_checked():
    snapshot = snapshot_with(gpu_node("n", 4))
    assert assume(snapshot, gpu_pod("p", 300), "n", gpu_cards=[3]) == (3,)
    with pytest.raises(InvalidInput, match=r"gpu_cards: .* not 2 distinct cards"):
        assume(snapshot, gpu_pod("q", count=2), "n", gpu_cards=[1, 1])
    with pytest.raises(InvalidInput, match="gpu_cards"):
        assume(snapshot, gpu_pod("r"), "n", gpu_cards=[4])


def test_a_bound_pod_is_booked_even_where_no_card_fits():
    snapshot = snapshot_with(gpu_node("n", 2))
    assume(snapshot, gpu_pod("a", count=2), "n")
    assert assume(snapshot, gpu_pod("b", 500), "n", bound=True) == (0,)
    assert snapshot.gpu_free[snapshot.row_of("n")].tolist() == [-500, 0]
    snapshot.forget("b")
    assert snapshot.gpu_free[snapshot.row_of("n")].tolist() == [0, 0]


def test_a_gpu_pod_on_a_node_without_cards_holds_none():
    snapshot = snapshot_with(NodeSpec(name="cpu", capacity={"cpu": "4"}))
    assert assume(snapshot, gpu_pod("p", 300), "cpu", bound=True) == ()


# ------------------------------------------------------------------------------------------ the filter


def filter_rows(snapshot: Snapshot, p: PodRequest) -> tuple[list[bool], list[list[str]]]:
    ctx = CycleContext(p, snapshot.pod_info(p), snapshot, 0.0)
    plugin = GpuShareFit()
    keep = plugin.filter(ctx, slice(0, snapshot.rows))
    assert keep is not None
    rejected = np.flatnonzero(~keep)
    return keep.tolist(), plugin.reasons(ctx, rejected)


@pytest.mark.parametrize(
    ("case", "request_", "keep", "reasons"),
    [
        (
            "a share fits nodes with one card holding it",
            gpu(300),
            [False, True, True, False],
            [[REASON_NO_CARDS], [REASON_SHARE]],
        ),
        (
            "whole cards fit only where that many cards are untouched",
            gpu(count=2),
            [False, False, True, False],
            [[REASON_NO_CARDS], [REASON_WHOLE], [REASON_WHOLE]],
        ),
        (
            "a model list admits only nodes of those models",
            gpu(100, models=["T4"]),
            [False, False, True, False],
            [[REASON_NO_CARDS], [REASON_MODEL], [REASON_MODEL]],
        ),
        (
            "a model no node has fits nowhere",
            gpu(100, models=["H100"]),
            [False, False, False, False],
            [[REASON_NO_CARDS], [REASON_MODEL], [REASON_MODEL], [REASON_MODEL]],
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_gpu_share_fit_checks_cards_and_models_over_every_node(case, request_, keep, reasons):
    snapshot = snapshot_with(
        NodeSpec(name="cpu", capacity={"cpu": "4"}),
        gpu_node("v100", 2),
        gpu_node("t4", 4, "T4"),
        gpu_node("full", 1),
    )
    assume(snapshot, gpu_pod("x", 600), "v100")
    assume(snapshot, gpu_pod("y", 600), "v100")
    assume(snapshot, gpu_pod("z", 1000), "full")
    assert filter_rows(snapshot, PodRequest(uid="p", gpu=request_)) == (keep, reasons)


def test_gpu_share_fit_lets_pods_without_gpus_pass():
    snapshot = snapshot_with(gpu_node("n", 1))
    p = PodRequest(uid="p")
    assert GpuShareFit().filter(CycleContext(p, snapshot.pod_info(p), snapshot, 0.0), slice(0, 1)) is None


# --------------------------------------------------------------------------------------------- placement

GPU_PROFILE = profile("gpu", filters=["GpuShareFit"])


def placements(s: Any, *pods: PodRequest) -> dict[str, tuple[str, tuple[int, ...]] | None]:
    for p in pods:
        s.add_pod(p, 0.0)
    result: dict[str, tuple[str, tuple[int, ...]] | None] = {p.uid: None for p in pods}
    for outcome in s.schedule(0.0):
        if isinstance(outcome, Placed):
            result[outcome.uid] = (outcome.node, outcome.gpu_cards)
    return result


def gpu_sched(*states: Any) -> Any:
    return scheduler(list(states), GPU_PROFILE)


def test_placement_emits_the_cards_it_assumed_and_never_overbooks_a_card():
    s = gpu_sched(node("a", cpu="64", memory="64Gi", gpus={"count": 2, "model": "T4"}))
    shares = [pod(f"s{i}", "1", scheduler_name="gpu", gpu={"milli": 400}) for i in range(5)]
    result = placements(s, *shares)
    # Two shares of 400 per card fit, a third would straddle: four place, the fifth waits.
    assert sorted(v for v in result.values() if v is not None) == [
        ("a", (0,)),
        ("a", (0,)),
        ("a", (1,)),
        ("a", (1,)),
    ]
    assert list(result.values()).count(None) == 1
    assert s.snapshot.gpu_free[0].tolist() == [200, 200]


def test_whole_card_pods_never_land_on_a_shared_card():
    s = gpu_sched(
        node("a", cpu="64", memory="64Gi", gpus={"count": 2}),
        node("b", cpu="64", memory="64Gi", gpus={"count": 2}),
    )
    first = placements(s, pod("share", "1", scheduler_name="gpu", gpu={"milli": 100}))
    assert first == {"share": ("a", (0,))}
    second = placements(s, pod("whole", "1", scheduler_name="gpu", gpu={"count": 2}))
    assert second == {"whole": ("b", (0, 1))}
    third = placements(s, pod("whole2", "1", scheduler_name="gpu", gpu={"count": 2}))
    assert third == {"whole2": None}


def test_a_model_constraint_steers_the_pod_to_its_model():
    s = gpu_sched(
        node("a", cpu="64", memory="64Gi", gpus={"count": 1, "model": "P100"}),
        node("b", cpu="64", memory="64Gi", gpus={"count": 1, "model": "V100M32"}),
    )
    assert placements(s, pod("p", "1", scheduler_name="gpu", gpu={"milli": 500, "models": ["V100M32"]})) == {
        "p": ("b", (0,))
    }


def test_a_plugins_card_choice_is_what_placement_assumes():
    class PickLastCard:
        name = "PickLastCard"

        def score(self, ctx: CycleContext, nodes: Any) -> Any:
            ctx.state[CARDS_STATE] = {int(row): (int(ctx.snapshot.gpu_cards[row]) - 1,) for row in nodes}
            return np.zeros(len(nodes), dtype=np.int64)

    s = gpu_sched(node("a", cpu="64", memory="64Gi", gpus={"count": 3}))
    s.profiles.get("gpu").score.append((PickLastCard(), 1))
    assert placements(s, pod("p", "1", scheduler_name="gpu", gpu={"milli": 100})) == {"p": ("a", (2,))}


def openb_like_replay() -> list[tuple[str, str, tuple[int, ...]]]:
    rng = np.random.default_rng(7)
    states = [
        node(f"n{i}", cpu="32", memory="64Gi", gpus={"count": int(rng.choice([1, 2, 4, 8]))})
        for i in range(12)
    ]
    s = gpu_sched(*states)
    pods = []
    for i in range(120):
        kind = rng.integers(3)
        request = {"milli": int(rng.integers(50, 1000))} if kind == 0 else {"count": int(rng.choice([1, 2]))}
        pods.append(pod(f"p{i:03}", "1", scheduler_name="gpu", gpu=request))
    placed = placements(s, *pods)
    for uid in sorted(placed)[::3]:  # deletions free cards for a second wave
        s.delete_pod(uid, 1.0)
    placed2 = placements(
        s, *(pod(f"q{i:03}", "1", scheduler_name="gpu", gpu={"milli": 300}) for i in range(40))
    )
    rows = [(uid, *where) for uid, where in {**placed, **placed2}.items() if where is not None]
    assert (s.snapshot.gpu_free[: s.snapshot.rows] >= -1).all()  # never overbooked
    return sorted(rows)


def test_offline_replay_is_deterministic():
    assert openb_like_replay() == openb_like_replay()


GPU_CASES = [
    (
        "default",
        {"milli": 250},
        {},
        "refused: profile default does not place GPU cards (it has no GpuShareFit filter): the pod asks for "
        "a share of a GPU card (250 milli) and requests 0 nvidia.com/gpu; use a profile with GpuShareFit, "
        "such as gpu-share, or request whole nvidia.com/gpu",
        "a share of a card sent to the default profile is refused, naming what would place it",
    ),
    (
        "default",
        {"count": 2},
        {"nvidia.com/gpu": 1},
        "refused: profile default does not place GPU cards (it has no GpuShareFit filter): the pod asks for "
        "2 GPU card(s) and requests 1 nvidia.com/gpu; use a profile with GpuShareFit, such as gpu-share, or "
        "request whole nvidia.com/gpu",
        "whole cards beyond the nvidia.com/gpu requested are refused by the default profile",
    ),
    (
        "default",
        {"count": 2},
        {"nvidia.com/gpu": 2},
        "placed",
        "whole cards requested as nvidia.com/gpu place",
    ),
    ("gpu", {"milli": 250}, {}, "placed", "a profile with GpuShareFit places a share of a card"),
]


@pytest.mark.parametrize(
    ("profile_name", "gpu_request", "extra", "expected"),
    [case[:4] for case in GPU_CASES],
    ids=[case[4] for case in GPU_CASES],
)
def test_profiles_without_card_accounting_refuse_gpus_they_would_not_count(
    profile_name, gpu_request, extra, expected
):
    s = scheduler(
        [node("a", cpu="64", memory="64Gi", gpus={"count": 2, "model": "T4"}, extra={"nvidia.com/gpu": 2})],
        profile("default"),
        GPU_PROFILE,
    )
    p = pod("p", "1", scheduler_name=profile_name, gpu=gpu_request, requests={"cpu": "1", **extra})
    s.add_pod(p, 0.0)
    outcomes = s.schedule(0.0)
    found = [f"refused: {o.message}" if isinstance(o, Unschedulable) else "placed" for o in outcomes]
    assert found == [expected]
    if expected != "placed":
        assert s.explain(p).message == expected.removeprefix("refused: ")


def test_a_batch_profile_without_card_accounting_refuses_a_share_instead_of_planning_it():
    batch = {"schedulerName": "batch", "mode": "batch", "batch_size": 2, "batch_wait": 0}
    s = scheduler([node("a", cpu="64", memory="64Gi", gpus={"count": 2, "model": "T4"})], batch)
    pods = [pod(f"s{i}", "1", scheduler_name="batch", gpu={"milli": 250}) for i in range(2)]
    for p in pods:
        s.add_pod(p, 0.0)
    outcomes = [*s.schedule(0.0), *s.tick(10.0)]
    assert {o.uid for o in outcomes if isinstance(o, Unschedulable)} == {"s0", "s1"}
    assert not any(isinstance(o, Placed) for o in outcomes)
