"""FGD's fast paths against the simulator's definitions: F weighed per group of types (types that differ only
in cpu) equals the per-type sum for workloads of many types, scores of every pod shape equal a placement
computed line by line, and a refreshed workload (F weighed anew over the kept card columns, or the columns
rebuilt) scores as a fresh computation."""

from __future__ import annotations

import numpy as np
import pytest

from policies.gpu.fragmentation import FragTable, RowFrag, fgd_cpu_scores, fgd_scores, frag_score_reference
from policies.gpu.workload import PodType, TargetWorkload
from policies.plugins.gpushare.fgd import FGD
from schemas.node import NodeSpec
from tests.policies.builders import pod, profile, scheduler
from tests.policies.test_fgd import brute_force

MODELS = {"T4": 0, "V100M16": 1, "P100": 2}
NAMES = ["", *MODELS]


def many_types(seed: int, kinds: int) -> TargetWorkload:
    """`kinds` distinct types, most sharing (milli, cards, models) with others at another cpu."""
    rng = np.random.default_rng(seed)
    found: dict[PodType, float] = {}
    while len(found) < kinds:
        cpu = int(
            rng.choice([0, 500, 1000, 2000, 4000, 6000, 8000, 12000, 16000, 32000]) + rng.integers(0, 3)
        )
        milli = int(rng.choice([0, 100, 250, 465, 500, 700, 1000, 1000]))
        count = 0 if milli == 0 else int(rng.choice([1, 1, 2, 4])) if milli == 1000 else 1
        models = "" if milli == 0 else str(rng.choice(["", "", "T4", "V100M16|P100", "A100"]))
        found[PodType(cpu, milli, count, models)] = float(rng.random())
    return TargetWorkload.from_entries(found.items())


def random_rows(seed: int, n: int) -> tuple[list[int], list[list[int]], list[int]]:
    rng = np.random.default_rng(seed)
    cpu = [int(c) for c in rng.integers(0, 64_000, n)]
    free = [
        [int(f) for f in rng.choice([0, 35, 100, 250, 465, 500, 535, 750, 900, 1000, 1000], int(k))]
        for k in rng.choice([1, 2, 4, 8], n)
    ]
    model = [int(m) for m in rng.integers(-1, len(MODELS), n)]
    return cpu, free, model


def rows_of(
    table: FragTable, cpu: list[int], free: list[list[int]], model: list[int]
) -> tuple[RowFrag, np.ndarray]:
    width = max(len(f) for f in free)
    padded = np.array([f + [-1] * (width - len(f)) for f in free], dtype=np.int64)
    cards = np.array([len(f) for f in free], dtype=np.int64)
    rows = RowFrag.compute(
        table, np.array(cpu, dtype=np.int64), padded, cards, np.array(model, dtype=np.int64)
    )
    return rows, padded


@pytest.mark.parametrize(
    ("seed", "kinds"),
    [
        pytest.param(1, 12, id="A dozen types weigh per group as the simulator sums per type."),
        pytest.param(
            2, 300, id="Three hundred types, most differing only in cpu, weigh as the per-type sum."
        ),
    ],
)
def test_grouped_fragmentation_equals_the_per_type_sum(seed: int, kinds: int) -> None:
    target = many_types(seed, kinds)
    table = FragTable.build(target, MODELS)
    cpu, free, model = random_rows(seed, 200)
    got, _ = rows_of(table, cpu, free, model)
    for i in range(200):
        expected = frag_score_reference(cpu[i], free[i], NAMES[model[i] + 1], target)
        assert got.frag[i] == pytest.approx(expected, rel=1e-12, abs=1e-9)


SHAPES = [
    pytest.param(PodType(2000, 250, 1), id="A quarter-card share with 2 cpus."),
    pytest.param(PodType(8000, 465, 1, "T4"), id="A share restricted to T4 cards."),
    pytest.param(PodType(4000, 1000, 1), id="One whole card."),
    pytest.param(PodType(16000, 1000, 4), id="Four whole cards."),
    pytest.param(PodType(6000, 0, 0), id="A pod without GPUs changes only the cpu."),
]


@pytest.mark.parametrize("kind", SHAPES)
def test_fgd_scores_equal_the_placement_computed_line_by_line(kind: PodType) -> None:
    target = many_types(5, 80)
    table = FragTable.build(target, MODELS)
    cpu, free, model = random_rows(6, 150)
    rows, padded = rows_of(table, cpu, free, model)
    cards = np.array([len(f) for f in free], dtype=np.int64)
    scores, chosen = fgd_scores(table, rows, padded, cards, kind.cpu, kind.milli, kind.count)
    if kind.milli == 0:
        assert np.array_equal(fgd_cpu_scores(table, rows, np.arange(150), kind.cpu), scores)
    for i in range(150):
        fits = sum(f >= kind.milli for f in free[i]) >= kind.count
        if fits:
            expected = brute_force(cpu[i], free[i], NAMES[model[i] + 1], target, kind)
            assert (int(scores[i]), int(chosen[i])) == expected, i


def fgd_scheduler(entries: list[dict[str, object]] | None = None) -> tuple[object, FGD]:
    config = {"FGD": {"workload": entries}} if entries else None
    s = scheduler([], profile("fgd", score=[("FGD", 1)], filters=["GpuShareFit"], config=config))
    for i in range(24):
        s.upsert_node(
            NodeSpec.model_validate(
                {
                    "name": f"n{i}",
                    "capacity": {"cpu": 16 + 16 * (i % 3), "memory": "256Gi"},
                    "gpus": {"count": [2, 4, 8][i % 3], "model": ["T4", "V100M16"][i % 2]},
                }
            )
        )
    plugin = s.profiles.get("fgd").plugins["FGD"]  # type: ignore[attr-defined]
    return s, plugin


def check_against_brute_force(s: object, plugin: FGD, kind: PodType) -> None:
    snapshot = s.snapshot  # type: ignore[attr-defined]
    got, cards = plugin.scores_for(snapshot, kind)
    for row in snapshot.live_rows():
        count = int(snapshot.gpu_cards[row])
        free = [int(f) for f in snapshot.gpu_free[row, :count]]
        if sum(f >= kind.milli for f in free) < kind.count:
            continue
        cpu = int(snapshot.free[row, snapshot.column["cpu"]])
        model = snapshot.specs[row].gpus.model
        assert (int(got[row]), int(cards[row])) == brute_force(cpu, free, model, plugin.workload, kind), row


@pytest.mark.parametrize(
    "refreshed",
    [
        pytest.param(
            TargetWorkload((PodType(1000, 500, 1), PodType(4000, 1000, 1)), (0.3, 0.7)),
            id="A refresh that keeps the card columns reweighs F and scores as the simulator.",
        ),
        pytest.param(
            TargetWorkload((PodType(1000, 300, 1), PodType(2000, 0, 0)), (0.6, 0.4)),
            id="A refresh with new card columns recomputes the rows and scores as the simulator.",
        ),
    ],
)
def test_a_refreshed_workload_scores_as_the_simulator(refreshed: TargetWorkload) -> None:
    entries = [
        {"cpu": 1000, "gpuMilli": 500, "gpuCount": 1, "weight": 1},
        {"cpu": 2000, "gpuMilli": 1000, "gpuCount": 1, "weight": 1},
    ]
    s, plugin = fgd_scheduler(entries)
    kinds = [PodType(1000, 500, 1), PodType(2000, 250, 1), PodType(4000, 1000, 2)]
    rng = np.random.default_rng(9)
    for n in range(60):
        kind = kinds[int(rng.integers(len(kinds)))]
        gpu = {"milli": kind.milli, "count": kind.count}
        s.add_pod(pod(f"p{n}", cpu=f"{kind.cpu}m", scheduler_name="fgd", gpu=gpu), float(n))  # type: ignore[attr-defined]
        s.schedule(float(n))  # type: ignore[attr-defined]
        plugin.scores_for(s.snapshot, kind)  # type: ignore[attr-defined]
    plugin._set_workload(refreshed)
    for kind in kinds:
        check_against_brute_force(s, plugin, kind)
