"""A multi-cluster replay of the Alibaba GPU 2023 trace (cluster-trace-gpu-v2023, the "openb" lists).

The trace's 1,523 nodes are split into three clusters by position in the node list (alpha, beta, gamma: a
third each, so each mixes the list's machine types differently). Its pods arrive in creation order as
workloads of 1 to 5 replicas; some are rescaled right after (up by 3, or down by 1) and every pod's deletion
deletes its workload. Each workload goes through the two-level placer. Throughout, no cluster is ever given
more new replicas than its estimate said it could hold, placements land in the cluster the division chose,
and every cluster's incremental summary equals one recomputed from its nodes. With the accurate estimator
(the profile's filters per node) every replica the division hands a cluster also finds a node there.

The model estimator runs with GPU-aware grades (cpu, memory and nvidia.com/gpu), and with Karmada's default
grades, which know only cpu and memory: a GPU request is then a resource the model lacks, estimated 0
everywhere, so those workloads are not placed at all, and still no cluster is overcommitted.
"""

import pytest

from evaluation.traces.alibaba_gpu2023 import iter_alibaba_gpu2023
from evaluation.traces.common import Report
from policies.clusters.models import MAX_INT64, parse_resource_models
from policies.clusters.placement import TwoLevelPlacer
from policies.clusters.policy import ClusterPolicy
from schemas.pod import PodDeleted, whole_cards
from tests.paths import ALIBABA_GPU_2023

CLUSTERS = ("alpha", "beta", "gamma")
WORKLOADS = 240
_CPU = ("0", "4", "16", "32", "64")
_MEMORY = ("0", "16Gi", "64Gi", "256Gi", "512Gi")
_GPU = ("0", "1", "2", "4", "8")


def gpu_models():
    """Five grades over cpu, memory and GPUs, shaped like the trace's machines."""
    bounds = {
        "cpu": (*_CPU, str(MAX_INT64)),
        "memory": (*_MEMORY, str(MAX_INT64)),
        "nvidia.com/gpu": (*_GPU, str(MAX_INT64)),
    }
    return parse_resource_models(
        [
            {"grade": g, "ranges": [{"name": n, "min": b[g], "max": b[g + 1]} for n, b in bounds.items()]}
            for g in range(len(_CPU))
        ]
    )


pytestmark = pytest.mark.skipif(
    not (ALIBABA_GPU_2023 / "openb_node_list_all_node.csv").exists(), reason="trace not present"
)


def trace(workloads):
    """The trace's nodes (assigned to clusters) and its first `workloads` pod creations with the deletions
    among them, in time order."""
    nodes, pods, created = [], [], 0
    for _, topic, _, value in iter_alibaba_gpu2023(ALIBABA_GPU_2023, Report(None)):
        if topic == "node-events":
            nodes.append(value.node)
            continue
        if isinstance(value, PodDeleted):
            pods.append(value)
            continue
        if created == workloads:
            break
        pods.append(whole_cards(value))  # the multi-cluster profiles count whole nvidia.com/gpu
        created += 1
    third = -(-len(nodes) // 3)
    return [n.model_copy(update={"cluster": CLUSTERS[i // third]}) for i, n in enumerate(nodes)], pods


@pytest.fixture(scope="module")
def events():
    return trace(WORKLOADS)


def check(placer, placement, audit):
    # A placement may lead to more divisions (replicas a cluster could not place, divided again).
    chosen = {}
    for division in (placement, *placement.later):
        for cluster, added in division.new_replicas().items():
            assert added <= division.estimates[cluster], (division.workload, cluster, division.estimates)
        chosen.update({uid: cluster for cluster, uids in division.added.items() for uid in uids})
        audit["divisions"] += 1
        audit["replicas"] += sum(division.new_replicas().values())
    for placed in placement.placed:
        assert placed.cluster == chosen[placed.uid]
    audit["placed"] += len(placement.placed)
    audit["unschedulable"] += len(placement.unschedulable)
    audit["short"] += not placement.division.feasible


def replay(nodes, pods, policy, models=None):
    placer = TwoLevelPlacer(policy=policy, models=dict.fromkeys(CLUSTERS, models) if models else None)
    for spec in nodes:
        placer.upsert_node(spec)
    audit = dict.fromkeys(("divisions", "replicas", "placed", "unschedulable", "short", "deleted"), 0)
    live = set()
    for index, event in enumerate(pods):
        now = float(index)
        if isinstance(event, PodDeleted):
            if event.uid in live:
                placer.delete_workload(event.uid, now)
                live.discard(event.uid)
                audit["deleted"] += 1
            continue
        workload = event.model_copy(update={"replicas": 1 + index % 5, "scheduler_name": "default"})
        check(placer, placer.place(workload, now), audit)
        live.add(workload.uid)
        if index % 7 == 0:
            check(
                placer,
                placer.place(workload.model_copy(update={"replicas": workload.replicas + 3}), now),
                audit,
            )
        elif index % 11 == 0 and workload.replicas > 1:
            check(
                placer,
                placer.place(workload.model_copy(update={"replicas": workload.replicas - 1}), now),
                audit,
            )
    for cluster in CLUSTERS:
        summary = placer.summary(cluster)
        counts = list(summary.grade_counts) if summary.grade_counts is not None else None
        assert (summary.allocatable, summary.allocated, summary.allocating, counts) == summary.recount()
    return audit


def test_the_trace_gives_three_clusters_and_enough_workloads(events):
    nodes, pods = events
    assert len(nodes) == 1523 and {n.cluster for n in nodes} == set(CLUSTERS)
    assert sum(not isinstance(p, PodDeleted) for p in pods) == WORKLOADS


CASES = [
    (
        "model estimates on GPU-aware grades, dynamic weights: no cluster gets more than its estimate",
        "model",
        "dynamic",
        gpu_models(),
    ),
    (
        "model estimates on the default grades: GPU workloads fit nowhere, and no cluster gets more",
        "model",
        "aggregated",
        None,
    ),
    ("summary estimates, aggregated: no cluster gets more than its estimate", "general", "aggregated", None),
    (
        "accurate estimates, dynamic weights: no cluster gets more, and every replica finds a node",
        "accurate",
        "dynamic",
        None,
    ),
]


@pytest.mark.parametrize(("case", "estimator", "strategy", "models"), CASES, ids=[c[0] for c in CASES])
def test_no_cluster_is_assigned_more_replicas_than_its_estimate(events, case, estimator, strategy, models):
    nodes, pods = events
    audit = replay(nodes, pods, ClusterPolicy(estimator=estimator, strategy=strategy), models)
    assert audit["divisions"] > WORKLOADS and audit["deleted"] > 0 and audit["placed"] > 0
    if estimator == "model" and models is None:
        assert audit["short"] > WORKLOADS // 2  # the GPU workloads
    else:
        assert audit["short"] <= 5 and audit["replicas"] > 2 * WORKLOADS
    if estimator == "accurate":
        assert audit["unschedulable"] == 0 and audit["placed"] == audit["replicas"]
