"""Upstream PodTopologySpread table tests (v1.36.3) replayed through eyrie's scheduler.

Each case in ``vectors/upstream_podtopologyspread.json`` is one entry of upstream's filtering_test.go or
scoring_test.go (see ``vectors/UPSTREAM_NOTES.md``): the nodes with their pods, the incoming pod, the
kube-scheduler release whose feature gates the upstream test ran with (``kubernetes_version``), and what
upstream expects. Four kinds:

- ``filter`` (TestSingleConstraint, TestMultipleConstraints): a dry cycle with PodTopologySpread as the
  only filter; the feasible nodes and each rejected node's reason must be upstream's;
- ``score`` (TestPodTopologySpreadScore): PodTopologySpread as the only scorer, upstream's failed nodes
  marked unschedulable so that NodeUnschedulable takes them out first; the normalized scores must match;
- ``prefilter_state`` (TestPreFilterState): the matching pods per topology domain of each DoNotSchedule
  constraint (TpValueToMatchNum), and its least count, or PreFilter's Skip;
- ``prescore_state`` (TestPreScoreStateEmptyNodes): the ignored nodes, the pods per domain of each
  ScheduleAnyway constraint (TopologyValueToPodCounts) and the normalizing weights, bit for bit.

Where upstream derives a default selector from Services or ReplicaSets, the case carries those objects
(``objects``) and the pod's ``owner_references``; the pod's ``default_spread_selector`` is what
`streams.kube.workloads` (eyrie's DefaultSelector) derives from them, as the watch bridge sets it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from policies.explain import NodeState, build_scheduler
from policies.framework.contract import CycleContext
from policies.framework.profile import ProfileSet, parse_profiles
from policies.plugins.podtopologyspread import NAME, PodTopologySpread
from policies.scheduler import Scheduler
from schemas.pod import PodRequest
from streams.kube.workloads import Workloads

VECTORS = Path(__file__).parent / "vectors" / "upstream_podtopologyspread.json"
CASES: list[dict[str, Any]] = json.loads(VECTORS.read_text())
MAX_INT32 = 2**31 - 1


def _points(kind: str, args: dict[str, Any]) -> dict[str, Any]:
    every = [{"name": "*"}]
    spread = [{"name": NAME}]
    if kind in ("filter", "prefilter_state"):
        return {
            "preFilter": {"disabled": every, "enabled": spread},
            "filter": {"disabled": every, "enabled": spread},
            "score": {"disabled": every},
        }
    return {
        "preFilter": {"disabled": every},
        "filter": {"disabled": every, "enabled": [{"name": "NodeUnschedulable"}]},
        "score": {"disabled": every, "enabled": [{"name": NAME, "weight": 1}]},
    }


def cluster(case: dict[str, Any]) -> tuple[Scheduler, PodTopologySpread, PodRequest]:
    """The case's nodes and pods in a scheduler whose one profile ("spread") runs the plugin as the case
    needs, and that plugin."""
    args = case.get("args", {"defaultingType": "System"})
    document = {
        "schedulerName": "spread",
        "kubernetesVersion": case["kubernetes_version"],
        "plugins": _points(case["kind"], args),
        "pluginConfig": [{"name": NAME, "args": args}],
    }
    profiles = ProfileSet.builtin()
    for profile in parse_profiles(document).values():
        profiles.replace(profile)
    scheduler = build_scheduler([NodeState.model_validate(n) for n in case["nodes"]], profiles)
    profile = profiles.get("spread")
    assert profile is not None
    plugin = next(p for p, _ in profile.score) if case["kind"] in ("score", "prescore_state") else None
    if plugin is None:
        plugin = next(p for p in profile.filter if p.name == NAME)
    assert isinstance(plugin, PodTopologySpread)
    return scheduler, plugin, incoming(case)


def incoming(case: dict[str, Any]) -> PodRequest:
    """The case's pod, with the default selector its Services and ReplicaSets give it."""
    pod = PodRequest.model_validate(case["pod"])
    if "objects" not in case:
        return pod
    metadata = {
        "namespace": pod.namespace,
        "labels": pod.labels,
        "ownerReferences": case.get("owner_references"),
    }
    selector = Workloads.of(case["objects"]).selector_for(metadata)
    return pod.model_copy(update={"default_spread_selector": selector})


def context(scheduler: Scheduler, pod: PodRequest) -> CycleContext:
    snapshot = scheduler.snapshot
    return CycleContext(pod, snapshot.pod_info(pod), snapshot, 0.0)


def by_value(scheduler: Scheduler, key: str, per_id: dict[int, int]) -> dict[str, int]:
    names = {i: v for v, i in scheduler.snapshot.label_vocab.get(key, {}).items()}
    return {names.get(i, ""): count for i, count in per_id.items()}


def ids(cases: list[dict[str, Any]]) -> list[str]:
    return [f"{case['upstream_test']}: {case['name']}" for case in cases]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [case for case in CASES if case["kind"] == kind]


@pytest.mark.parametrize("case", of_kind("filter"), ids=ids(of_kind("filter")))
def test_upstream_filter(case: dict[str, Any]) -> None:
    scheduler, _, pod = cluster(case)
    out = scheduler.explain(pod, profile_name="spread")
    assert sorted(out.feasible) == sorted(case["expect_feasible"])
    assert out.filtered == case["expect_filtered"]


@pytest.mark.parametrize("case", of_kind("score"), ids=ids(of_kind("score")))
def test_upstream_score(case: dict[str, Any]) -> None:
    scheduler, _, pod = cluster(case)
    out = scheduler.explain(pod, profile_name="spread")
    assert sorted(out.feasible) == sorted(case["expect_scores"])
    assert out.scores[NAME] == case["expect_scores"]


@pytest.mark.parametrize("case", of_kind("prefilter_state"), ids=ids(of_kind("prefilter_state")))
def test_upstream_prefilter_state(case: dict[str, Any]) -> None:
    scheduler, plugin, pod = cluster(case)
    ctx = context(scheduler, pod)
    constraints = plugin.constraints(ctx, hard=True)
    if case.get("expect_skip"):
        assert constraints == []
        return
    counts = plugin.filter_counts(ctx)
    got = [
        by_value(
            scheduler, c.topology_key, {int(i): int(state.matches[i]) for i in np.flatnonzero(state.domains)}
        )
        for c, state in zip(constraints, counts, strict=True)
    ]
    assert got == case["expect_counts"]
    assert [min(domains.values(), default=MAX_INT32) for domains in got] == case["expect_min"]


@pytest.mark.parametrize("case", of_kind("prescore_state"), ids=ids(of_kind("prescore_state")))
def test_upstream_prescore_state(case: dict[str, Any]) -> None:
    scheduler, plugin, pod = cluster(case)
    ctx = context(scheduler, pod)
    nodes = scheduler.snapshot.live_rows()
    state = plugin.score_state(ctx, nodes)
    if state is None:
        assert case["expect_counts"] == [] and case["expect_weights"] is None
        return
    names = [scheduler.snapshot.names[row] for row in nodes.tolist()]
    assert (
        sorted(n for n, ignored in zip(names, state.ignored.tolist(), strict=True) if ignored)
        == case["expect_ignored"]
    )
    constraints = plugin.constraints(ctx, hard=False)
    got = [by_value(scheduler, c.topology_key, d) for c, d in zip(constraints, state.domains, strict=True)]
    assert got == case["expect_counts"]
    assert state.weights == case["expect_weights"]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_vector_documents_validate(case: dict[str, Any]) -> None:
    """Every pod and node document in the vectors is valid eyrie input."""
    PodRequest.model_validate(case["pod"])
    for raw in case["nodes"]:
        NodeState.model_validate(raw)
