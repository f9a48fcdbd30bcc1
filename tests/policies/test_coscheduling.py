"""Gang scheduling: all or nothing, never half-placed, and a group that times out lets go of everything."""

from policies.scheduler import Placed, Unschedulable, Waiting
from tests.policies.builders import node, pod, scheduler

GANG = {
    "schedulerName": "gang",
    "plugins": {
        "queueSort": {"disabled": [{"name": "*"}]},
        "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
    },
}


def member(group, index, cpu=1, min_available=4, timeout_s=30, priority=0):
    return pod(
        f"{group}-{index}",
        cpu=cpu,
        scheduler_name="gang",
        priority=priority,
        pod_group={"name": group, "min_available": min_available, "timeout_s": timeout_s},
    )


def outcomes_by_kind(outcomes):
    placed = {o.uid: o.node for o in outcomes if isinstance(o, Placed)}
    unschedulable = {o.uid for o in outcomes if isinstance(o, Unschedulable)}
    return placed, unschedulable


def test_a_gang_that_fits_is_placed_all_together():
    s = scheduler([node("a", cpu=2), node("b", cpu=2)], GANG)
    for i in range(4):
        s.add_pod(member("g", i), 0)
    outcomes = s.schedule(0)
    placed, _ = outcomes_by_kind(outcomes)
    assert sorted(placed) == ["g-0", "g-1", "g-2", "g-3"]
    # The first three waited in Permit; the fourth completed the group and all four bound together.
    assert [type(o).__name__ for o in outcomes[:3]] == ["Waiting"] * 3


def test_two_gangs_that_fit_alone_but_not_together_are_never_half_placed():
    s = scheduler([node("a", cpu=3), node("b", cpu=3)], GANG)
    for group in ("first", "second"):
        for i in range(4):
            s.add_pod(member(group, i), 0)
    placed, unschedulable = outcomes_by_kind(s.schedule(0))
    assert sorted(placed) == [f"first-{i}" for i in range(4)]
    # The second gang could reserve only two members; they were released, not left holding two cores.
    assert unschedulable >= {"second-0", "second-1", "second-2"}
    assert not any(uid.startswith("second") for uid in s.snapshot.pods)
    assert s.snapshot.requested[:, 0].sum() == 4000


def test_a_gang_with_too_few_known_members_is_rejected_before_any_filter():
    s = scheduler([node("a", cpu=8)], GANG)
    for i in range(2):
        s.add_pod(member("g", i), 0)
    outcomes = s.schedule(0)
    assert all(isinstance(o, Unschedulable) for o in outcomes)
    assert "has 2 of min_available 4 pods" in outcomes[0].message
    assert not s.snapshot.pods


def test_a_member_that_fits_nowhere_releases_every_reserved_member_at_once():
    s = scheduler([node("a", cpu=8)], GANG)
    for i in range(3):
        s.add_pod(member("g", i), 0)
    s.add_pod(member("g", 3, cpu=100), 0)
    outcomes = s.schedule(0)
    placed, unschedulable = outcomes_by_kind(outcomes)
    assert not placed
    assert unschedulable == {"g-0", "g-1", "g-2", "g-3"}
    assert not s.snapshot.pods, "nothing may stay reserved after the group failed"
    assert s.snapshot.requested[:, 0].sum() == 0


def test_a_gang_that_cannot_complete_within_its_timeout_releases_everything_it_reserved():
    s = scheduler([node("a", cpu=8)], GANG)
    for i in range(3):
        s.add_pod(member("g", i, min_available=3, timeout_s=5), 0)
    outcomes = s.schedule(0, limit=2)  # two members reserve and wait in Permit ...
    assert [type(o) for o in outcomes] == [Waiting, Waiting]
    assert all(o.deadline == 5 for o in outcomes)
    s.delete_pod("g-2", 1.0)  # ... and the third is gone before it was placed
    assert s.tick(4.9) == []
    _, unschedulable = outcomes_by_kind(s.tick(5.0))
    assert unschedulable == {"g-0", "g-1"}
    assert not s.snapshot.pods
    assert s.snapshot.requested[:, 0].sum() == 0


def test_a_released_gang_backs_off_before_trying_again():
    s = scheduler([node("a", cpu=3)], GANG)
    for i in range(4):
        s.add_pod(member("g", i), 0)
    s.schedule(0)
    s.upsert_node(node("b", cpu=3).spec())
    # The cluster changed, but the group's backoff (10 s by default) holds it back until it passes.
    assert not any(isinstance(o, Placed) for o in s.schedule(5.0))
    placed, _ = outcomes_by_kind(s.schedule(20.0))
    assert sorted(placed) == ["g-0", "g-1", "g-2", "g-3"]
