"""Two-level placement: divide a workload among clusters, then place each share in its cluster."""

import pytest

from policies.clusters.placement import TwoLevelPlacer
from policies.clusters.policy import ClusterPolicy, cluster_policy_of
from policies.framework.profile import ProfileSet, parse_profile
from policies.scheduler import Placed
from schemas.node import NodeSpec
from schemas.pod import PodRequest
from schemas.quantity import Resources

GI = 2**30


def node(name, cluster, cores=8, gib=32, pods=110, **fields):
    capacity = Resources(cpu=cores * 1000, memory=gib * GI, pods=pods)
    return NodeSpec(name=name, cluster=cluster, capacity=capacity, **fields)


def workload(uid, replicas, cores=1, gib=2, **fields):
    requests = Resources(cpu=cores * 1000, memory=gib * GI)
    return PodRequest(uid=uid, replicas=replicas, containers=[{"requests": requests}], **fields)


def placer(policy=None, sizes=(("east", 2), ("west", 1), ("north", 0)), **node_fields):
    p = TwoLevelPlacer(policy=policy)
    for cluster, count in sizes:
        p.add_cluster(cluster)
        for i in range(count):
            p.upsert_node(node(f"{cluster}-{i}", cluster, **node_fields))
    return p


def per_cluster(result):
    counts = {}
    for placed in result.placed:
        counts[placed.cluster] = counts.get(placed.cluster, 0) + 1
    return counts


def test_replicas_are_divided_by_estimates_then_placed_on_nodes_of_their_cluster():
    p = placer(ClusterPolicy(estimator="general", strategy="dynamic"))
    result = p.place(workload("web", 6), now=0.0)
    # east: 16 cores / 1 = 16, west 8, north 0 → 6 by 16:8 is 4:2.
    assert result.estimates == {"east": 16, "west": 8, "north": 0}
    assert result.division.assignment == {"east": 4, "west": 2}
    assert per_cluster(result) == {"east": 4, "west": 2}
    assert all(placed.node.startswith(placed.cluster) for placed in result.placed)
    assert {placed.uid for placed in result.placed} == {f"web-{i}" for i in range(6)}
    assert p.summary("east").allocating["pods"] == 4


def test_the_summary_sees_each_placement_before_the_next_estimate():
    p = placer(ClusterPolicy(estimator="model", strategy="aggregated"), sizes=(("east", 1), ("west", 1)))
    # An empty 8-core, 32 Gi node is grade 3 (4 cores, 32 Gi): four 1-core replicas by the model.
    first = p.place(workload("a", 3, cores=1, gib=1), now=0.0)
    assert first.estimates == {"east": 4, "west": 4} and first.division.assignment == {"east": 3}
    # East has 5 cores and 29 Gi free now: grade 2 (2 cores, 16 Gi), two more replicas.
    second = p.place(workload("b", 3, cores=1, gib=1), now=0.0)
    assert second.estimates == {"east": 2, "west": 4} and second.division.assignment == {"west": 3}
    for name in ("east", "west"):
        summary = p.summary(name)
        expected = summary.recount()
        assert (
            summary.allocatable,
            summary.allocated,
            summary.allocating,
            list(summary.grade_counts),
        ) == expected


def test_rescaling_adds_where_the_division_says_and_removes_the_newest_replicas():
    p = placer(ClusterPolicy(estimator="general", strategy="dynamic"))
    p.place(workload("web", 3), now=0.0)
    grown = p.place(workload("web", 9), now=1.0)
    assert sum(len(uids) for uids in grown.added.values()) == 6
    assert all(count <= grown.estimates[name] for name, count in grown.new_replicas().items())
    shrunk = p.place(workload("web", 2), now=2.0)
    assert len(shrunk.removed) == 7 and sum(len(u) for u in p.replicas("web").values()) == 2
    assert p.summary("east").allocating.get("pods", 0) + p.summary("west").allocating.get("pods", 0) == 2
    p.delete_workload("web", now=3.0)
    assert (
        p.replicas("web") == {} and p.summary("east").allocating == {} and p.summary("west").allocating == {}
    )


def test_a_shortfall_places_nothing_and_tells_each_waiting_replica_why():
    p = placer(ClusterPolicy(estimator="general", strategy="dynamic"))
    result = p.place(workload("huge", 100), now=0.0)
    assert not result.division.feasible and result.placed == [] and p.replicas("huge") == {}
    assert [o.uid for o in result.unschedulable] == p.pending("huge") == [f"huge-{i}" for i in range(100)]
    assert "can take 24 of the 100" in result.unschedulable[0].reasons[0]


def test_confirmed_replicas_move_from_allocating_to_allocated():
    p = placer(ClusterPolicy(estimator="general", strategy="duplicated"), sizes=(("east", 1), ("west", 1)))
    result = p.place(workload("db", 2), now=0.0)
    assert per_cluster(result) == {"east": 2, "west": 2}
    for placed in result.placed:
        p.confirm(placed.uid)
    assert p.summary("east").allocated["pods"] == 2 and p.summary("east").allocating == {}


def test_the_profiles_cluster_policy_chooses_estimator_and_strategy():
    profile = parse_profile({"schedulerName": "spread"})
    profile.cluster_policy = ClusterPolicy(strategy="static", weights={"west": 1})
    p = TwoLevelPlacer(ProfileSet([parse_profile({"schedulerName": "default"}), profile]))
    for cluster in ("east", "west"):
        p.upsert_node(node(f"{cluster}-0", cluster))
    result = p.place(workload("w", 3, scheduler_name="spread"), now=0.0)
    assert result.policy.strategy == "static" and result.division.assignment == {"west": 3}
    assert cluster_policy_of(p.profiles.get("default")) == ClusterPolicy()


POLICIES = [
    ("a mapping is read as a cluster policy", {"estimator": "general"}, "general"),
    ("nothing gives the defaults (model estimates)", None, "model"),
]


@pytest.mark.parametrize(("case", "raw", "estimator"), POLICIES, ids=[c[0] for c in POLICIES])
def test_cluster_policy_documents(case, raw, estimator):
    assert ClusterPolicy.from_document(raw).estimator == estimator


def test_a_bad_cluster_policy_names_the_field():
    from schemas.exceptions import ConfigError

    with pytest.raises(ConfigError, match="clusterPolicy: strategy"):
        ClusterPolicy.from_document({"strategy": "spread"})
    with pytest.raises(ConfigError, match=r"weights\.a"):
        ClusterPolicy.from_document({"weights": {"a": -1}})


# ------------------------------------------------------------------------------ keeping replicas


def live_replicas(p, uid):
    return {r: cluster for cluster, uids in p.replicas(uid).items() for r in uids}


def test_a_removed_nodes_replicas_are_divided_again_under_new_uids():
    p = placer(ClusterPolicy(estimator="general", strategy="dynamic"))
    first = p.place(workload("web", 6), now=0.0)
    on_west = [o.uid for o in first.placed if o.node == "west-0"]
    outcomes = p.remove_node("west-0", now=1.0)
    replaced = [o.uid for o in outcomes if isinstance(o, Placed)]
    assert replaced == [f"web-{6 + i}" for i in range(len(on_west))]
    assert set(live_replicas(p, "web")) == {f"web-{i}" for i in range(6)} - set(on_west) | set(replaced)
    assert set(live_replicas(p, "web").values()) == {"east"}  # west has no node left


def test_a_replica_its_cluster_cannot_place_goes_to_another_cluster():
    # The summary sees 2 × 3 free cores in east as room for three 2-core replicas; only two fit.
    p = placer(ClusterPolicy(estimator="general", strategy="dynamic"), sizes=(("east", 2), ("west", 1)))
    p.upsert_node(node("east-0", "east", cores=3))
    p.upsert_node(node("east-1", "east", cores=3))
    result = p.place(workload("web", 6, cores=2), now=0.0)
    assert result.division.assignment == {"east": 3, "west": 3}
    (again,) = result.later
    assert again.new_replicas() == {"west": 1} and again.estimates["east"] == 0
    assert not result.unschedulable and len(result.placed) == 6
    assert sorted(live_replicas(p, "web").values()) == ["east"] * 2 + ["west"] * 4


def test_replicas_that_fit_nowhere_wait_and_are_divided_again_once_a_cluster_changes():
    p = placer(ClusterPolicy(estimator="general", strategy="dynamic"))
    waiting = p.place(workload("big", 30), now=0.0)
    assert not waiting.placed and len(p.pending("big")) == 30
    assert p.schedule(now=1.0) == []  # nothing changed: no division is tried
    p.upsert_node(node("north-0", "north", cores=16))
    placed = [o for o in p.schedule(now=2.0) if isinstance(o, Placed)]
    assert sorted(o.uid for o in placed) == sorted(f"big-{i}" for i in range(30))
    assert p.pending("big") == []


def test_a_deleted_replica_is_replaced_and_the_workload_keeps_its_size():
    p = placer(ClusterPolicy(estimator="general", strategy="aggregated"))
    p.place(workload("web", 4), now=0.0)
    outcomes = p.delete_replica("web-1", now=1.0)
    assert [o.uid for o in outcomes if isinstance(o, Placed)] == ["web-4"]
    assert sorted(live_replicas(p, "web")) == ["web-0", "web-2", "web-3", "web-4"]
    summary = p.summary("east")
    assert (
        summary.allocating["pods"] == 4
        and (
            summary.allocatable,
            summary.allocated,
            summary.allocating,
            list(summary.grade_counts),
        )
        == summary.recount()
    )
