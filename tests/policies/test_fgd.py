"""FGD's fragmentation and scores, against the FGD simulator (hkust-adsl/kubernetes-scheduler-simulator at
commit 8f3d6417353c5083c6d56617f255fadd8dc306bc): ``utils.NodeGpuShareFragAmountScore`` and its tests in
``pkg/utils/frag_test.go``, ``utils.GetTypicalPods``, and ``calculateGpuShareFragExtendScore`` of
``pkg/simulator/plugin/fgd_score.go`` on hand-computed cases."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from policies.gpu.fragmentation import (
    FragTable,
    RowFrag,
    fgd_card_score,
    fgd_scores,
    frag_score_reference,
    node_pod_frag,
)
from policies.gpu.workload import PodType, TargetWorkload, WorkloadLearner, typical_pods
from policies.plugins.gpushare.fgd import FGD, Args
from schemas.gpu import GpuRequest
from tests.policies.builders import pod, profile, scheduler

VECTORS = json.loads((Path(__file__).parent / "vectors" / "fgd_typical_pods.json").read_text())


def simulator_workload(name: str) -> TargetWorkload:
    """A typical-pod list of the simulator's tests (percentages as written there, over 100)."""
    return TargetWorkload(
        tuple(PodType(cpu, milli, count, model) for cpu, milli, count, model, _ in VECTORS[name]),
        tuple(float(share) / 100 for *_, share in VECTORS[name]),
    )


def table_of(workload: TargetWorkload, models: dict[str, int]) -> FragTable:
    return FragTable.build(workload, models)


def row_frag(table: FragTable, cpu: list[int], free: list[list[int]], model: list[int]) -> RowFrag:
    width = max(len(f) for f in free)
    padded = np.array([f + [-1] * (width - len(f)) for f in free], dtype=np.int64)
    return RowFrag.compute(
        table,
        np.array(cpu, dtype=np.int64),
        padded,
        np.array([len(f) for f in free], dtype=np.int64),
        np.array(model, dtype=np.int64),
    )


# ------------------------------------------------------------------ the simulator's own test vectors

SIMULATOR_CASES = [
    pytest.param(
        "TestingGenerateGetTypicalPods",
        1000,
        [200, 1000, 1000, 500],
        "1080",
        2566.62,
        id="A used 4x1080 node with 1 cpu left fragments 2566.62 milli (TestNodeGpuShareFragAmountScore).",
    ),
    pytest.param(
        "TestingGenerateGetTypicalPods",
        1000,
        [1000] * 4,
        "1080",
        3802.40,
        id="An idle 4x1080 node with 1 cpu left fragments 3802.40 milli (TestNodeGpuShareFragAmountScore).",
    ),
    pytest.param(
        "TestingGenerateGetTypicalPods",
        1000,
        [1000] * 8,
        "1080",
        7604.80,
        id="An idle 8x1080 node with 1 cpu left fragments 7604.80 milli (TestNodeGpuShareFragAmountScore).",
    ),
    pytest.param(
        "TestingGenerateGetTypicalPodsWithNonGpu",
        64000,
        [1000] * 8,
        "P100",
        887.20,
        id="An empty 8xP100 node fragments 887.20 milli for a workload with cpu pods "
        "(TestNodeGpuShareFragAmountWithNonGpu).",
    ),
    pytest.param(
        "TestingGenerateGetTypicalPodsWithNonGpu",
        32000,
        [1000] * 4 + [0] * 4,
        "P100",
        554.4,
        id="A half-used 8xP100 node fragments 554.4 milli (TestNodeGpuShareFragAmountWithNonGpu).",
    ),
    pytest.param(
        "TestingGenerateGetTypicalPodsWithNonGpu",
        0,
        [1000] * 4 + [0] * 4,
        "P100",
        4000.0,
        id="An 8xP100 node without cpu left is all fragment (TestNodeGpuShareFragAmountWithNonGpu).",
    ),
]


@pytest.mark.parametrize(("workload", "cpu", "free", "model", "expected"), SIMULATOR_CASES)
def test_fragmentation_matches_the_simulator_tests(
    workload: str, cpu: int, free: list[int], model: str, expected: float
) -> None:
    target = simulator_workload(workload)
    assert frag_score_reference(cpu, free, model, target) == pytest.approx(expected, abs=0.01)
    table = table_of(target, {model: 0})
    vectorised = row_frag(table, [cpu], [free], [0]).frag[0]
    assert vectorised == pytest.approx(expected, abs=0.01)


def test_a_single_share_type_lacking_cpu_counts_every_free_milli() -> None:
    """TestNodeGpuShareFragAmountScore's last case: one type (6 cpu, 465 milli) at 9.33 %, 1 cpu left."""
    kind = PodType(6000, 465, 1, "")
    target = TargetWorkload((kind,), (9.33 / 100,))
    free = [200, 1000, 1000, 500]
    assert node_pod_frag(1000, free, "1080", kind) == "q4_lack_cpu"
    assert frag_score_reference(1000, free, "1080", target) == pytest.approx(251.91, abs=0.01)


def test_vectorised_fragmentation_equals_the_reference_on_random_nodes() -> None:
    target = simulator_workload("TestingGenerateGetTypicalPods")
    models = {"1080": 0, "T4": 1, "V100M16": 2, "2080": 3}
    names = ["", *models]
    table = table_of(target, models)
    rng = np.random.default_rng(7)
    cpu = [int(c) for c in rng.integers(0, 96_000, 300)]
    free = [
        [int(f) for f in rng.choice([0, 80, 200, 465, 500, 535, 1000], int(n))]
        for n in rng.integers(1, 9, 300)
    ]
    model = [int(m) for m in rng.integers(-1, 4, 300)]
    got = row_frag(table, cpu, free, model).frag
    for i in range(300):
        assert got[i] == pytest.approx(
            frag_score_reference(cpu[i], free[i], names[model[i] + 1], target), rel=1e-12
        )


# --------------------------------------------------------------------------------- FGD's score

TWO_TYPES = TargetWorkload((PodType(1000, 1000, 1, ""), PodType(1000, 600, 1, "")), (0.5, 0.5))
"""Half the pods want a whole card, half 600 milli of one (1 cpu each)."""


FGD_CASES = [
    pytest.param(
        [1000, 1000],
        500,
        (37, 0),
        id="On two free cards a 500 share leaves 500 that neither type can use: F 0 → 500, score 37.",
    ),
    pytest.param(
        [600, 1000],
        500,
        (54, 0),
        id="A 500 share on the 600 card turns 600 useless to whole cards into 100 useless to all: "
        "F 300 → 100, score 54, better than breaking the free card (score 37).",
    ),
    pytest.param(
        [400, 1000],
        500,
        (37, 1),
        id="Only the free card has room for 500: F 400 → 900, score 37 on card 1.",
    ),
    pytest.param(
        [1000, 1000],
        1000,
        (50, -1),
        id="A whole card on two free cards keeps F at 0: score 50, cards by the default rule.",
    ),
]


@pytest.mark.parametrize(("free", "milli", "expected"), FGD_CASES)
def test_fgd_scores_hand_computed_placements(free: list[int], milli: int, expected: tuple[int, int]) -> None:
    table = table_of(TWO_TYPES, {})
    rows = row_frag(table, [10_000], [free], [-1])
    scores, cards = fgd_scores(table, rows, np.array([free]), np.array([len(free)]), 1000, milli, 1)
    assert (int(scores[0]), int(cards[0])) == expected


def test_fgd_card_score_is_the_truncated_sigmoid_of_the_fragmentation_drop() -> None:
    assert fgd_card_score(300.0, 100.0) == int(100 / (1 + math.exp(-0.2)))
    assert fgd_card_score(0.0, 500.0) == 37
    assert fgd_card_score(10.0, 10.0) == 50


def test_a_share_takes_the_card_fgd_chose_through_the_scheduler() -> None:
    config = {
        "FGD": {
            "workload": [
                {"cpu": 1000, "gpuMilli": 1000, "gpuCount": 1, "weight": 1},
                {"cpu": 1000, "gpuMilli": 600, "gpuCount": 1, "weight": 1},
            ]
        }
    }
    document = profile("fgd", score=[("FGD", 1)], filters=["GpuShareFit"], config=config)
    s = scheduler([], document)
    from schemas.node import NodeSpec

    for name in ("a", "b"):
        s.upsert_node(
            NodeSpec.model_validate(
                {"name": name, "capacity": {"cpu": 16, "memory": "64Gi"}, "gpus": {"count": 2}}
            )
        )
    first = pod("p1", cpu="1", scheduler_name="fgd", gpu={"milli": 400})
    s.add_pod(first, 0.0)
    placed = {o.uid: o for o in s.schedule(0.0)}
    node = placed["p1"].node  # type: ignore[attr-defined]
    # Now one node has [600, 1000]: FGD puts the next 500 share on its 600 card.
    s.add_pod(pod("p2", cpu="1", scheduler_name="fgd", gpu={"milli": 500}), 1.0)
    second = {o.uid: o for o in s.schedule(1.0)}["p2"]
    assert second.node == node  # type: ignore[attr-defined]
    assert second.gpu_cards == placed["p1"].gpu_cards  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------- the workload


def test_typical_pods_keep_the_most_popular_types_up_to_the_threshold_and_renormalise() -> None:
    a, b, c, d = PodType(1000, 0, 0), PodType(2000, 500, 1), PodType(4000, 1000, 2), PodType(500, 0, 0)
    got = typical_pods({a: 5, b: 3, c: 1, d: 1}, threshold=80)
    assert got.types == (a, b)
    assert got.freq == pytest.approx((5 / 8, 3 / 8))
    # Equal counts: the larger type first (sort.Reverse of PodResource.Less); everything kept at 100 %.
    everything = typical_pods({a: 5, b: 3, c: 1, d: 1}, threshold=100)
    assert everything.types == (a, b, c, d)
    assert everything.freq == pytest.approx((0.5, 0.3, 0.1, 0.1))
    assert typical_pods({a: 5, b: 3}, include_cpu=False).types == (b,)


def test_the_learner_decays_old_pods_and_survives_a_checkpoint() -> None:
    a, b = PodType(1000, 0, 0), PodType(2000, 500, 1)
    learner = WorkloadLearner(half_life=10, refresh=1, threshold=100)
    for _ in range(30):
        learner.observe(a)
    for _ in range(10):
        learner.observe(b)
    # b's 10 recent pods weigh as much as a's 30 older ones decayed by 2^-1 ... 2^-4.
    assert learner.workload.types[0] == b
    restored = WorkloadLearner(half_life=10, refresh=1, threshold=100)
    restored.restore(learner.state())
    assert restored.workload.types == learner.workload.types
    assert restored.workload.freq == pytest.approx(learner.workload.freq)


def test_the_plugin_learns_each_pod_once_and_restores_its_counts() -> None:
    plugin = FGD(Args())
    kind = PodType(1000, 500, 1)
    plugin.observe("p1", kind)
    plugin.observe("p1", kind)
    assert plugin.learner is not None and plugin.learner.seen == 1
    assert plugin.workload.types == (kind,)
    again = FGD(Args())
    again.restore_state(plugin.checkpoint_state())
    assert again.workload == plugin.workload


def test_a_share_request_is_one_card() -> None:
    assert GpuRequest(milli=500).is_share


def brute_force(
    cpu: int, free: list[int], model: str, target: TargetWorkload, kind: PodType
) -> tuple[int, int]:
    """``calculateGpuShareFragExtendScore`` line by line: (score, card; -1 for the default rule's)."""
    before = frag_score_reference(cpu, free, model, target)
    if kind.count == 1 and 0 < kind.milli < 1000:
        score, card = 0, -1
        for i, left in enumerate(free):
            if left >= kind.milli:
                after = list(free)
                after[i] -= kind.milli
                s = fgd_card_score(before, frag_score_reference(cpu - kind.cpu, after, model, target))
                if card == -1 or s > score:
                    score, card = s, i
        return score, card
    after = list(free)
    wanted = kind.count
    for i in sorted(range(len(free)), key=lambda i: free[i]):  # NodeResource.Sub: least free first, stable
        if wanted and kind.milli <= after[i]:
            after[i] -= kind.milli
            wanted -= 1
    return fgd_card_score(before, frag_score_reference(cpu - kind.cpu, after, model, target)), -1


def test_the_plugin_scores_as_the_simulator_after_many_placements() -> None:
    """Scores kept per pod type and recomputed only for changed nodes equal a fresh computation."""
    from schemas.node import NodeSpec

    target = simulator_workload("TestingGenerateGetTypicalPods")
    kinds = list(target.types)
    entries = [
        {"cpu": k.cpu, "gpuMilli": k.milli, "gpuCount": k.count, "models": k.model_list, "weight": f}
        for k, f in zip(target.types, target.freq, strict=True)
    ]
    document = profile(
        "fgd", score=[("FGD", 1)], filters=["GpuShareFit"], config={"FGD": {"workload": entries}}
    )
    s = scheduler([], document)
    models = ["1080", "T4", "V100M16", "2080"]
    for i in range(40):
        s.upsert_node(
            NodeSpec.model_validate(
                {
                    "name": f"n{i}",
                    "capacity": {"cpu": 32 + 32 * (i % 2), "memory": "256Gi"},
                    "gpus": {"count": [1, 2, 4, 8][i % 4], "model": models[i % 3]},
                }
            )
        )
    plugin = s.profiles.get("fgd").plugins["FGD"]  # type: ignore[union-attr]
    target = plugin.workload  # the entries renormalised (the simulator's list sums to 0.95)
    rng = np.random.default_rng(3)
    snapshot = s.snapshot
    for n in range(150):
        kind = kinds[int(rng.integers(len(kinds)))]
        gpu = {"milli": kind.milli, "count": kind.count, "models": list(kind.model_list)}
        p = pod(f"p{n}", cpu=f"{kind.cpu}m", scheduler_name="fgd", gpu=gpu)
        info = snapshot.pod_info(p)
        rows = snapshot.live_rows()
        got, cards = plugin.scores_for(
            snapshot, PodType(info.nonzero_cpu, kind.milli, kind.count, kind.models)
        )
        for row in rows:
            count = int(snapshot.gpu_cards[row])
            free = [int(f) for f in snapshot.gpu_free[row, :count]]
            cpu = int(snapshot.free[row, snapshot.column["cpu"]])
            model = snapshot.specs[row].gpus.model  # type: ignore[union-attr]
            fits = sum(f >= kind.milli for f in free) >= kind.count
            if fits:
                assert (int(got[row]), int(cards[row])) == brute_force(cpu, free, model, target, kind), (
                    n,
                    row,
                )
        s.add_pod(p, float(n))
        s.schedule(float(n))
