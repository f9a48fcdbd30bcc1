"""Filters that count their reasons for the fit error (`reason_counts`) give the counts their `reasons` give
node by node: nodes with one untolerated taint, with several (the first in the node's order is named),
cordoned nodes."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from policies.framework.contract import CycleContext
from schemas.pod import PodRequest
from tests.policies.builders import node, pod, scheduler

DB = {"key": "dedicated", "value": "db", "effect": "NoSchedule"}
GPU = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
DRAIN = {"key": "drain", "value": "", "effect": "NoExecute"}
SOFT = {"key": "spot", "value": "yes", "effect": "PreferNoSchedule"}


def cluster() -> list[Any]:
    taint_sets = [[], [DB], [GPU], [DB, GPU], [GPU, DB], [DRAIN, DB, GPU], [SOFT], [SOFT, GPU]]
    nodes = [node(f"n{i:02d}", taints=taints) for i, taints in enumerate(taint_sets * 3)]
    nodes += [node(f"cordoned-{i}", unschedulable=True, taints=[DB] if i else []) for i in range(3)]
    return nodes


def counted(plugin_name: str, p: PodRequest) -> tuple[Counter[str], Counter[str]]:
    s = scheduler(cluster())
    snapshot = s.snapshot
    profile = s.profiles.get("default")
    assert profile is not None
    plugin = profile.plugin(plugin_name)
    ctx = CycleContext(p, snapshot.pod_info(p), snapshot, 0.0)
    keep = plugin.filter(ctx, np.arange(snapshot.rows, dtype=np.int64))
    assert keep is not None
    rejected = np.flatnonzero(~keep).astype(np.int64)
    assert len(rejected) > 0
    by_node: Counter[str] = Counter(reason for reasons in plugin.reasons(ctx, rejected) for reason in reasons)
    return plugin.reason_counts(ctx, rejected), by_node


CASES = [
    ("TaintToleration", pod("tolerates-nothing"), "a pod tolerating nothing"),
    (
        "TaintToleration",
        pod("tolerates-db", tolerations=[{"key": "dedicated", "operator": "Exists"}]),
        "a pod tolerating one of the taints",
    ),
    (
        "TaintToleration",
        pod("tolerates-gpu", tolerations=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}]),
        "a pod tolerating another",
    ),
    ("NodeUnschedulable", pod("plain"), "a pod that does not tolerate cordons"),
]


@pytest.mark.parametrize(
    ("plugin_name", "p"),
    [case[:2] for case in CASES],
    ids=[f"{case[0]} counts the reasons it gives node by node, for {case[2]}" for case in CASES],
)
def test_reason_counts_are_the_counted_reasons(plugin_name, p):
    counts, by_node = counted(plugin_name, p)
    assert counts == by_node
