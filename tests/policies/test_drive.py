"""The offline driving loop the experiments and benchmarks share: placements bound at once, pods tracked."""

from __future__ import annotations

from policies.drive import Drive, arrive, make_scheduler
from policies.scheduler import Placed, Unschedulable
from schemas.node import NodeSpec
from schemas.pod import PodRequest


def _node(name: str, cores: int = 4) -> NodeSpec:
    return NodeSpec.model_validate(
        {"name": name, "capacity": {"cpu": str(cores), "memory": 2**34, "pods": 110}}
    )


def _pod(uid: str, cores: int = 1, profile: str = "default") -> PodRequest:
    return PodRequest.model_validate({"uid": uid, "scheduler_name": profile, "requests": {"cpu": str(cores)}})


def test_a_drive_binds_each_placement_and_keeps_where_each_pod_is_until_it_leaves() -> None:
    drive = Drive(make_scheduler([_node("n1"), _node("n2")], "default"))
    outcomes = drive.arrive(_pod("a"), 0.0) + drive.arrive(_pod("b"), 1.0)
    assert [type(o) for o in outcomes] == [Placed, Placed]
    assert list(drive.placement) == ["a", "b"]
    assert all(drive.scheduler.snapshot.pods[uid].bound for uid in drive.placement)
    drive.delete("a", 2.0)
    assert list(drive.placement) == ["b"]
    assert "a" not in drive.scheduler.snapshot.pods


def test_a_pod_that_fits_nowhere_is_placed_at_the_next_arrival_once_room_is_freed() -> None:
    drive = Drive(make_scheduler([_node("n1", cores=2)], "default"))
    drive.arrive(_pod("big", cores=2), 0.0)
    assert isinstance(drive.arrive(_pod("late", cores=2), 1.0)[0], Unschedulable)
    drive.delete("big", 2.0)
    assert drive.tick(20.0) == []
    placed = [o.uid for o in drive.arrive(_pod("small", cores=0), 21.0) if isinstance(o, Placed)]
    assert placed == ["late", "small"]  # the retry was queued first
    assert set(drive.placement) == {"late", "small"}


def test_a_scheduler_of_one_profile_answers_another_profile_unschedulable() -> None:
    one = make_scheduler([_node("n1")], "binpack")
    assert isinstance(arrive(one, _pod("p"), 0.0)[0], Unschedulable)
    every = make_scheduler([_node("n1")])
    assert isinstance(arrive(every, _pod("p", profile="binpack"), 0.0)[0], Placed)
    assert not every.snapshot.pods["p"].bound  # `arrive` alone leaves the placement assumed
