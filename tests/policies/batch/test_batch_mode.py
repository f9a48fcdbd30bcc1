"""Batch mode in profiles and in the scheduler core: collecting, placing, falling back,
determinism, and the same through the sequencer shard's `schedule(now)` after every event."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from policies.batch import BatchArgs, plan_batch, problem_from_snapshot
from policies.framework.contract import CycleContext
from policies.framework.profile import BUILTIN_PROFILES, parse_profile
from policies.scheduler import Placed, Scheduler, Unschedulable
from policies.usage import PORTRAIT_METRICS
from portraits.hourly import HOURS, Portrait
from schemas.exceptions import ConfigError
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodDeleted, PodRequest
from streams.core.sequencer import Envelope, Kind
from streams.core.shard import Shard
from tests.policies.builders import node, pod, scheduler

EXTRA = {"bandwidth": "30G", "disk": "800G"}


def batch_profile(name: str = "batchy", **fields: Any) -> dict[str, Any]:
    return {"schedulerName": name, "mode": "batch", **fields}


def cluster(count: int = 4, **fields: Any) -> list:
    return [node(f"n{i}", cpu=16, memory="24Gi", extra=EXTRA, **fields) for i in range(count)]


def batch_pod(uid: str, cpu: str = "500m", profile: str = "batchy", **fields: Any) -> PodRequest:
    return pod(
        uid,
        cpu=cpu,
        memory="256Mi",
        requests={"bandwidth": "1G", "disk": "10G"},
        scheduler_name=profile,
        **fields,
    )


def outcomes_by_uid(outcomes: list) -> dict[str, Any]:
    return {o.uid: o for o in outcomes if isinstance(o, Placed | Unschedulable)}


# ----------------------------------------------------------------------------------- profiles


@pytest.mark.parametrize(
    ("document", "message"),
    [
        pytest.param(batch_profile(batch_size=0), "batch_size", id="A batch size of 0 is refused."),
        pytest.param(batch_profile(batch_wait=-1), "batch_wait", id="A negative batch wait is refused."),
        pytest.param(batch_profile(algorithm="ga"), "algorithm", id="An unknown algorithm is refused."),
        pytest.param({"schedulerName": "p", "mode": "parallel"}, "mode", id="An unknown mode is refused."),
        pytest.param(
            {"schedulerName": "p", "batch_size": 10},
            "batch_size: only with mode: batch",
            id="Batch settings without batch mode are refused.",
        ),
        pytest.param(
            batch_profile(
                batch_args={
                    "weights": {
                        "mu": {
                            "compressible": [0.5, 0.5, 0.5, 0.5],
                            "incompressible": [0.25] * 4,
                            "balanced": [0.25] * 4,
                        },
                        "nu": {
                            "compressible": [0.25] * 4,
                            "incompressible": [0.25] * 4,
                            "balanced": [0.25] * 4,
                        },
                    }
                }
            ),
            "weights.mu.compressible: weights must sum to 1",
            id="Weights that do not sum to 1 are refused naming the class.",
        ),
        pytest.param(
            batch_profile(batch_args={"population": 1}),
            "batch_args.population",
            id="A population of one eagle is refused.",
        ),
        pytest.param(
            batch_profile(batch_args={"critical_load": 1.5}),
            "batch_args.critical_load",
            id="A critical load above 1 is refused.",
        ),
        pytest.param(
            batch_profile(batch_args={"swarm": 3}),
            "batch_args.swarm: unknown field",
            id="An unknown optimiser setting is refused.",
        ),
        pytest.param(
            batch_profile(batch_args={"resources": ["cpu", "bogus"]}),
            "bogus",
            id="An unknown resource name is refused.",
        ),
    ],
)
def test_a_bad_batch_profile_fails_to_load_with_one_line_naming_the_field(document, message):
    with pytest.raises(ConfigError) as caught:
        parse_profile(document)
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"profile {document['schedulerName']}: ")
    assert "\n" not in str(caught.value)


def test_the_tbesk_builtin_profile_is_batch_mode_with_the_default_batch_settings():
    profile = parse_profile(BUILTIN_PROFILES["tbesk"])
    assert profile.batch is not None
    assert (profile.batch.algorithm, profile.batch.batch_size, profile.batch.batch_wait) == (
        "tbesk",
        100,
        1.0,
    )
    assert profile.batch.args == BatchArgs()
    assert parse_profile(BUILTIN_PROFILES["default"]).batch is None


def test_the_tbesk_z_builtin_profile_optimises_windows_of_20_pods_on_z_avg():
    profile = parse_profile(BUILTIN_PROFILES["tbesk-z"])
    assert profile.batch is not None
    assert (profile.batch.algorithm, profile.batch.batch_size, profile.batch.args.objective) == (
        "tbesk",
        20,
        "z",
    )


def test_the_tbesk_z_builtin_profile_places_a_full_window_through_the_scheduler():
    s = scheduler(cluster(), BUILTIN_PROFILES["tbesk-z"])
    for i in range(20):
        s.add_pod(batch_pod(f"p{i:02d}", profile="tbesk-z"), 0.0)
    placed = [o for o in s.schedule(0.0) if isinstance(o, Placed)]
    assert len(placed) == 20


# ---------------------------------------------------------------------------------- scheduler


def test_pods_are_collected_until_the_batch_is_full_then_placed_together():
    s = scheduler(cluster(), batch_profile(batch_size=3, batch_wait=60))
    for i in range(2):
        s.add_pod(batch_pod(f"p{i}"), 0.0)
    assert s.schedule(0.0) == []
    assert s.pending == 2
    s.add_pod(batch_pod("p2"), 1.0)
    placed = outcomes_by_uid(s.schedule(1.0))
    assert sorted(placed) == ["p0", "p1", "p2"]
    assert all(isinstance(o, Placed) for o in placed.values())
    assert len({o.batch_id for o in placed.values()}) == 1
    assert all(set(o.plugin_scores) == {"TBESK"} for o in placed.values())


@pytest.mark.parametrize(
    ("now", "placed"),
    [
        pytest.param(1.9, 0, id="Before batch_wait has passed on the now clock nothing is placed."),
        pytest.param(
            2.0, 2, id="Once batch_wait has passed since the first pod the partial batch is placed."
        ),
    ],
)
def test_a_partial_batch_waits_batch_wait_seconds_of_the_now_clock(now, placed):
    s = scheduler(cluster(), batch_profile(batch_size=100, batch_wait=2))
    s.add_pod(batch_pod("a"), 0.0)
    s.schedule(0.0)
    s.add_pod(batch_pod("b"), 1.5)
    s.schedule(1.5)
    assert len([o for o in s.tick(now) if isinstance(o, Placed)]) == placed


def test_a_pod_no_node_passes_falls_back_to_one_by_one_and_gets_the_fit_error():
    s = scheduler(cluster(2), batch_profile(batch_size=2))
    s.add_pod(batch_pod("ok"), 0.0)
    s.add_pod(batch_pod("huge", cpu="64"), 0.0)
    result = outcomes_by_uid(s.schedule(0.0))
    assert isinstance(result["ok"], Placed)
    assert isinstance(result["huge"], Unschedulable)
    assert result["huge"].message == (
        "0/2 nodes are available: 2 Insufficient cpu. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )


def test_pods_the_batch_cannot_fit_together_go_one_by_one_and_no_node_is_overfilled():
    # Two nodes with room for three such pods each: eight pods, so two must stay unschedulable.
    nodes = [node(f"n{i}", cpu=3, memory="24Gi", extra=EXTRA) for i in range(2)]
    s = scheduler(nodes, batch_profile(batch_size=8, batch_args={"population": 6, "iterations": 5}))
    for i in range(8):
        s.add_pod(batch_pod(f"p{i}", cpu="1"), 0.0)
    result = outcomes_by_uid(s.schedule(0.0))
    placed = [o for o in result.values() if isinstance(o, Placed)]
    assert len(placed) == 6
    assert sorted(o.node for o in placed) == ["n0"] * 3 + ["n1"] * 3
    assert s.snapshot.free[:2, s.snapshot.column["cpu"]].min() >= 0


def test_filters_choose_each_pods_candidates():
    nodes = [*cluster(2), node("gpu", cpu=16, memory="24Gi", extra=EXTRA, labels={"zone": "x"})]
    s = scheduler(nodes, batch_profile(batch_size=4))
    pods = [batch_pod(f"z{i}", node_selector={"zone": "x"}) for i in range(4)]
    for p in pods:
        s.add_pod(p, 0.0)
    assert {o.node for o in s.schedule(0.0) if isinstance(o, Placed)} == {"gpu"}


def test_the_same_batch_gives_the_same_decisions_on_every_replay():
    def run() -> dict[str, str]:
        s = scheduler(cluster(6), batch_profile(batch_size=20))
        for i in range(20):
            s.add_pod(batch_pod(f"p{i}", cpu=f"{100 + 37 * i}m"), 0.0)
        return {o.uid: o.node for o in s.schedule(0.0) if isinstance(o, Placed)}

    first, second = run(), run()
    assert first == second and len(first) == 20
    assert len(set(first.values())) > 1


def test_one_by_one_profiles_are_placed_at_once_beside_a_waiting_batch():
    s = scheduler(cluster(), batch_profile(batch_size=10), BUILTIN_PROFILES["default"])
    s.add_pod(batch_pod("waits"), 0.0)
    s.add_pod(pod("now", cpu="1", memory="1Gi"), 0.0)
    assert [o.uid for o in s.schedule(0.0) if isinstance(o, Placed)] == ["now"]


def test_a_pod_deleted_while_its_batch_waits_is_not_placed():
    s = scheduler(cluster(), batch_profile(batch_size=2, batch_wait=5))
    s.add_pod(batch_pod("gone"), 0.0)
    s.schedule(0.0)
    s.delete_pod("gone", 1.0)
    s.add_pod(batch_pod("stays"), 2.0)
    s.schedule(2.0)
    assert [o.uid for o in s.tick(10.0) if isinstance(o, Placed)] == ["stays"]


def test_pods_with_a_batch_id_are_batched_apart_and_keep_their_id():
    s = scheduler(cluster(), batch_profile(batch_size=2, batch_wait=60))
    s.add_pod(batch_pod("a1", batch_id="job-a"), 0.0)
    s.add_pod(batch_pod("x1"), 0.0)
    assert s.schedule(0.0) == []  # two pods queued, but in two different batches
    s.add_pod(batch_pod("a2", batch_id="job-a"), 0.0)
    placed = outcomes_by_uid(s.schedule(0.0))
    assert sorted(placed) == ["a1", "a2"]
    assert {o.batch_id for o in placed.values()} == {"job-a"}


def test_the_score_uses_peak_usage_from_a_node_portrait_when_it_has_one():
    s = scheduler(cluster(2), batch_profile())
    snapshot = s.snapshot
    mean = np.zeros((HOURS, len(PORTRAIT_METRICS)))
    mean[13, PORTRAIT_METRICS.index("cpu")] = 12.0  # 12 cores at 13:00
    has = np.zeros_like(mean, dtype=bool)
    has[:, PORTRAIT_METRICS.index("cpu")] = True
    snapshot.usage.set_node_portrait(
        snapshot.row_of("n1"), Portrait(PORTRAIT_METRICS, mean, np.zeros_like(mean), has), 0.0
    )
    p = batch_pod("p")
    info = snapshot.pod_info(p)
    profile = s.profiles.get("batchy")
    problem = problem_from_snapshot(
        snapshot, snapshot.live_rows(), [info], np.ones((1, 2), bool), profile.batch
    )
    cpu = problem.resources.index("cpu")
    assert problem.used[:, cpu].tolist() == [0.0, 12000.0]  # millicores; n0 has no portrait: requests (0)
    assert problem.requested[:, cpu].tolist() == [0.0, 0.0]
    plan = plan_batch(
        snapshot, [CycleContext(p, info, snapshot, 0.0)], np.ones((1, snapshot.rows), bool), profile.batch
    )
    assert plan.rows.tolist() == [snapshot.row_of("n0")]  # the quieter node at peak


# --------------------------------------------------------------------------------- sequencer


def node_event(name: str) -> NodeEvent:
    amounts = {"cpu": "16", "memory": "24Gi", "pods": 110, **EXTRA}
    return NodeEvent(type="upsert", node=NodeSpec(name=name, capacity=amounts, allocatable=amounts))


def test_through_the_sequencer_a_batch_is_placed_when_a_later_event_passes_batch_wait():
    shard = Shard(Scheduler().profiles)
    events = [Envelope(Kind.NODE, 0.0, node_event(f"n{i}"), "offline/0") for i in range(3)]
    events += [
        Envelope(Kind.POD, 1.0 + i * 0.1, batch_pod(f"p{i}", profile="tbesk"), "offline/0") for i in range(5)
    ]
    outputs = shard.feed_all(events)
    assert [o for o in outputs if type(o).__name__ == "Binding"] == []
    later = shard.feed(Envelope(Kind.TICK, 2.0, None, "offline/0"))
    bound = {o.uid: o.batch_id for o in later if type(o).__name__ == "Binding"}
    assert sorted(bound) == [f"p{i}" for i in range(5)]
    assert len(set(bound.values())) == 1 and next(iter(bound.values())).startswith("tbesk-")
    removed = shard.feed(Envelope(Kind.DELETE, 3.0, PodDeleted(uid="p0", ts=3.0), "offline/0"))
    assert removed  # the placed pod is released like any other
