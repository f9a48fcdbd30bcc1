"""Placement's workload portraits bounded by live workloads: the metrics core's expiry of a workload travels
on the sequencer (a `WorkloadSummary` with ``expired``), the shard drops the portrait there, and a pod of
that workload afterwards is estimated as one never measured. The same point in the input for a live shard,
an offline replay of its placement log and a shard restored from a checkpoint."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from schemas.events import Binding, MetricSample
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodRequest
from streams.core.checkpoint import decode_checkpoint, encode_checkpoint
from streams.core.metrics import MetricsCore, Summary, WorkloadSummary
from streams.core.sequencer import Envelope, Kind, decode_envelope, encode_envelope
from streams.core.shard import REMOVED_NODES_KEPT, Output, Shard
from streams.recording.replay import replay_offline
from streams.settings import Settings
from tests.streams.simulate import simulated_live_run, write_placement_log

T0 = 1_700_000_000.0 - 1_700_000_000.0 % 86400.0
TTL = 100.0

# ------------------------------------------------------------------------------------------- builders


def node(name: str, cpu: str = "8") -> NodeEvent:
    room = {"cpu": cpu, "memory": "16Gi", "pods": 110}
    return NodeEvent(type="upsert", node=NodeSpec(name=name, capacity=room, allocatable=room))


def pod(uid: str, workload: str, cpu: str = "1") -> PodRequest:
    return PodRequest(
        uid=uid, requests={"cpu": cpu, "memory": "256Mi"}, workload=workload, scheduler_name="portrait"
    )


def sample(ts: float, pod_name: str, workload: str | None, cpu: float = 3.0) -> MetricSample:
    return MetricSample(ts=ts, node="n1", pod=pod_name, workload=workload, values={"cpu": cpu, "memory": 2e9})


def keeper(ts: float) -> MetricSample:
    """A node sample: keeps the metrics core's clock going."""
    return MetricSample(ts=ts, node="n1", values={"cpu": 1.0, "memory": 1e9})


def summaries(samples: list[MetricSample], batch: int = 7) -> list[Summary]:
    core = MetricsCore(state_ttl=TTL)
    out: list[Summary] = []
    for start in range(0, len(samples), batch):
        out += core.ingest(samples[start : start + batch])
    return out


def envelope(summary: Summary, source: str = "metrics/0") -> Envelope:
    kind = Kind.WORKLOAD if isinstance(summary, WorkloadSummary) else Kind.SUMMARY
    return Envelope(kind, summary.ts, summary, source)


def portrait_of(workload: str, ts: float, cpu: float = 3.0) -> WorkloadSummary:
    [made] = [s for s in summaries([sample(ts, "p", workload, cpu)]) if isinstance(s, WorkloadSummary)]
    return made


def expiry(workload: str, ts: float, last: float) -> WorkloadSummary:
    return WorkloadSummary(workload, ts, None, last)


def churn(workloads: int, every: float = 5.0) -> list[MetricSample]:
    """One workload starting every `every` seconds, its pod sampled three times 10 s apart, and a node
    sampled every 10 s throughout: at any time ~(30 + ttl) / every workloads are live or within the ttl."""
    timed: list[tuple[float, int, MetricSample]] = []
    for index in range(workloads):
        for step in range(3):
            ts = T0 + every * index + 10 * step
            timed.append((ts, len(timed), sample(ts, f"job-{index}-pod", f"job-{index}", 1.0 + index % 5)))
    for second in range(0, int(every * workloads) + 200, 10):
        timed.append((T0 + second, len(timed), keeper(T0 + second)))
    timed.sort(key=lambda item: (item[0], item[1]))
    return [s for _, _, s in timed]


def shape(told: list[Summary]) -> list[tuple[str, float, float | None]]:
    return [
        (s.workload, s.ts, s.expired) if isinstance(s, WorkloadSummary) else (s.node, s.ts, None)
        for s in told
    ]


def load_of(shard: Shard, request: PodRequest, at: float) -> tuple[Any, Any]:
    load = shard.scheduler.snapshot.usage.pod_load(request, at)
    return load.mean.copy(), load.var.copy()


def bindings(outputs: list[Output]) -> dict[str, tuple[str, float]]:
    return {o.uid: (o.node, o.score) for o in outputs if isinstance(o, Binding)}


# ---------------------------------------------------------------------------------------------- tests


def test_the_metrics_core_says_each_workload_it_forgets_after_that_workloads_summaries() -> None:
    told = summaries(churn(40))
    expired = [s for s in told if isinstance(s, WorkloadSummary) and s.expired is not None]
    assert {s.workload for s in expired} == {f"job-{i}" for i in range(40)}
    for expiry_said in expired:
        position = told.index(expiry_said)
        before = [
            s
            for s in told[:position]
            if isinstance(s, WorkloadSummary) and s.workload == expiry_said.workload
        ]
        assert before and all(s.expired is None and s.ts <= expiry_said.expired for s in before)
        assert expiry_said.ts - expiry_said.expired >= TTL


@pytest.mark.parametrize("batch", [1, 3, 50, 10_000], ids=lambda b: f"Batches of {b} sample(s).")
def test_where_and_when_an_expiry_goes_out_does_not_depend_on_how_the_samples_were_cut(batch: int) -> None:
    samples = churn(30)
    # Float values may differ in the last bits across cuts (`streams.core.metrics`); which summaries and
    # expiries go out, in which order and at which times, may not.
    assert shape(summaries(samples, batch)) == shape(summaries(samples, 1))


@dataclass(frozen=True)
class DropCase:
    name: str
    said: list[WorkloadSummary]
    kept: bool
    counter: str


DROP_CASES = [
    DropCase(
        "An expiry naming the held portrait's time or later drops it.",
        [portrait_of("web", T0), expiry("web", T0 + TTL, T0)],
        False,
        "workload_portraits_dropped",
    ),
    DropCase(
        "An expiry from a partition whose samples are older than the held portrait leaves it.",
        [portrait_of("web", T0 + 50), expiry("web", T0 + TTL, T0)],
        True,
        "workload_expired_stale",
    ),
    DropCase(
        "An expiry of a workload placement never held a portrait of is counted, nothing else.",
        [portrait_of("web", T0), expiry("batch", T0 + TTL, T0)],
        True,
        "workload_expired_unknown",
    ),
    DropCase(
        "A portrait after the expiry is held again.",
        [portrait_of("web", T0), expiry("web", T0 + TTL, T0), portrait_of("web", T0 + TTL + 1)],
        True,
        "workload_portraits_dropped",
    ),
]


@pytest.mark.parametrize("case", DROP_CASES, ids=lambda case: case.name)
def test_the_shard_drops_a_portrait_on_its_workloads_expiry_unless_a_newer_one_came(case: DropCase) -> None:
    shard = Shard()
    shard.feed_all(envelope(said) for said in case.said)
    assert ("web" in shard.scheduler.snapshot.usage.workloads) is case.kept
    assert shard.counters[case.counter] == 1
    assert set(shard._portrait_ts) == set(shard.scheduler.snapshot.usage.workloads)


def test_a_pod_of_an_expired_workload_is_scored_as_one_without_a_portrait() -> None:
    nodes = [Envelope(Kind.NODE, T0, node(f"n{i}", str(4 + 2 * i)), "node-events/0") for i in range(3)]
    heavy = portrait_of("web", T0, cpu=6.0)  # measured far above its 1-cpu request
    measured, expired, never = Shard(), Shard(), Shard()
    measured.feed_all([*nodes, envelope(heavy)])
    expired.feed_all([*nodes, envelope(heavy), envelope(expiry("web", T0 + TTL, T0))])
    never.feed_all(nodes)
    request = pod("web-1", "web")
    assert not np.array_equal(load_of(measured, request, T0 + 200)[0], load_of(never, request, T0 + 200)[0])
    for got, want in zip(load_of(expired, request, T0 + 200), load_of(never, request, T0 + 200), strict=True):
        assert np.array_equal(got, want)
    placed = Envelope(Kind.POD, T0 + 200, request, "pod-requests/0")
    assert bindings(expired.feed(placed)) == bindings(never.feed(placed))


@pytest.mark.parametrize(
    ("said", "error"),
    [
        pytest.param(
            {"kind": "workload", "workload": "w", "ts": 5.0, "portrait": {}, "expired": 1.0},
            "portrait: must be null in an expiry",
            id="An expiry carrying a portrait is refused.",
        ),
        pytest.param(
            {"kind": "workload", "workload": "w", "ts": 5.0, "portrait": None, "expired": -1},
            "expired: expected a finite number >= 0",
            id="An expiry naming a negative time is refused.",
        ),
        pytest.param(
            {"kind": "workload", "workload": "w", "ts": 5.0, "portrait": None},
            "portrait: expected an object",
            id="A summary without a portrait or an expiry is refused.",
        ),
    ],
)
def test_a_bad_expiry_on_the_sequencer_is_named(said: dict[str, Any], error: str) -> None:
    with pytest.raises(InvalidInput, match=error):
        WorkloadSummary.from_json(said)


def test_an_expiry_crosses_the_sequencer_unchanged_and_a_summary_keeps_its_old_bytes() -> None:
    said = envelope(expiry("web", T0 + TTL, T0))
    assert decode_envelope(encode_envelope(said)) == said
    held = envelope(portrait_of("web", T0))
    assert b"expired" not in encode_envelope(held)  # logs written before expiries read the same
    assert decode_envelope(encode_envelope(held)) == held


def test_a_long_churn_of_workloads_leaves_the_shard_the_live_ones_only() -> None:
    samples = churn(2000)
    core, shard = MetricsCore(state_ttl=TTL), Shard()
    most = 0
    for start in range(0, len(samples), 500):
        shard.feed_all(envelope(s) for s in core.ingest(samples[start : start + 500]))
        most = max(most, len(shard.scheduler.snapshot.usage.workloads))
    held = shard.scheduler.snapshot.usage.workloads
    assert set(held) == set(core.workload_names()) and set(shard._portrait_ts) == set(held)
    assert most <= (30 + TTL) / 5 + 500 / 4 + 2  # live and within the ttl, plus a batch of slack
    assert shard.counters["workload_portraits_dropped"] == 2000 - len(held)


def test_a_checkpoint_taken_anywhere_resumes_the_expiries_as_the_shard_that_never_stopped() -> None:
    told = [envelope(s) for s in summaries(churn(60))]
    whole = Shard()
    whole.feed_all(told)
    for cut in (len(told) // 3, len(told) // 2, len(told) - 5):
        first = Shard()
        first.feed_all(told[:cut])
        restored, _ = decode_checkpoint(encode_checkpoint(first, cut))
        restored.feed_all(told[cut:])
        assert (
            restored.scheduler.snapshot.usage.workloads.keys()
            == whole.scheduler.snapshot.usage.workloads.keys()
        )
        assert restored._portrait_ts == whole._portrait_ts and restored.counters == whole.counters


def test_a_recorded_run_with_expiries_replays_offline_to_the_live_decisions_and_the_same_log(
    tmp_path: Path,
) -> None:
    nodes = [Envelope(Kind.NODE, T0, node(f"n{i}", str(4 + 2 * i)), "node-events/0") for i in range(3)]
    metrics = [envelope(s) for s in summaries(churn(40))]
    pods = [
        Envelope(Kind.POD, T0 + 5 * i + 1, pod(f"job-{i}-{n}", f"job-{i}", "500m"), "pod-requests/0")
        for i in range(0, 40, 3)
        for n in range(2)
    ]
    late = [
        Envelope(Kind.POD, T0 + 400, pod(f"late-{i}", f"job-{i}", "500m"), "pod-requests/0") for i in range(5)
    ]
    script = sorted([*nodes, *metrics, *pods], key=lambda e: e.ts) + late
    carried, live = simulated_live_run(script)
    assert any(e.kind is Kind.WORKLOAD and e.value.expired is not None for e in carried)
    log = write_placement_log(tmp_path / "placement.jsonl", {0: carried})
    again = write_placement_log(tmp_path / "again.jsonl", {0: carried})
    assert log.read_bytes() == again.read_bytes()
    assert b'"expired"' in log.read_bytes()
    offline = replay_offline(log, Settings())
    assert {d.uid: (d.node, d.status) for d in offline.decisions} == live
    assert offline.counters["workload_portraits_dropped"] > 0


def test_a_shard_remembers_a_bounded_number_of_deleted_nodes() -> None:
    shard = Shard()
    names = [f"n{i}" for i in range(REMOVED_NODES_KEPT + 10)]
    for name in names:
        shard.feed(Envelope(Kind.NODE, T0, node(name), "node-events/0"))
        shard.feed(
            Envelope(Kind.NODE, T0, NodeEvent(type="delete", node=NodeSpec(name=name)), "node-events/0")
        )
    assert list(shard._removed_nodes) == names[-REMOVED_NODES_KEPT:]
    shard.feed(Envelope(Kind.NODE, T0, node(names[-1]), "node-events/0"))
    assert names[-1] not in shard._removed_nodes


def test_an_infinite_ttl_never_says_a_workload_expired() -> None:
    core = MetricsCore(state_ttl=math.inf)
    told = core.ingest(churn(20))
    assert not [s for s in told if isinstance(s, WorkloadSummary) and s.expired is not None]
