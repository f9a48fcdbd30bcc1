"""bench.kube_parity against a real API server and the real kube-scheduler v1.36.3: a smaller seeded run
(120 pods on 20 nodes, every group) where eyrie's default profile agrees with kube-scheduler on every pod,
gives every node the same per-plugin scores as kube-scheduler's own log, and leaves nothing of the run
behind. The verdict logic itself (`check`, `weighted_scores`, `compare_scores`) and the planned pods are
tested directly, without a cluster."""

from __future__ import annotations

import asyncio
import os
import subprocess
from typing import Any

import orjson
import pytest

from bench.kube_parity import (
    GROUPS,
    HOSTNAME,
    RACK,
    Verdict,
    check,
    compare_scores,
    make_nodes,
    make_pods,
    weighted_scores,
    workload_objects,
)
from policies.scheduler import Explanation
from streams.kube.api import NODES, PODS, KubeApi
from streams.kube.bridge import WORKLOAD_RESOURCES
from streams.kube.workloads import Workloads
from tests.commands import run_module

# ------------------------------------------------------------------------------------------ builders


def _explanation(scores: dict[str, dict[str, int]], weights: dict[str, int]) -> Explanation:
    """An explanation with these unweighted per-plugin scores by node; totals as the profile weighs them."""
    nodes = sorted({node for per_node in scores.values() for node in per_node})
    total = {node: sum(weights[p] * per_node[node] for p, per_node in scores.items()) for node in nodes}
    best = max(total, key=lambda node: (total[node], node)) if total else None
    return Explanation("ns/pod", best, nodes, {}, scores, total)


WEIGHTS = {"PodTopologySpread": 2, "NodeResourcesFit": 1}
TWO_NODES = {"PodTopologySpread": {"a": 100, "b": 50}, "NodeResourcesFit": {"a": 10, "b": 30}}
"""Weighted: a = 200 + 10 = 210, b = 100 + 30 = 130."""
KUBE_SAME = {
    "a": {"PodTopologySpread": 200, "NodeResourcesFit": 10, "DynamicResources": 0, "total": 210},
    "b": {"PodTopologySpread": 100, "NodeResourcesFit": 30, "DynamicResources": 0, "total": 130},
}


def _verdict(kube: str | None, scores: dict[str, dict[str, int]]) -> Verdict:
    explanation = _explanation(scores, WEIGHTS)
    verdict = check("pod", "spread-soft", kube, explanation)
    verdict.weighted = weighted_scores(explanation, WEIGHTS)
    return verdict


# ------------------------------------------------------------------------------------------ pure tests


def test_weighted_scores_multiply_each_plugin_by_its_weight_as_kube_scheduler_logs_them() -> None:
    weighted = weighted_scores(_explanation(TWO_NODES, WEIGHTS), WEIGHTS)
    assert weighted == {
        "a": {"PodTopologySpread": 200, "NodeResourcesFit": 10, "total": 210},
        "b": {"PodTopologySpread": 100, "NodeResourcesFit": 30, "total": 130},
    }


SCORE_CASES: list[tuple[str, str | None, dict[str, dict[str, int]], dict[str, dict[str, int]], bool, int]] = [
    (
        "Equal scores on every node agree, a plugin kube-scheduler logs as 0 and eyrie lacks included",
        "a",
        TWO_NODES,
        KUBE_SAME,
        True,
        0,
    ),
    (
        "One plugin off by one on one node is a difference on that plugin and on the total",
        "a",
        TWO_NODES,
        {**KUBE_SAME, "b": {**KUBE_SAME["b"], "NodeResourcesFit": 31, "total": 131}},
        False,
        2,
    ),
    (
        "A node kube-scheduler scored that eyrie filtered is a difference",
        "a",
        TWO_NODES,
        {**KUBE_SAME, "c": {"PodTopologySpread": 0, "total": 0}},
        False,
        1,
    ),
    (
        "A plugin whose PreScore skipped is absent from kube-scheduler's log and 0 in eyrie",
        "b",
        {"PodTopologySpread": {"a": 0, "b": 0}, "NodeResourcesFit": {"a": 10, "b": 30}},
        {"a": {"NodeResourcesFit": 10, "total": 10}, "b": {"NodeResourcesFit": 30, "total": 30}},
        True,
        0,
    ),
    (
        "A single feasible node is not scored by kube-scheduler: the verdict decides",
        "a",
        {"NodeResourcesFit": {"a": 10}},
        {},
        True,
        0,
    ),
    (
        "An unschedulable pod is not scored by either: the verdict decides",
        None,
        {},
        {},
        True,
        0,
    ),
]


@pytest.mark.parametrize(
    ("kube", "ours", "theirs", "agree", "differences"),
    [c[1:] for c in SCORE_CASES],
    ids=[c[0] for c in SCORE_CASES],
)
def test_compare_scores(
    kube: str | None,
    ours: dict[str, dict[str, int]],
    theirs: dict[str, dict[str, int]],
    agree: bool,
    differences: int,
) -> None:
    verdict = _verdict(kube, ours)
    compare_scores(verdict, theirs)
    assert verdict.scores_agree is agree
    assert verdict.detail.get("score_differences_count", 0) == differences


def test_the_planned_spread_pods_cover_every_variant_and_a_key_some_nodes_lack() -> None:
    nodes = make_nodes(60, 1, "r")
    racks = [node["metadata"]["labels"].get(RACK) for node in nodes]
    assert 0 < racks.count(None) < len(nodes)
    pods = make_pods(1200, 1, "r", nodes)
    constraints = [
        pod.manifest["spec"]["topologySpreadConstraints"] for pod in pods if pod.group.startswith("spread")
    ]
    keys = {c["topologyKey"] for pod in constraints for c in pod}
    assert {HOSTNAME, RACK, "topology.kubernetes.io/zone"} <= keys
    mixed = [pod for pod in constraints if len({c["whenUnsatisfiable"] for c in pod}) == 2]
    assert mixed, "some pods carry a DoNotSchedule and a ScheduleAnyway constraint"
    assert make_pods(1200, 1, "r", nodes) == pods, "a seed gives the same pods"


def test_the_planned_defaults_pods_are_owned_selected_or_bare_as_designed() -> None:
    """Each kind of controller and a Service give some pods a default selector; pods with their own
    constraints, a missing controller or nothing at all are there too (kube-scheduler spreads none of those
    by its defaults)."""
    nodes = make_nodes(20, 1, "r")
    pods = [pod for pod in make_pods(1200, 1, "r", nodes) if pod.group == "defaults"]
    workloads = Workloads.of(workload_objects("r"))
    owners = {ref["kind"] for pod in pods for ref in pod.manifest["metadata"].get("ownerReferences", [])}
    assert owners == {"ReplicaSet", "StatefulSet", "ReplicationController"}
    selected = [workloads.selector_for(pod.manifest["metadata"]) for pod in pods]
    own = [bool(pod.manifest["spec"].get("topologySpreadConstraints")) for pod in pods]
    assert any(s is not None and not o for s, o in zip(selected, own, strict=True)), "some get defaults"
    assert any(s is None for s in selected), "some get none"
    assert any(own), "some have constraints of their own"
    merged = [s for s in selected if s is not None and s.match_labels and s.match_expressions]
    assert merged, "a Service's labels and a ReplicaSet's requirements merge"


# ------------------------------------------------------------------------------------------ the real thing


def _leftovers(kubeconfig: str, run: str) -> int:
    async def count() -> int:
        async with KubeApi.from_kubeconfig(kubeconfig) as api:
            selector = f"eyrie.bench/run={run}"
            nodes = await api.list(NODES, label_selector=selector)
            pods = await api.list(PODS, label_selector=selector)
            workloads = [await api.list(r, label_selector=selector) for r in WORKLOAD_RESOURCES]
            return len(nodes.items) + len(pods.items) + sum(len(listed.items) for listed in workloads)

    return asyncio.run(count())


def _figures(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    figures: dict[str, Any] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return figures


@pytest.mark.kube
def test_eyrie_agrees_with_kube_scheduler_on_every_pod_and_every_score_of_every_group(
    kube_config: str, tmp_path: object
) -> None:
    done = run_module(
        "bench.kube_parity",
        "--nodes",
        20,
        "--pods",
        120,
        "--seed",
        3,
        "--kube-scores",
        "--out",
        tmp_path,
        env={**os.environ, "KUBECONFIG": kube_config},
        timeout=300.0,
    )
    figures = _figures(done)
    assert figures["pods"] == 120 and figures["nodes"] == 20
    assert set(figures["groups"]) == set(GROUPS)
    assert figures["unschedulable"] > 0, "some pods are unschedulable by design"
    below = {group: entry for group, entry in figures["groups"].items() if entry["agree"] != entry["pods"]}
    assert not below, orjson.dumps(figures["mismatches"], option=orjson.OPT_INDENT_2).decode()[:6000]
    scored = {g: e for g, e in figures["groups"].items() if e["scores_agree"] != e["pods"]}
    assert not scored, orjson.dumps(figures["score_mismatches"], option=orjson.OPT_INDENT_2).decode()[:6000]
    run = next(line.split()[1].rstrip(":") for line in done.stdout.splitlines() if line.startswith("run "))
    assert _leftovers(kube_config, run) == 0
