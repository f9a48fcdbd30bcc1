"""Upstream InterPodAffinity table tests (kube-scheduler v1.36.3) replayed against the plugin.

Each case in ``vectors/upstream_interpodaffinity.json`` is one entry of filtering_test.go's
TestRequiredAffinitySingleNode / TestRequiredAffinityMultipleNodes or scoring_test.go's
TestPreferredAffinity / TestPreferredAffinityWithHardPodAffinitySymmetricWeight (see
``vectors/UPSTREAM_NOTES.md``): the nodes, the pods already on them and the incoming pod, and what
upstream's Filter (a status per node, or PreFilter's Skip) or Score after NormalizeScore (a score per node)
gives. Every node is scored, as upstream's tests do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policies.framework.contract import CycleContext
from policies.framework.profile import Handle
from policies.plugins.interpodaffinity import REASON_AFFINITY, Args, new
from policies.snapshot import Snapshot
from schemas.node import NodeSpec
from schemas.pod import PodRequest

VECTORS = Path(__file__).parent / "vectors" / "upstream_interpodaffinity.json"
CASES: list[dict[str, Any]] = json.loads(VECTORS.read_text())
IDS = [f"{case['upstream_test']}: {case['name']}" for case in CASES]


def build(case: dict[str, Any]) -> tuple[Snapshot, CycleContext]:
    snapshot = Snapshot()
    for node in case["nodes"]:
        snapshot.upsert_node(NodeSpec(name=node["name"], allocatable={"cpu": 1000}, labels=node["labels"]))
    for existing in case["existing"]:
        pod = PodRequest.model_validate(existing["pod"])
        snapshot.assume(snapshot.pod_info(pod), snapshot.index[existing["node"]], bound=True)
    incoming = PodRequest.model_validate(case["pod"])
    return snapshot, CycleContext(incoming, snapshot.pod_info(incoming), snapshot, 0.0)


def test_the_vectors_cover_each_upstream_table() -> None:
    tests = {case["upstream_test"] for case in CASES}
    assert tests == {
        "TestRequiredAffinitySingleNode",
        "TestRequiredAffinityMultipleNodes",
        "TestPreferredAffinity",
        "TestPreferredAffinityWithHardPodAffinitySymmetricWeight",
    }


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_upstream_case(case: dict[str, Any]) -> None:
    snapshot, ctx = build(case)
    plugin = new(Args.model_validate(case["args"]), Handle())
    rows = snapshot.live_rows()
    names = [snapshot.names[int(row)] for row in rows]
    if "expect_scores" in case:
        scores = plugin.score(ctx, rows)
        assert dict(zip(names, scores.tolist(), strict=True)) == case["expect_scores"]
        if case.get("expect_pre_score") == "Skip":
            assert plugin.raw_scores(ctx, rows) is None or not plugin.raw_scores(ctx, rows).any()
        return
    keep = plugin.filter(ctx, rows)
    if case.get("expect_pre_filter") == "Skip":
        assert keep is None
        return
    assert keep is not None
    failed = rows[~keep]
    reasons = dict(zip([snapshot.names[int(r)] for r in failed], plugin.reasons(ctx, failed), strict=True))
    got: dict[str, Any] = {}
    for name in names:
        assert name is not None
        if name not in reasons:
            got[name] = None
            continue
        reason = reasons[name][0]
        code = "UnschedulableAndUnresolvable" if reason == REASON_AFFINITY else "Unschedulable"
        got[name] = {"code": code, "reason": reason}
    assert got == case["expect_filter"]
