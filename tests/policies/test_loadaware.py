"""Load-aware and portrait plugins against hand-computed expectations, through one dry
cycle (`Scheduler.explain`) on node states as `eyrie explain` reads them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from policies.explain import NodeState, build_scheduler, to_portrait
from policies.framework.contract import CycleContext
from policies.framework.profile import Profile, ProfileSet, parse_profile
from policies.plugins.loadaware.common import min_max, round_half_away, round_half_away_scalar
from policies.plugins.loadaware.globalvariance import variance_increase
from policies.plugins.portrait.balance import gaussian_score
from policies.scheduler import Explanation, Scheduler
from policies.snapshot import Snapshot
from policies.usage import PORTRAIT_METRICS, NodeUsage
from portraits.hourly import HOURS, Portrait
from schemas.node import NodeSpec
from schemas.pod import PodRequest

GIB = 1024**3


# ------------------------------------------------------------------------------------ builders


def node(name: str, cpu: str = "4", memory: int = 16 * GIB, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "capacity": {"cpu": cpu, "memory": memory, "pods": 110},
        "allocatable": {"cpu": cpu, "memory": memory, "pods": 110},
        **extra,
    }


def hours(peak: float, peak_std: float = 0.0, base: float = 1.0, at: int = 10) -> list[list[float]]:
    return [[peak, peak_std] if h == at else [base, 0.0] for h in range(24)]


def only(plugin: str, point: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """A profile with `plugin` as the only scorer (point "score") or an extra filter (point "filter")."""
    plugins: dict[str, Any] = {"score": {"disabled": [{"name": "*"}]}}
    if point == "score":
        plugins["score"]["enabled"] = [{"name": plugin, "weight": 1}]
    else:
        plugins["filter"] = {"enabled": [{"name": plugin}]}
        if plugin == "PodFitsResourceOnPortrait":  # it replaces NodeResourcesFit's filter
            plugins["filter"]["disabled"] = [{"name": "NodeResourcesFit"}]
    document: dict[str, Any] = {"schedulerName": "test", "plugins": plugins}
    if args is not None:
        document["pluginConfig"] = [{"name": plugin, "args": args}]
    return document


def explain(
    nodes: list[dict[str, Any]],
    pod: dict[str, Any],
    profile: dict[str, Any],
    pod_portrait: dict[str, Any] | None = None,
) -> Explanation:
    states = [NodeState.model_validate(n) for n in nodes]
    scheduler = build_scheduler(states, ProfileSet([parse_profile(profile)]))
    request = PodRequest.model_validate({"uid": "p", **pod})
    if pod_portrait is not None:
        scheduler.snapshot.usage.set_workload_portrait(
            request.workload or request.uid, to_portrait(pod_portrait, "portrait")
        )
    return scheduler.explain(request, profile_name=profile["schedulerName"])


@dataclass(frozen=True)
class Case:
    name: str
    plugin: str
    point: str
    nodes: list[dict[str, Any]]
    pod: dict[str, Any]
    scores: dict[str, int] = field(default_factory=dict)
    filtered: list[str] = field(default_factory=list)
    args: dict[str, Any] | None = None
    pod_portrait: dict[str, Any] | None = None


def window(cpu: float, cpu_std: float = 0.0, **more: tuple[float, float]) -> dict[str, Any]:
    result = {"cpu": {"mean": cpu, "std": cpu_std}}
    result.update({metric: {"mean": m, "std": s} for metric, (m, s) in more.items()})
    return result


CASES = [
    Case(
        "TargetLoadPacking gives the worked example: X = 50, 4-core nodes using 1, 2, 3 cores → 75, 100, 25.",
        "TargetLoadPacking",
        "score",
        [node(f"n{i}", window=window(float(i))) for i in (1, 2, 3)],
        {"containers": []},
        scores={"n1": 75, "n2": 100, "n3": 25},
        args={"targetUtilization": 50},
    ),
    Case(
        "TargetLoadPacking scores a node without window data 0, and one past 100 % 0.",
        "TargetLoadPacking",
        "score",
        [node("quiet"), node("full", window=window(3.9))],
        {"requests": {"cpu": "1"}},  # predicted 1.5 cores: 3.9 + 1.5 > 4
        scores={"quiet": 0, "full": 0},
    ),
    Case(
        "TargetLoadPacking adds the cpu of pods assumed since the window's last sample.",
        "TargetLoadPacking",
        "score",
        [node("a", window=window(0.4)), node("b", window=window(0.4), assumed={"cpu": "1200m"})],
        {"limits": {"cpu": "400m"}, "requests": {"cpu": "400m"}},
        # a: U = 100·(400+400)/4000 = 20 → round(60·20/40 + 40) = 70; b: U = 50 → round(40·50/60) = 33.
        scores={"a": 70, "b": 33},
    ),
    Case(
        "LoadVariationRiskBalancing: μ = (1 + 1)/4, σ = 0.4/4, risk = 0.3 → 70.",
        "LoadVariationRiskBalancing",
        "score",
        [node("n", window=window(1.0, 0.4))],
        {"requests": {"cpu": "1"}},
        scores={"n": 70},
    ),
    Case(
        "LoadVariationRiskBalancing takes the lower of cpu and memory when both have data.",
        "LoadVariationRiskBalancing",
        "score",
        [node("n", window=window(1.0, 0.4, memory=(8.0 * GIB, 0.0)))],
        {"requests": {"cpu": "1", "memory": 4 * GIB}},
        # cpu 70; memory μ = 12/16 = 0.75, σ = 0 → risk 0.375 → 62.5 → min 62.5 → 63 (half away from zero).
        scores={"n": 63},
    ),
    Case(
        "LoadVariationRiskBalancing's kep variant: S = min(0.5 + 0.1, 1) → 40.",
        "LoadVariationRiskBalancing",
        "score",
        [node("n", window=window(1.0, 0.4))],
        {"requests": {"cpu": "1"}},
        scores={"n": 40},
        args={"variant": "kep"},
    ),
    Case(
        "LoadThresholds rejects a node whose cpu load plus the pod passes 65 %; unmeasured nodes pass.",
        "LoadThresholds",
        "filter",
        [node("hot", window=window(2.0)), node("ok", window=window(1.5)), node("unmeasured")],
        {"requests": {"cpu": "700m"}},  # hot: 2.7/4 = 0.675 > 0.65; ok: 2.2/4 = 0.55
        filtered=["hot"],
    ),
    Case(
        "LoadThresholds counts pods assumed since the window's last sample.",
        "LoadThresholds",
        "filter",
        [node("n", window=window(1.5), assumed={"cpu": "1"})],
        {"requests": {"cpu": "200m"}},  # 1.5 + 1 + 0.2 = 2.7 > 2.6
        filtered=["n"],
    ),
    Case(
        "PeakReference rejects a node whose portrait peak plus the pod passes 90 % of allocatable.",
        "PeakReference",
        "filter",
        [node("high", portrait={"cpu": hours(3.2)}), node("low", portrait={"cpu": hours(2.0)}), node("new")],
        {"requests": {"cpu": "500m"}},  # high: 3.7 > 3.6; low: 2.5
        filtered=["high"],
    ),
    Case(
        "GlobalVarianceMin prefers the node that evens the cluster: utilisations 0.2, 0.5, 0.8 → 100, 50, 0.",
        "GlobalVarianceMin",
        "score",
        [
            node(name, cpu="10", requested={"cpu": cpu}, pods=1)
            for name, cpu in (("a", "2"), ("b", "5"), ("c", "8"))
        ],
        {"requests": {"cpu": "1"}},
        scores={"a": 100, "b": 50, "c": 0},
        args={"resources": [{"name": "cpu"}]},
    ),
    Case(
        "GlobalVarianceMin reads measured load where a node has window data.",
        "GlobalVarianceMin",
        "score",
        [
            node("a", cpu="10", window=window(8.0)),
            node("b", cpu="10", requested={"cpu": "8"}, pods=1, window=window(2.0)),
        ],
        {"requests": {"cpu": "1"}},
        scores={"a": 0, "b": 100},
        args={"resources": [{"name": "cpu"}]},
    ),
    Case(
        "PodFitsResourceOnPortrait lets requested cpu reach allocatable × 1.5 and no further.",
        "PodFitsResourceOnPortrait",
        "filter",
        [node("edge", requested={"cpu": "5"}, pods=1), node("over", requested={"cpu": "5500m"}, pods=1)],
        {"requests": {"cpu": "1"}},
        filtered=["over"],
    ),
    Case(
        "PodFitsResourceOnPortrait honours a node's own oversell rate.",
        "PodFitsResourceOnPortrait",
        "filter",
        [
            node("strict", requested={"cpu": "4"}, pods=1, oversell_rate=1.0),
            node("loose", requested={"cpu": "4"}, pods=1),
        ],
        {"requests": {"cpu": "100m"}},
        filtered=["strict"],
    ),
    Case(
        "PodFitsResourceOnPortrait rejects a node whose hourly cap with the pod passes allocatable.",
        "PodFitsResourceOnPortrait",
        "filter",
        # hour 10: (3.0 + 0.5) + 1.645 × √(0.25 + 0) = 4.32 > 4; the other node: 2.5 + 0.82 = 3.32.
        [node("peaky", portrait={"cpu": hours(3.0, 0.5)}), node("calm", portrait={"cpu": hours(2.0, 0.5)})],
        {"requests": {"cpu": "2"}, "workload": "web"},
        filtered=["peaky"],
        pod_portrait={"cpu": [[0.5, 0.0]] * 24},
    ),
    Case(
        "PodFitsResourceOnPortrait uses the request when the pod's workload has no portrait (cold start).",
        "PodFitsResourceOnPortrait",
        "filter",
        [node("n", portrait={"cpu": hours(3.0)})],
        {"requests": {"cpu": "1100m"}},  # 3.0 + 1.1 > 4
        filtered=["n"],
    ),
    Case(
        "PodFitsResourceOnPortrait never oversells memory: requested memory stops at allocatable.",
        "PodFitsResourceOnPortrait",
        "filter",
        [
            node("edge", requested={"memory": "15Gi"}, pods=1),
            node("over", requested={"memory": "15361Mi"}, pods=1),
        ],
        {"requests": {"cpu": "100m", "memory": "1Gi"}},
        filtered=["over"],
    ),
    Case(
        "PodFitsResourceOnPortrait rejects a node whose hourly memory cap with the pod passes allocatable.",
        "PodFitsResourceOnPortrait",
        "filter",
        # hour 10: (14 + 1) GiB + 1.645 × 1 GiB = 16.6 GiB > 16 GiB; the other node: 13 + 1.6 = 14.6 GiB.
        [
            node("peaky", portrait={"memory": hours(14.0 * GIB, 1.0 * GIB, base=GIB)}),
            node("calm", portrait={"memory": hours(12.0 * GIB, 1.0 * GIB, base=GIB)}),
        ],
        {"requests": {"cpu": "100m", "memory": "1Gi"}, "workload": "web"},
        filtered=["peaky"],
        pod_portrait={"memory": [[1.0 * GIB, 0.0]] * 24},
    ),
    Case(
        "ResourceBalanceOnPortrait ranks a node under the cpu target above one over it; no-data metrics tie.",
        "ResourceBalanceOnPortrait",
        "score",
        [node("under", portrait={"cpu": hours(1.2, 0.2)}), node("over", portrait={"cpu": hours(3.6, 0.2)})],
        {"containers": []},
        # cpu: Norm 1 and 0; llcmiss, crpki: equal → 1 → round(100·3/3) = 100 and round(100·2/3) = 67.
        scores={"under": 100, "over": 67},
    ),
    Case(
        "NodeResourcesFit with requestsFrom usage judges a pod without requests by its workload's peak.",
        "NodeResourcesFit",
        "filter",
        [node("busy", window=window(3.5)), node("idle", window=window(3.0))],
        {"containers": [{}], "workload": "redis"},  # estimate 0.6 cores: 4.1 > 4 on busy, 3.6 on idle
        filtered=["busy"],
        args={"requestsFrom": "usage"},
        pod_portrait={"cpu": hours(0.6, base=0.1)},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_plugin(case: Case) -> None:
    if case.plugin == "NodeResourcesFit":
        profile: dict[str, Any] = {
            "schedulerName": "test",
            "pluginConfig": [{"name": case.plugin, "args": case.args}],
        }
    else:
        profile = only(case.plugin, case.point, case.args)
    out = explain(case.nodes, case.pod, profile, case.pod_portrait).to_json()
    if case.point == "score":
        assert out["scores"][case.plugin] == case.scores
    assert sorted(out["filtered"]) == sorted(case.filtered), out["filtered"]


def test_requests_from_usage_scores_least_allocated_on_measured_load() -> None:
    profile = {
        "schedulerName": "test",
        "pluginConfig": [{"name": "NodeResourcesFit", "args": {"requestsFrom": "usage"}}],
    }
    out = explain(
        [node("n", window=window(3.0))],
        {"containers": [{}], "workload": "redis"},
        profile,
        {"cpu": hours(0.6, base=0.1)},
    ).to_json()
    # cpu: (4000 − 3600)·100/4000 = 10; memory: no window, nothing requested → 100; ⌊110/2⌋ = 55.
    assert out["scores"]["NodeResourcesFit"] == {"n": 55}


# ---------------------------------------------------------------------------------- formulas


@pytest.mark.parametrize(
    ("name", "mean", "std", "target", "expected"),
    [
        ("Zero std under the target scores 1.", 0.3, 0.0, 0.6, 1.0),
        ("Zero std over the target scores 0.", 0.9, 0.0, 0.6, 0.0),
        ("A node exactly at the target scores one half.", 0.6, 0.1, 0.6, 0.5),
        ("Zero std exactly at the target scores one half.", 0.6, 0.0, 0.6, 0.5),
        ("Far above the target the score vanishes.", 5.0, 0.1, 0.6, 0.0),
        ("One std under the target scores Φ(1).", 0.5, 0.1, 0.6, 0.8413447460685429),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_gaussian_score(name: str, mean: float, std: float, target: float, expected: float) -> None:
    assert gaussian_score(np.array([mean]), np.array([std]), target)[0] == pytest.approx(expected, abs=1e-12)


def test_min_max_with_equal_scores_gives_one_everywhere() -> None:
    assert min_max(np.array([0.3, 0.3, 0.3])).tolist() == [1.0, 1.0, 1.0]
    assert min_max(np.array([1.0, 2.0, 3.0])).tolist() == [0.0, 0.5, 1.0]


@pytest.mark.parametrize(
    ("value", "expected"), [(2.5, 3), (-2.5, -3), (0.49999999999999994, 0), (62.5, 63), (7.4999, 7)]
)
def test_round_half_away_from_zero_is_gos_math_round(value: float, expected: int) -> None:
    assert int(round_half_away([value])[0]) == expected


def test_the_closed_form_variance_change_equals_recomputing_the_variance() -> None:
    rng = np.random.default_rng(7)
    utilization = rng.random(50)
    delta = rng.random(50) * 0.1
    closed = variance_increase(utilization, utilization, delta)
    for j in range(50):
        changed = utilization.copy()
        changed[j] += delta[j]
        assert closed[j] == pytest.approx(changed.var() - utilization.var(), abs=1e-15)


def test_pods_placed_after_the_window_count_until_a_newer_window_covers_them() -> None:
    states = [NodeState.model_validate(node("n", window=window(1.0)))]
    scheduler = build_scheduler(states, ProfileSet([parse_profile({"schedulerName": "trimaran"} | {})]))
    usage = scheduler.snapshot.usage
    snapshot = scheduler.snapshot
    pod = PodRequest.model_validate({"uid": "a", "requests": {"cpu": "500m"}})
    snapshot.assume(snapshot.pod_info(pod), 0, at=100.0)
    assert usage.window_assumed[0, 0] == pytest.approx(0.5)
    usage.set_window(0, {"cpu": (1.5, 0.0)}, end=130.0)  # 30 s after: may not be in it yet
    assert usage.window_assumed[0, 0] == pytest.approx(0.5)
    usage.set_window(0, {"cpu": (1.5, 0.0)}, end=200.0)  # 100 s after: covered
    assert usage.window_assumed[0, 0] == 0.0
    snapshot.forget("a")
    assert usage.window_assumed[0, 0] == 0.0


# ------------------------------------------------------------------------------- explain's files


def test_explain_reads_a_pod_portrait_beside_the_pod_request(tmp_path: Any) -> None:
    import json

    from typer.testing import CliRunner

    from streams.cli import app

    nodes = [
        node("peaky", portrait={"cpu": hours(3.0, 0.5)}),
        node("calm", portrait={"cpu": hours(2.0, 0.5)}),
    ]
    pod = {
        "uid": "p",
        "requests": {"cpu": "2"},
        "scheduler_name": "portrait",
        "portrait": {"cpu": [[0.5, 0.0]] * 24},
    }
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    (tmp_path / "pod.json").write_text(json.dumps(pod))
    args = ["explain", "--nodes", str(tmp_path / "nodes.json"), "--pod", str(tmp_path / "pod.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["selected"] == "calm"
    assert out["filtered"] == {"peaky": ["node(s) cpu portrait cap would exceed allocatable"]}

    pod["portrait"] = {"gpu_temp": [[1.0, 0.0]] * 24}
    (tmp_path / "pod.json").write_text(json.dumps(pod))
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "no portrait metric 'gpu_temp'" in result.output


def test_replacing_the_profile_swaps_portrait_targets_at_run_time() -> None:
    def profile(target: float) -> dict[str, Any]:
        document = only(
            "ResourceBalanceOnPortrait", "score", {"resources": [{"name": "cpu", "target": target}]}
        )
        document["schedulerName"] = "portrait"
        return document

    states = [
        NodeState.model_validate(node("half", portrait={"cpu": hours(2.0, 0.0, base=2.0)})),
        NodeState.model_validate(node("empty")),
    ]
    profiles = ProfileSet([parse_profile(profile(0.6))])
    scheduler = build_scheduler(states, profiles)
    pod = PodRequest.model_validate({"uid": "p", "containers": []})
    assert scheduler.explain(pod, profile_name="portrait").to_json()["scores"][
        "ResourceBalanceOnPortrait"
    ] == {
        "half": 100,
        "empty": 100,
    }
    # Target 0.25: the half-loaded node is now over it (std 0 → score 0), the empty one under it.
    profiles.replace(parse_profile(profile(0.25)))
    scores = scheduler.explain(pod, profile_name="portrait").to_json()["scores"]["ResourceBalanceOnPortrait"]
    assert scores == {"half": 0, "empty": 100}


# ------------------------------------------------------------------------- per-row caches stay exact


@pytest.mark.parametrize("values", [[2.5, -2.5, 3.5, -3.5, 0.5, -0.5, 0.0, -0.0, 1e15 + 0.5, 7.25, -7.75]])
def test_round_half_away_agrees_with_the_floor_formula_on_arrays_and_scalars(values: list[float]) -> None:
    rng = np.random.default_rng(3)
    x = np.concatenate([values, rng.uniform(-200, 200, 2000), rng.integers(-200, 200, 500) + 0.5])

    def reference(v: np.ndarray) -> np.ndarray:
        magnitude = np.abs(v)
        whole = np.floor(magnitude)
        return (np.sign(v) * (whole + (magnitude - whole >= 0.5))).astype(np.int64)

    assert (round_half_away(x) == reference(x)).all()
    assert [round_half_away_scalar(float(v)) for v in x] == reference(x).tolist()
    assert round_half_away(2.5) == 3 and round_half_away(np.array([[0.5, -1.5]])).tolist() == [[1, -2]]


def _portrait(rng: np.random.Generator, level: np.ndarray, gaps: bool = False) -> Portrait:
    mean = level * rng.uniform(0.7, 1.3, (HOURS, len(PORTRAIT_METRICS)))
    has = np.ones((HOURS, len(PORTRAIT_METRICS)), dtype=np.bool_)
    if gaps:
        has[rng.random(HOURS) < 0.5, 4:] = False
    return Portrait(PORTRAIT_METRICS, np.where(has, mean, 0.0), np.where(has, mean * 0.2, 0.0), has)


def _spec(rng: np.random.Generator, name: str) -> NodeSpec:
    cores = int(rng.choice([4, 8, 16]))
    size = {"cpu": f"{cores}", "memory": cores * 4 * GIB, "pods": 110}
    allocatable = size | {"cpu": f"{cores * 1000 - int(rng.integers(0, 300))}m"}
    return NodeSpec.model_validate({"name": name, "capacity": size, "allocatable": allocatable})


def _measure(usage: NodeUsage, rng: np.random.Generator, row: int, cores: float, now: float) -> None:
    """A window (now and then without memory, or without any data) and a portrait for the row."""
    memory = cores * 4 * GIB
    stats = {
        "cpu": (cores * rng.uniform(0.1, 0.8), cores * 0.1),
        "memory": (memory * rng.uniform(0.1, 0.8), 0.0),
    }
    roll = rng.random()
    if roll < 0.15:
        stats = {}
    elif roll < 0.3:
        del stats["memory"]
    usage.set_window(row, stats, end=now)
    level = np.array([cores * 0.5, memory * 0.5, 1e8, 1e11, 1.0, 1.0])
    usage.set_node_portrait(row, _portrait(rng, level, gaps=rng.random() < 0.3), seen=np.full(HOURS, now))


def _cluster(
    rng: np.random.Generator, nodes: int, workloads: tuple[str, ...], gaps: bool = False
) -> tuple[Scheduler, list[str]]:
    """The built-in profiles on `nodes` random nodes, with a portrait for each of `workloads`."""
    scheduler = Scheduler(ProfileSet.builtin())
    names = [f"n{i}" for i in range(nodes)]
    for name in names:
        scheduler.upsert_node(_spec(rng, name))
    for workload in workloads:
        level = np.array([0.8, 2e9, 1e7, 1e9, 0.5, 0.5])
        scheduler.snapshot.usage.set_workload_portrait(workload, _portrait(rng, level, gaps=gaps))
    return scheduler, names


def _outputs(profile: Profile, snapshot: Snapshot, pod: PodRequest, now: float) -> list[Any]:
    """Every filter's mask and every scorer's scores for the pod, on every row."""
    info = snapshot.pod_info(pod)
    ctx = CycleContext(pod, info, snapshot, now)
    masks = [plugin.filter(ctx, slice(0, snapshot.rows)) for plugin in profile.filter]
    nodes = snapshot.live_rows()
    scores = [plugin.score(CycleContext(pod, info, snapshot, now), nodes) for plugin, _ in profile.score]
    return [None if mask is None else mask.tolist() for mask in masks] + [s.tolist() for s in scores]


@pytest.mark.parametrize(
    ("journal", "few_rows"),
    [(None, None), (None, 0), (4, None), (1, None)],
    ids=["journal", "no-scalar-rows", "short-journal", "no-journal"],
)
def test_plugins_that_keep_per_row_values_score_as_fresh_ones_after_every_kind_of_change(
    journal: int | None, few_rows: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import policies.plugins.loadaware.common
    import policies.snapshot

    if journal is not None:  # a journal too short to tell: readers recompute every row
        monkeypatch.setattr(policies.snapshot, "_JOURNAL", journal)
    if few_rows is not None:  # changed rows derived as arrays, never one by one on scalars
        monkeypatch.setattr(policies.plugins.loadaware.common, "_FEW_ROWS", few_rows)
    rng = np.random.default_rng(11)
    scheduler, names = _cluster(rng, 12, ("web", "db"))
    snapshot = scheduler.snapshot
    usage = snapshot.usage
    for name in names:
        _measure(usage, rng, snapshot.row_of(name), 8.0, 0.0)
    probes = [
        PodRequest.model_validate({"uid": "probe-web", "workload": "web", "requests": {"cpu": "1"}}),
        PodRequest.model_validate({"uid": "probe-cold", "requests": {"cpu": "1500m", "memory": GIB}}),
    ]
    placed: list[str] = []
    now = 1.0
    for step in range(96):
        now += 1.0
        event = step % 8
        if event in (0, 1, 2):
            requests = {"cpu": f"{int(rng.integers(100, 2000))}m", "memory": int(rng.integers(1, 4)) * GIB}
            if step == 50:
                requests["example.com/widget"] = 0  # a resource column appears
            pod = PodRequest.model_validate(
                {
                    "uid": f"p{step}",
                    "workload": ["web", "db", None][step % 3],
                    "scheduler_name": ["trimaran", "portrait", "balanced"][step % 3],
                    "requests": requests,
                }
            )
            scheduler.add_pod(pod, now)
            scheduler.schedule(now)
            if pod.uid in snapshot.pods:
                placed.append(pod.uid)
        elif event == 3:
            _measure(usage, rng, snapshot.row_of(names[int(rng.integers(len(names)))]), 8.0, now)
        elif event == 4:
            scheduler.upsert_node(_spec(rng, names[int(rng.integers(len(names)))]))
        elif event == 5 and placed:
            scheduler.delete_pod(placed.pop(0), now)
        elif event == 6:
            scheduler.set_unschedulable(names[int(rng.integers(len(names)))], bool(step % 16 == 6))
        elif event == 7:
            if step % 16 == 7:  # a node leaves and the next one takes its row
                scheduler.remove_node(names.pop(0), now)
            name = f"m{step}"
            names.append(name)
            scheduler.upsert_node(_spec(rng, name))
            _measure(usage, rng, snapshot.row_of(name), 8.0, now)
        for profile in ("trimaran", "portrait", "balanced"):
            kept = scheduler.profiles.get(profile)
            fresh = ProfileSet.builtin().get(profile)
            assert kept is not None and fresh is not None
            for probe in probes:
                assert _outputs(kept, snapshot, probe, now) == _outputs(fresh, snapshot, probe, now), (
                    step,
                    profile,
                )


def test_global_variance_keeps_requested_utilisation_exact_without_measured_load() -> None:
    profile = only("GlobalVarianceMin", "score")
    scheduler = Scheduler(ProfileSet([parse_profile(profile)]))
    rng = np.random.default_rng(5)
    for i in range(8):
        scheduler.upsert_node(_spec(rng, f"n{i}"))
    snapshot = scheduler.snapshot
    probe = PodRequest.model_validate({"uid": "probe", "requests": {"cpu": "700m", "memory": GIB}})
    for step in range(20):
        pod = PodRequest.model_validate(
            {"uid": f"p{step}", "scheduler_name": "test", "requests": {"cpu": f"{100 * (step % 7 + 1)}m"}}
        )
        scheduler.add_pod(pod, 0.0)
        scheduler.schedule(0.0)
        if step % 5 == 4:
            scheduler.delete_pod(f"p{step - 2}", 0.0)
        kept, fresh = scheduler.profiles.get("test"), ProfileSet([parse_profile(profile)]).get("test")
        assert kept is not None and fresh is not None
        assert _outputs(kept, snapshot, probe, 0.0) == _outputs(fresh, snapshot, probe, 0.0), step
    assert not snapshot.has_usage


def test_a_pod_with_the_same_load_every_hour_keeps_the_first_peak_hour_after_rounding() -> None:
    # Hour 1 is higher by one ulp; with 3 cores added both round to 4.0, so hour 0 is the peak hour.
    tie = [[0.5, 0.0]] * 24
    tie[0], tie[1] = [1.0, 0.5], [float(np.nextafter(1.0, 2.0)), 0.1]
    nodes = [
        node("tie", cpu="8", portrait={"cpu": tie}),
        node("plain", cpu="8", portrait={"cpu": [[0.5, 0.2]] + [[0.5, 0.0]] * 23}),
    ]
    profile = only("ResourceBalanceOnPortrait", "score", {"resources": [{"name": "cpu", "target": 0.6}]})
    result = explain(nodes, {"requests": {"cpu": "3"}}, profile)
    # At hour 0 the tie node scores Φ(1.6) against the plain node's Φ(6.5); at hour 1 it would score Φ(8).
    assert result.scores["ResourceBalanceOnPortrait"] == {"tie": 0, "plain": 100}


def _bounds_row_by_row(usage: NodeUsage) -> list[list[list[float]]]:
    """cap_max, peak, below_peak and peak_var derived from base μ and σ² one row at a time, from
    AssumePodOnNode's sums (μ_N + μ_W, σ²_N + σ²_W): the reference for the bounds `NodeUsage` derives for all
    stale rows at once, when first read."""
    rows: list[list[list[float]]] = []
    hour_index = np.arange(HOURS)[:, None]
    for row in range(len(usage.base_mean)):
        mean, var = np.array(usage.base_mean[row]), np.array(usage.base_var[row])
        hour = mean.argmax(axis=0)
        columns = np.arange(mean.shape[1])
        rows.append(
            [
                (mean + usage.z * np.sqrt(np.maximum(var, 0.0))).max(axis=0).tolist(),
                mean[hour, columns].tolist(),
                np.where(hour_index < hour, mean, -np.inf).max(axis=0).tolist(),
                var[hour, columns].tolist(),
            ]
        )
    return rows


def _bounds_read(usage: NodeUsage) -> list[list[list[float]]]:
    arrays = (usage.cap_max, usage.peak, usage.below_peak, usage.peak_var)
    return [[array[row].tolist() for array in arrays] for row in range(len(usage.base_mean))]


def test_bounds_derived_when_read_equal_bounds_derived_row_by_row_after_placements_and_measurements() -> None:
    rng = np.random.default_rng(3)
    scheduler, names = _cluster(rng, 6, ("web",), gaps=True)
    snapshot = scheduler.snapshot
    usage = snapshot.usage
    for step in range(40):
        now = float(step)
        if step % 5 == 4:
            _measure(usage, rng, snapshot.row_of(names[step % len(names)]), 8.0, now)
        else:
            pod = PodRequest.model_validate(
                {
                    "uid": f"p{step}",
                    "workload": "web" if step % 2 else None,
                    "requests": {"cpu": f"{int(rng.integers(100, 900))}m", "memory": GIB},
                }
            )
            snapshot.assume(snapshot.pod_info(pod), step % len(names), at=now)
        if step % 3 == 0:  # read now and then: some rows go stale twice before a read, some once
            assert _bounds_read(usage) == _bounds_row_by_row(usage), step
    scheduler.upsert_node(_spec(rng, "grown"))  # a new row: the arrays grow with stale rows pending
    assert _bounds_read(usage) == _bounds_row_by_row(usage)


def test_pods_of_workloads_without_a_portrait_share_the_cold_start_estimate_of_their_request() -> None:
    scheduler = Scheduler(ProfileSet.builtin())
    scheduler.upsert_node(NodeSpec.model_validate(node("n0")))
    usage = scheduler.snapshot.usage
    usage.set_workload_portrait("web", _portrait(np.random.default_rng(1), np.ones(len(PORTRAIT_METRICS))))

    def load_of(uid: str, workload: str | None, cpu: str) -> Any:
        pod = PodRequest.model_validate({"uid": uid, "workload": workload, "requests": {"cpu": cpu}})
        return usage.pod_load(pod, 0.0).mean

    cold = load_of("a", None, "500m")
    assert load_of("b", "batch", "500m") is cold  # another workload, no portrait, the same request
    assert load_of("c", None, "700m") is not cold
    assert load_of("d", "web", "500m") is not cold  # a portrait of its own
    assert cold.tolist() == [[0.5, 0.0, 0.0, 0.0, 0.0, 0.0]] * HOURS
