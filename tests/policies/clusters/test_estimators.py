"""The general, model and accurate estimators, below the command line.

Per-grade capacities port Karmada's ``pkg/estimator/client/general_test.go`` TestGetNodeAvailableReplicas,
except its "zero replicas possible but first model" case (1 replica where ⌊2/3⌋ = 0): that rule went with the
model nodes of Karmada v1.18 (a grade node holds ⌊min / request⌋ replicas, at most 110), which eyrie follows.
"""

import pytest

from policies.clusters.estimators import accurate_estimate, estimate, general_estimate, model_estimate
from policies.clusters.models import DEFAULT_MODELS, MAX_INT64, parse_resource_models
from policies.clusters.summary import ClusterStatus
from tests.policies.builders import node, pod, scheduler

GI = 2**30
MAX = str(MAX_INT64)


def single_grade_models(*resources):
    """One grade per row of mins (name → min) for capacity checks; maxes filled in to validate."""
    names = list(resources[0])
    models = []
    for g, mins in enumerate(resources):
        nxt = resources[g + 1] if g + 1 < len(resources) else None
        models.append(
            {
                "grade": g,
                "ranges": [
                    {"name": n, "min": 0 if g == 0 else mins[n], "max": nxt[n] if nxt else MAX} for n in names
                ],
            }
        )
    return parse_resource_models(models)


CAPACITIES = [
    # (case, models mins per grade, request, grade position, replicas per node)
    (
        "a zero request is ignored: 4Gi / 1Gi",
        ({"cpu": 0, "memory": 0}, {"cpu": "2", "memory": "4Gi"}),
        {"cpu": 0, "memory": GI},
        1,
        4,
    ),
    ("cpu counts in millicores: 2000m / 500m", ({"cpu": 0}, {"cpu": "2"}), {"cpu": 500}, 1, 4),
    (
        "several resources give the smallest ratio",
        ({"cpu": 0, "memory": 0}, {"cpu": "2", "memory": "8Gi"}),
        {"cpu": 500, "memory": 2 * GI},
        1,
        4,
    ),
    (
        "memory limits when it is the scarcer: 8Gi / 3Gi",
        ({"cpu": 0, "memory": 0}, {"cpu": "2", "memory": "8Gi"}),
        {"cpu": 500, "memory": 3 * GI},
        1,
        2,
    ),
    (
        "another grade reads its own mins: 4 cores / 1",
        ({"cpu": 0}, {"cpu": "2"}, {"cpu": "4"}),
        {"cpu": 1000},
        2,
        4,
    ),
    ("a request above a grade's mins fits none there", ({"cpu": 0}, {"cpu": "2"}), {"cpu": 3000}, 1, 0),
    (
        "a resource the model lacks fits nowhere",
        ({"cpu": 0}, {"cpu": "2"}),
        {"cpu": 100, "nvidia.com/gpu": 1},
        1,
        0,
    ),
    (
        "a node holds at most 110 replicas however small they are",
        ({"cpu": 0}, {"cpu": "64"}),
        {"cpu": 1},
        1,
        110,
    ),
    ("a request for nothing fills the 110 pod slots", ({"cpu": 0}, {"cpu": "64"}), {}, 1, 110),
    (
        "a pods entry is no request (a replica is one pod)",
        ({"cpu": 0}, {"cpu": "2"}),
        {"cpu": 1000, "pods": 1},
        1,
        2,
    ),
]


@pytest.mark.parametrize(
    ("case", "grades", "request_", "position", "fits"), CAPACITIES, ids=[c[0] for c in CAPACITIES]
)
def test_replicas_one_node_of_a_grade_holds(case, grades, request_, position, fits):
    assert single_grade_models(*grades).capacities(request_)[position] == fits


def cluster(
    allocatable=None, allocated=None, allocating=None, counts=None, models=DEFAULT_MODELS, summary=True
):
    return ClusterStatus(
        "c", allocatable or {}, allocated or {}, allocating or {}, models, counts, has_summary=summary
    )


GENERAL = [
    (
        "a requested resource the cluster lacks gives 0",
        {"cpu": 4000, "pods": 10},
        {"cpu": 100, "memory": GI},
        0,
    ),
    ("a resource used up gives 0", {"cpu": 4000, "pods": 10}, {"cpu": 5000}, 0),
    ("integer division truncates: 3900m / 1000m is 3", {"cpu": 3900, "pods": 10}, {"cpu": 1000}, 3),
    ("allowed pods bound the result", {"cpu": 100_000, "pods": 2}, {"cpu": 1}, 2),
    ("a pods entry in the request is ignored (a replica is one pod)", {"pods": 5}, {"pods": 3}, 5),
]


@pytest.mark.parametrize(("case", "allocatable", "request_", "expect"), GENERAL, ids=[g[0] for g in GENERAL])
def test_general_estimate(case, allocatable, request_, expect):
    assert general_estimate(cluster(allocatable), request_) == expect


def test_the_model_estimate_is_bounded_by_allowed_pods_and_falls_back_without_counts():
    counts = [0, 0, 0, 0, 0, 0, 0, 0, 3]  # three nodes with 128+ cores free
    rich = cluster({"pods": 1000, "cpu": 1000}, counts=counts)
    assert model_estimate(rich, {"cpu": 1}) == 3 * 110
    assert model_estimate(cluster({"pods": 50, "cpu": 1000}, counts=counts), {"cpu": 1}) == 50
    assert model_estimate(cluster({"pods": 50, "cpu": 1000}), {"cpu": 1}) == general_estimate(
        cluster({"pods": 50, "cpu": 1000}), {"cpu": 1}
    )
    assert model_estimate(rich, {"cpu": 1}, modeling=False) == 1000
    assert estimate(cluster(summary=False, counts=counts), {"cpu": 1}, "model") == 0


def test_the_accurate_estimate_counts_each_node_alone_after_the_filters():
    nodes = [
        node("a", cpu="4", memory="8Gi"),
        node("b", cpu="3", memory="64Gi", pods=2),
        node("c", cpu="64", memory="64Gi", unschedulable=True),
        node("d", cpu="8", memory="8Gi", pod_requests=[{"uid": "x", "requests": {"cpu": "7"}}]),
    ]
    s = scheduler(nodes)
    # a: min(4, 8 / 2) = 4; b: min(3, 32, 2 pod slots) = 2; c cordoned; d: 1 core left.
    assert accurate_estimate(s, pod("w", cpu="1", memory="2Gi")) == 4 + 2 + 1
    assert accurate_estimate(s, pod("big", cpu="5")) == 0
    assert accurate_estimate(scheduler([]), pod("w", cpu="1")) == 0
