"""The incremental cluster summary: totals and per-grade counts kept per event, never recomputed.

After any sequence of node and pod events the summary equals one recomputed from scratch (`recount`), and a
pod event regrades exactly one node, whatever the cluster's size.
"""

import random

import pytest

from policies.clusters.documents import parse_clusters
from policies.clusters.estimators import estimate
from policies.clusters.models import DEFAULT_MODELS
from policies.clusters.summary import ClusterSummary
from schemas.node import NodeSpec
from schemas.quantity import Resources

GI = 2**30


def spec(name, cores=16, gib=64, pods=110, **fields):
    capacity = Resources(cpu=cores * 1000, memory=gib * GI, pods=pods)  # base units, not notation
    return NodeSpec(name=name, capacity=capacity, **fields)


def requests(cores=1.0, gib=2):
    return {"cpu": int(cores * 1000), "memory": gib * GI}


class CountingModels:
    """The default models, counting how many nodes get graded."""

    def __init__(self):
        self.graded = 0
        self.grades = DEFAULT_MODELS.grades

    def __len__(self):
        return len(DEFAULT_MODELS)

    def grade_position(self, free):
        self.graded += 1
        return DEFAULT_MODELS.grade_position(free)

    def capacities(self, request):
        return DEFAULT_MODELS.capacities(request)


def assert_consistent(summary):
    allocatable, allocated, allocating, counts = summary.recount()
    assert summary.allocatable == allocatable
    assert summary.allocated == allocated
    assert summary.allocating == allocating
    assert (list(summary.grade_counts) if summary.grade_counts is not None else None) == counts


def test_totals_and_grades_follow_a_node_and_its_pods():
    summary = ClusterSummary("c")
    summary.upsert_node(spec("n1", cores=16, gib=64))
    assert summary.allocatable == {"cpu": 16_000, "memory": 64 * GI, "pods": 110}
    assert (
        summary.modelings()[5] == {"grade": 5, "count": 0} and summary.grade_counts[4] == 1
    )  # 16 cores, 64 Gi
    summary.assume("p1", "n1", requests(cores=9, gib=1))
    assert summary.allocating == {"cpu": 9000, "memory": GI, "pods": 1}
    assert summary.grade_counts[3] == 1  # 7 cores free: grade 3
    summary.confirm("p1")
    assert summary.allocating == {} and summary.allocated == {"cpu": 9000, "memory": GI, "pods": 1}
    summary.forget("p1")
    assert summary.allocated == {} and summary.grade_counts[4] == 1
    assert_consistent(summary)


def test_a_cordoned_node_counts_nowhere_until_uncordoned():
    summary = ClusterSummary("c")
    summary.upsert_node(spec("n1"))
    summary.upsert_node(spec("n2"))
    summary.assume("p", "n2", requests())
    summary.set_unschedulable("n2", True)
    assert (
        summary.allocatable["cpu"] == 16_000 and summary.allocating == {} and sum(summary.grade_counts) == 1
    )
    summary.set_unschedulable("n2", False)
    assert summary.allocatable["cpu"] == 32_000 and summary.allocating["pods"] == 1
    summary.upsert_node(spec("n2", unschedulable=True))
    assert summary.allocatable["cpu"] == 16_000
    assert_consistent(summary)


def test_removing_a_node_drops_its_pods():
    summary = ClusterSummary("c")
    summary.upsert_node(spec("n1"))
    summary.assume("a", "n1", requests())
    summary.assume("b", "n1", requests(), confirmed=True)
    assert summary.remove_node("n1") == ["a", "b"]
    assert summary.allocatable == summary.allocated == summary.allocating == {}
    assert "a" not in summary and sum(summary.grade_counts) == 0


def test_random_events_keep_the_summary_equal_to_a_recount():
    rng = random.Random(11)
    summary = ClusterSummary("c")
    nodes, pods = [], []
    for step in range(3000):
        action = rng.random()
        if action < 0.1 or not nodes:
            name = f"n{step}"
            summary.upsert_node(spec(name, cores=rng.choice([4, 8, 32, 96]), gib=rng.choice([16, 64, 512])))
            nodes.append(name)
        elif action < 0.15:
            summary.upsert_node(
                spec(rng.choice(nodes), cores=rng.choice([4, 64]), unschedulable=rng.random() < 0.3)
            )
        elif action < 0.18:
            gone = nodes.pop(rng.randrange(len(nodes)))
            removed = set(summary.remove_node(gone))
            pods = [p for p in pods if p not in removed]
        elif action < 0.6:
            uid = f"p{step}"
            summary.assume(uid, rng.choice(nodes), requests(rng.random() * 4, rng.randint(0, 8)))
            pods.append(uid)
        elif action < 0.8 and pods:
            summary.confirm(rng.choice(pods))
        elif pods:
            summary.forget(pods.pop(rng.randrange(len(pods))))
        if step % 500 == 0:
            assert_consistent(summary)
    assert_consistent(summary)
    summary.set_modeling(False)
    assert summary.grade_counts is None and summary.modelings() == []
    summary.set_modeling(True)
    assert_consistent(summary)


@pytest.mark.parametrize(
    "nodes",
    [10, 1000],
    ids=["a pod event in a 10-node cluster grades one node", "so it does in a 1,000-node cluster"],
)
def test_a_pod_event_regrades_only_its_node(nodes):
    models = CountingModels()
    summary = ClusterSummary("c", models)  # type: ignore[arg-type]
    for i in range(nodes):
        summary.upsert_node(spec(f"n{i}"))
    models.graded = 0
    summary.assume("p", "n3", requests())
    summary.confirm("p")
    summary.forget("p")
    assert models.graded == 2  # assume and forget change what is free; confirm does not


def test_with_modeling_off_pod_events_grade_nothing():
    models = CountingModels()
    summary = ClusterSummary("c", models, modeling=False)  # type: ignore[arg-type]
    summary.upsert_node(spec("n"))
    summary.assume("p", "n", requests())
    assert models.graded == 0 and summary.grade_counts is None


def test_a_summary_written_as_clusters_json_estimates_the_same():
    summary = ClusterSummary("c")
    for i in range(20):
        summary.upsert_node(spec(f"n{i}", cores=4 * (i % 5 + 1), gib=8 * (i % 3 + 1)))
        summary.assume(f"p{i}", f"n{i}", requests(cores=i % 3, gib=i % 4), confirmed=i % 2 == 0)
    [read] = parse_clusters([summary.to_document()])
    for request in (requests(0.5, 1), requests(3, 10), {"cpu": 100}):
        for estimator in ("general", "model"):
            assert estimate(read.status, request, estimator) == estimate(summary, request, estimator)
