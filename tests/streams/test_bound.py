"""Pods bound by others (`PodBound`) without Kafka: the forwarder's checks and the envelope codec, the
shard's rules (counted as facts, never placed; the API server wins over placement's own assumption), the
ledger's booking, and a recorded live run with such pods replayed offline to the same decisions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from schemas.codec import encode
from schemas.eventlog import EventLogWriter, read_events
from schemas.events import Binding, BindingResult, BindingStatus, DeadLetter
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodBound, PodDeleted, PodRequest
from schemas.quantity import Resources
from streams.core import shard as shard_module
from streams.core.ingress import envelope_from_record
from streams.core.ledger import Ledger, already_bound, insufficient
from streams.core.sequencer import Envelope, Kind, decode_envelope, encode_envelope
from streams.core.shard import Counted, Output, Refused, Release, Shard
from streams.recording.replay import replay_offline
from streams.settings import Settings
from tests.streams.simulate import simulated_live_run, write_placement_log

GiB = 2**30

# ------------------------------------------------------------------------------------------- builders


def node(name: str, cpu: str = "4") -> NodeEvent:
    room = {"cpu": cpu, "memory": "8Gi", "pods": 110}
    return NodeEvent(type="upsert", node=NodeSpec(name=name, capacity=room, allocatable=room))


def pod(uid: str, cpu: str = "1", **extra: Any) -> PodRequest:
    return PodRequest(uid=uid, requests={"cpu": cpu, "memory": "256Mi"}, **extra)


def bound(uid: str, on: str, cpu: str = "1", ts: float = 10.0, **extra: Any) -> PodBound:
    return PodBound(uid=uid, node=on, pod=pod(uid, cpu, **extra), ts=ts)


def env(kind: Kind, value: Any, ts: float = 10.0, source: str = "pod-requests/0") -> Envelope:
    return Envelope(kind, ts, value, source)


def nodes(*names: str, cpu: str = "4") -> list[Envelope]:
    return [env(Kind.NODE, node(name, cpu), 1.0, "node-events/0") for name in names]


def counted(bound_pod: PodBound) -> Envelope:
    return env(Kind.BOUND, bound_pod, bound_pod.ts)


def result(uid: str, on: str, status: BindingStatus = "applied", attempt: int = 0) -> Envelope:
    value = BindingResult(uid=uid, node=on, status=status, at=12.0, attempt=attempt)
    return env(Kind.RESULT, value, 12.0, "bindings/0")


def where(shard: Shard, uid: str) -> str | None:
    snapshot = shard.scheduler.snapshot
    record = snapshot.pods.get(uid)
    return None if record is None else snapshot.names[record.row]


def cpu_on(shard: Shard, name: str) -> int:
    snapshot = shard.scheduler.snapshot
    return int(snapshot.requested[snapshot.index[name], snapshot.column["cpu"]])


@dataclass
class Run:
    """A shard fed a script, and what it said for each envelope."""

    shard: Shard = field(default_factory=Shard)
    said: list[Output] = field(default_factory=list)

    def feed(self, *envelopes: Envelope) -> list[Output]:
        outputs: list[Output] = []
        for envelope in envelopes:
            foreign = set(self.shard.foreign) | set(self.shard._unplaced_bound)
            said = self.shard.feed(envelope)
            # Whatever the case: a pod bound by another is never decided on, nor answered.
            decided = {o.uid for o in said if isinstance(o, Binding | BindingResult)}
            assert not decided & foreign, (envelope, said)
            outputs += said
        self.said += outputs
        return outputs

    def of(self, kind: type, uid: str | None = None) -> list[Any]:
        found = [o for o in self.said if isinstance(o, kind)]
        if uid is None:
            return found
        return [o for o in found if getattr(o, "uid", None) == uid or _bound_uid(o) == uid]


def _bound_uid(output: Any) -> str | None:
    if isinstance(output, Counted):
        return output.bound.uid
    if isinstance(output, Release):
        return output.deleted.uid
    return None


def placed(run: Run) -> dict[str, str]:
    return {b.uid: b.node for b in run.of(Binding)}


# ----------------------------------------------------------------------------------- the forwarder


FORWARDED = [
    ("A pod bound elsewhere, keyed by its uid, becomes a bound envelope.", "x", {}, None),
    (
        "A record keyed otherwise is refused naming the key.",
        "y",
        {},
        "key: record key 'y' does not match 'x'",
    ),
    (
        "A record without a key is refused naming the key.",
        None,
        {},
        "key: record key None does not match 'x'",
    ),
    ("A workload of replicas is refused: a bound pod is one pod.", "x", {"replicas": 3}, "pod.replicas"),
]


@pytest.mark.parametrize(("case", "key", "extra", "error"), FORWARDED, ids=[c[0] for c in FORWARDED])
def test_the_forwarder_passes_a_pod_bound_elsewhere_or_refuses_it_naming_why(
    case: str, key: str | None, extra: dict[str, Any], error: str | None
) -> None:
    record = encode(bound("x", "n1", **extra))
    out = envelope_from_record("pod-requests", 0, 7, key.encode() if key else None, record, now=50.0)
    if error is None:
        assert isinstance(out, Envelope) and out.kind is Kind.BOUND and out.ts == 10.0 and out.offset == 7
        assert decode_envelope(encode_envelope(out)) == out  # through the sequencer and back
    else:
        assert isinstance(out, DeadLetter) and out.error.startswith(error), out


def test_a_malformed_pod_bound_elsewhere_is_a_dead_letter_naming_its_field() -> None:
    raw = orjson.dumps({"kind": "PodBound", "uid": "x", "node": "n1", "ts": 1})
    out = envelope_from_record("pod-requests", 0, 0, b"x", raw, now=50.0)
    assert isinstance(out, DeadLetter) and out.error == "pod: field required"


# --------------------------------------------------------------------------------------- the shard


def check_own_pod_on_its_node(run: Run) -> None:
    run.feed(*nodes("a", "b"), env(Kind.POD, pod("mine")))
    (binding,) = run.of(Binding)
    report = bound("mine", binding.node)
    assert run.feed(counted(report)) == [Counted(report, binding.node)]
    assert "mine" in run.shard.pods and "mine" not in run.shard.foreign
    assert run.shard.scheduler.snapshot.pods["mine"].bound  # marked bound before the applier says so
    assert run.feed(result("mine", binding.node)) == []


def check_own_pod_on_another_node(run: Run) -> None:
    run.feed(*nodes("a", "b"), env(Kind.POD, pod("mine")))
    (binding,) = run.of(Binding)
    other = "b" if binding.node == "a" else "a"
    report = bound("mine", other)
    outputs = run.feed(counted(report))
    # Counted on its real node, and sent along the old node's partition too, to follow the binding there.
    assert outputs == [Counted(report, other), Counted(report, binding.node)]
    assert where(run.shard, "mine") == other and cpu_on(run.shard, binding.node) == 0
    assert "mine" not in run.shard.pods and "mine" in run.shard.foreign
    # The applier's answer to placement's old binding changes nothing now.
    assert run.feed(result("mine", binding.node, "rejected")) == []
    assert where(run.shard, "mine") == other and len(run.of(Binding)) == 1


def check_queued_pod(run: Run) -> None:
    run.feed(*nodes("a", cpu="2"), env(Kind.POD, pod("mine", "3")))
    assert [r.status for r in run.of(BindingResult)] == ["unschedulable"]
    report = bound("mine", "a", "3")
    assert run.feed(counted(report), env(Kind.TICK, None, 100.0, "tick")) == [Counted(report, "a")]
    assert run.shard.scheduler.pending == 0 and "mine" in run.shard.foreign
    assert cpu_on(run.shard, "a") == 3000  # over allocatable: it is a fact


def check_unknown_uid(run: Run) -> None:
    report = bound("theirs", "a", "3500m")
    run.feed(*nodes("a", "b"), counted(report))
    assert run.of(Counted) == [Counted(report, "a")] and cpu_on(run.shard, "a") == 3500
    run.feed(*[env(Kind.POD, pod(f"p{i}")) for i in range(4)])
    assert set(placed(run).values()) == {"b"}  # none lands where it would over-commit a
    assert not run.of(BindingResult, "theirs") and not run.of(Binding, "theirs")
    assert run.shard.scheduler.pending == 0


def check_over_capacity(run: Run) -> None:
    report = bound("theirs", "a", "6")
    run.feed(*nodes("a"), counted(report))
    assert run.of(Counted) == [Counted(report, "a")] and cpu_on(run.shard, "a") == 6000
    run.feed(env(Kind.POD, pod("p", "100m")))
    assert [r.status for r in run.of(BindingResult)] == ["unschedulable"] and not run.of(Binding)


def check_ports_and_labels(run: Run) -> None:
    report = bound("theirs", "a", "100m", host_ports=[9100], labels={"app": "exporter"})
    run.feed(*nodes("a", "b"), counted(report), env(Kind.POD, pod("mine", "100m", host_ports=[9100])))
    assert placed(run) == {"mine": "b"}
    snapshot = run.shard.scheduler.snapshot
    assert snapshot.label_counter(("app",)).total(("exporter",)) == 1


def check_unknown_node(run: Run) -> None:
    report = bound("theirs", "late", "3")
    run.feed(*nodes("a"))
    assert run.feed(counted(report)) == []  # held until its node comes
    assert where(run.shard, "theirs") is None and run.shard.counters["bound_held"] == 1
    outputs = run.feed(*nodes("late"))
    assert outputs == [Counted(report, "late")] and cpu_on(run.shard, "late") == 3000


def check_unknown_node_deleted(run: Run) -> None:
    run.feed(
        *nodes("a"), counted(bound("theirs", "late")), env(Kind.DELETE, PodDeleted(uid="theirs", ts=11.0))
    )
    assert run.feed(*nodes("late")) == [] and cpu_on(run.shard, "late") == 0


def check_held_limit(run: Run) -> None:
    run.feed(*nodes("a"), counted(bound("first", "nowhere")))
    refused = run.feed(counted(bound("second", "nowhere")))
    assert len(refused) == 1 and isinstance(refused[0], Refused)
    assert refused[0].reason.startswith("node: unknown node 'nowhere'")
    assert run.feed(counted(bound("first", "elsewhere", ts=11.0))) == []  # a newer report of a held uid


def check_resize(run: Run) -> None:
    run.feed(*nodes("a"), counted(bound("theirs", "a", "1")))
    report = bound("theirs", "a", "2500m", ts=11.0)
    assert run.feed(counted(report)) == [Counted(report, "a")]
    snapshot = run.shard.scheduler.snapshot
    assert cpu_on(run.shard, "a") == 2500 and snapshot.pod_count[snapshot.index["a"]] == 1
    again = run.feed(counted(report))
    assert again == [Counted(report, "a")] and cpu_on(run.shard, "a") == 2500  # the same report: idempotent


def check_own_pod_resized(run: Run) -> None:
    run.feed(*nodes("a"), env(Kind.POD, pod("mine", "1")))
    report = bound("mine", "a", "2")
    assert run.feed(counted(report)) == [Counted(report, "a")]
    assert cpu_on(run.shard, "a") == 2000 and "mine" in run.shard.pods and "mine" not in run.shard.foreign


def check_deleted(run: Run) -> None:
    run.feed(*nodes("a"), counted(bound("theirs", "a", "3500m")))
    outputs = run.feed(env(Kind.DELETE, PodDeleted(uid="theirs", ts=11.0), 11.0))
    assert outputs == [Release(PodDeleted(uid="theirs", ts=11.0), "a")]
    assert cpu_on(run.shard, "a") == 0 and "theirs" not in run.shard.foreign
    run.feed(env(Kind.POD, pod("p", "3")))
    assert placed(run) == {"p": "a"}


def check_node_deleted(run: Run) -> None:
    run.feed(*nodes("a", "b"), counted(bound("theirs", "a")), env(Kind.POD, pod("mine", "1")))
    gone = env(Kind.NODE, NodeEvent(type="delete", node=NodeSpec(name="a")), 11.0, "node-events/0")
    before = len(run.of(Binding))
    run.feed(gone, env(Kind.TICK, None, 100.0, "tick"))
    assert not run.of(Binding, "theirs") and not run.of(BindingResult, "theirs")
    assert "theirs" not in run.shard.foreign and where(run.shard, "theirs") is None
    assert run.shard.counters["bound_lost_node"] == 1 and len(run.of(Binding)) >= before


def check_request_for_a_counted_uid(run: Run) -> None:
    run.feed(*nodes("a"), counted(bound("theirs", "a")), env(Kind.POD, pod("theirs")))
    assert not run.of(Binding) and run.shard.counters["duplicate_pod"] == 1


def check_replicas(run: Run) -> None:
    run.feed(*nodes("a", "b"), env(Kind.POD, pod("web", "1", replicas=2)))
    replicas = placed(run)
    assert len(replicas) == 2
    uid, on = sorted(replicas.items())[0]
    other = "b" if on == "a" else "a"
    same = bound(uid, on)
    assert run.feed(counted(same)) == [Counted(same, on)]
    (refused,) = run.feed(counted(bound(uid, other, ts=11.0)))
    assert isinstance(refused, Refused) and refused.reason.startswith(f"node: {uid!r} is a replica")
    (workload,) = run.feed(counted(bound("web", "a")))
    assert isinstance(workload, Refused) and workload.reason.startswith("uid: 'web' names a workload")


SHARD_CASES: list[tuple[str, Callable[[Run], None]]] = [
    (
        "Placement's own pod reported on the node it assumed is confirmed, nothing more.",
        check_own_pod_on_its_node,
    ),
    (
        "Placement's own pod reported on another node moves there: the API server wins, and the old "
        "binding's partition carries the report too.",
        check_own_pod_on_another_node,
    ),
    ("A queued pod reported bound leaves the queue and counts where it is.", check_queued_pod),
    ("A pod placement never saw counts on its node, and eyrie's pods go elsewhere.", check_unknown_uid),
    ("A pod bound elsewhere counts even where it leaves no room.", check_over_capacity),
    ("Its host ports and labels count, as an assumed pod's do.", check_ports_and_labels),
    ("A report of an unknown node is held until the node comes.", check_unknown_node),
    ("A held report whose pod is deleted is not counted when its node comes.", check_unknown_node_deleted),
    ("Past the held limit, a report of an unknown node is refused naming the node.", check_held_limit),
    ("A report with other requests re-counts the pod; the same report again changes nothing.", check_resize),
    (
        "Placement's own pod reported with other requests is re-counted and stays placement's.",
        check_own_pod_resized,
    ),
    ("Its deletion releases it, and the node's room is eyrie's again.", check_deleted),
    ("A deleted node's pod bound by another is dropped, never requeued.", check_node_deleted),
    ("A request for a uid bound elsewhere is a duplicate.", check_request_for_a_counted_uid),
    (
        "A replica is confirmed where placement put it, refused elsewhere; a workload's uid is refused.",
        check_replicas,
    ),
]


@pytest.mark.parametrize(("case", "check"), SHARD_CASES, ids=[case for case, _ in SHARD_CASES])
def test_the_shard_counts_a_pod_bound_elsewhere_as_a_fact(
    case: str, check: Callable[[Run], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shard_module, "BOUND_HELD_LIMIT", 1)
    check(Run())


# -------------------------------------------------------------------------------------- the ledger


def spec(name: str, cpu: int = 4000, pods: int = 110) -> NodeSpec:
    """A node with allocatable in base units (cpu in millicores)."""
    return NodeSpec(name=name, allocatable=Resources({"cpu": cpu, "memory": 8 * GiB, "pods": pods}))


def binding(uid: str, on: str, cpu: int = 1000, attempt: int = 0) -> Binding:
    requests = Resources({"cpu": cpu})  # millicores
    return Binding(uid=uid, node=on, requests=requests, attempt=attempt, node_version=0, cluster="c")


def report(uid: str, on: str, cpu: str = "1", ts: float = 10.0) -> PodBound:
    return PodBound(uid=uid, node=on, pod=PodRequest(uid=uid, requests={"cpu": cpu}), ts=ts)


Step = Callable[[Ledger], Any]


def book(bound_pod: PodBound) -> Step:
    return lambda ledger: ledger.book(bound_pod, 1.0)


def bind(b: Binding) -> Step:
    return lambda ledger: ledger.apply(b, 1.0).status


def delete(uid: str) -> Step:
    return lambda ledger: ledger.delete(uid, 2.0)


def remove(name: str) -> Step:
    return lambda ledger: ledger.remove_node(name, 3.0)


def upsert(name: str, cpu: int = 4000) -> Step:
    return lambda ledger: ledger.upsert_node(spec(name, cpu))


LEDGER_CASES: list[tuple[str, list[Step], list[Any], dict[str, dict[str, int]]]] = [
    (
        "A pod bound elsewhere is booked, even over allocatable.",
        [upsert("a"), book(report("x", "a", "5"))],
        [None, True],
        {"a": {"cpu": 5000, "pods": 1}},
    ),
    (
        "A binding that would over-commit a node with it is refused; one that fits is applied.",
        [upsert("a"), book(report("x", "a", "3500m")), bind(binding("p", "a")), bind(binding("q", "a", 500))],
        [None, True, "conflict", "applied"],
        {"a": {"cpu": 4000, "pods": 2}},
    ),
    (
        "The same report again changes nothing.",
        [upsert("a"), book(report("x", "a")), book(report("x", "a")), book(report("x", "a", ts=11.0))],
        [None, True, False, False],
        {"a": {"cpu": 1000, "pods": 1}},
    ),
    (
        "A report with other requests replaces the booked ones.",
        [upsert("a"), book(report("x", "a", "1")), book(report("x", "a", "2", ts=11.0))],
        [None, True, True],
        {"a": {"cpu": 2000, "pods": 1}},
    ),
    (
        "A report older than the one booked is stale, on whatever partition it came.",
        [upsert("a"), book(report("x", "a", "2", ts=11.0)), book(report("x", "a", "1", ts=10.0))],
        [None, True, False],
        {"a": {"cpu": 2000, "pods": 1}},
    ),
    (
        "A report of another node moves the pod and frees the node placement had bound it to.",
        [upsert("a"), upsert("b"), bind(binding("p", "a")), book(report("p", "b"))],
        [None, None, "applied", True],
        {"a": {"pods": 0}, "b": {"cpu": 1000, "pods": 1}},
    ),
    (
        "Placement's binding read after the report moved the pod is rejected, naming the real node.",
        [upsert("a"), upsert("b"), book(report("p", "b")), bind(binding("p", "a"))],
        [None, None, True, "rejected"],
        {"a": {"pods": 0}, "b": {"cpu": 1000, "pods": 1}},
    ),
    (
        "Placement's own binding reported back is booked once, and the binding is applied.",
        [upsert("a"), bind(binding("p", "a")), book(report("p", "a")), bind(binding("p", "a"))],
        [None, "applied", False, "applied"],
        {"a": {"cpu": 1000, "pods": 1}},
    ),
    (
        "A report read before placement's binding of the same node books it; the binding is then applied.",
        [upsert("a"), book(report("p", "a")), bind(binding("p", "a"))],
        [None, True, "applied"],
        {"a": {"cpu": 1000, "pods": 1}},
    ),
    (
        "Its release frees it, and a report read after the deletion books nothing.",
        [upsert("a"), book(report("x", "a")), delete("x"), book(report("x", "a", ts=11.0))],
        [None, True, "a", False],
        {"a": {"pods": 0}},
    ),
    (
        "A report of a node the ledger does not know yet counts once the node comes.",
        [book(report("x", "late", "3")), upsert("late"), bind(binding("p", "late", 1500))],
        [True, None, "conflict"],
        {"late": {"cpu": 3000, "pods": 1}},
    ),
    (
        "A deleted node releases it; a later report books it again.",
        [upsert("a"), book(report("x", "a")), remove("a"), upsert("a"), book(report("x", "a"))],
        [None, True, ["x"], None, True],
        {"a": {"cpu": 1000, "pods": 1}},
    ),
]


@pytest.mark.parametrize(
    ("case", "steps", "returns", "allocated"), LEDGER_CASES, ids=[case for case, *_ in LEDGER_CASES]
)
def test_the_ledger_books_a_pod_bound_elsewhere_unconditionally_and_idempotently(
    case: str, steps: list[Step], returns: list[Any], allocated: dict[str, dict[str, int]]
) -> None:
    nodes_table: dict[str, bytes] = {}
    pods_table: dict[str, bytes] = {}
    ledger = Ledger(nodes_table, pods_table)
    assert [step(ledger) for step in steps] == returns
    assert {name: ledger.allocated(name) for name in allocated} == allocated
    # The tables alone say the same: a recovered applier counts pods bound by others too.
    recovered = Ledger(dict(nodes_table), dict(pods_table))
    assert {name: recovered.allocated(name) for name in allocated} == allocated


def test_a_rejection_names_the_node_a_pod_bound_elsewhere_is_on() -> None:
    ledger = Ledger({}, {})
    ledger.upsert_node(spec("a"))
    ledger.upsert_node(spec("b"))
    ledger.book(report("p", "b"), 1.0)
    answer = ledger.apply(binding("p", "a"), 2.0)
    assert (answer.status, answer.reasons) == ("rejected", [already_bound("b")])
    ledger.book(report("big", "a", "3500m"), 1.0)
    answer = ledger.apply(binding("q", "a"), 2.0)
    assert (answer.status, answer.reasons) == ("conflict", [insufficient("cpu")])


# ---------------------------------------------------------------------------- live equals offline


T0 = 1_700_000_000.0
SCRIPT = [
    Envelope(Kind.NODE, T0, node("a"), "node-events/0"),
    Envelope(Kind.NODE, T0, node("b"), "node-events/0"),
    Envelope(Kind.BOUND, T0 + 1, bound("other-1", "a", "3500m", ts=T0 + 1), "pod-requests/0"),
    Envelope(Kind.BOUND, T0 + 1, bound("other-2", "late", "1", ts=T0 + 1), "pod-requests/0"),
    *[Envelope(Kind.POD, T0 + 2, pod(f"web-{i}", "1"), "pod-requests/0") for i in range(3)],
    # The API server has web-0 on a, where placement did not put it: the API server wins.
    Envelope(Kind.BOUND, T0 + 3, bound("web-0", "a", "1", ts=T0 + 3), "pod-requests/0"),
    Envelope(Kind.NODE, T0 + 4, node("late"), "node-events/0"),
    Envelope(Kind.DELETE, T0 + 5, PodDeleted(uid="other-1", ts=T0 + 5), "pod-requests/0"),
    *[Envelope(Kind.POD, T0 + 6, pod(f"after-{i}", "1500m"), "pod-requests/0") for i in range(3)],
    Envelope(Kind.BOUND, T0 + 7, bound("other-3", "b", "500m", ts=T0 + 7), "pod-requests/0"),
    Envelope(Kind.POD, T0 + 8, pod("last", "2"), "pod-requests/0"),
]


def test_a_recorded_live_run_with_pods_bound_elsewhere_replays_offline_to_the_same_decisions(
    tmp_path: Path,
) -> None:
    carried, live = simulated_live_run(SCRIPT)
    log = write_placement_log(tmp_path / "placement.jsonl", {0: carried})
    bound_lines = [e for e in read_events(log, placement=True) if isinstance(e.value, PodBound)]
    assert [(e.topic, e.key) for e in bound_lines] == [
        ("pod-requests", uid) for uid in ("other-1", "other-2", "web-0", "other-3")
    ]
    offline = replay_offline(log, Settings())
    assert {d.uid: (d.node, d.status) for d in offline.decisions} == live
    assert not {"other-1", "other-2", "other-3"} & live.keys()  # not eyrie's decisions
    assert live["web-0"][0] != "a"  # eyrie's binding, which the API server did not follow
    assert [live[f"web-{i}"][0] for i in (1, 2)] == ["b", "b"]  # a had no room for them
    assert live["last"] == (None, "unschedulable")  # the node that came late is full
    assert offline.refused == []


def test_an_offline_replay_of_topic_records_counts_pods_bound_elsewhere_as_live_does(tmp_path: Path) -> None:
    log = tmp_path / "topics.jsonl"
    with EventLogWriter(log) as writer:
        for envelope in SCRIPT:
            value = envelope.value
            key = value.node.name if isinstance(value, NodeEvent) else value.uid
            writer.write(
                envelope.ts, "node-events" if envelope.kind is Kind.NODE else "pod-requests", key, value
            )
        writer.write(T0 + 9, "pod-requests", "someone", bound("else", "a", ts=T0 + 9))  # keyed wrongly
    offline = replay_offline(log, Settings())
    _, live = simulated_live_run(SCRIPT)
    assert {d.uid: (d.node, d.status) for d in offline.decisions} == live
    assert offline.refused == ["line 16: key: record key 'someone' does not match 'else'"]
