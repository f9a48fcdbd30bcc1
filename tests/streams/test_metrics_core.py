"""The metrics agent's pure core: when summaries go out (event time only), what they carry, and that they are
the same however the stream is cut into batches, replayed, or resumed from saved state."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pytest

from policies.explain import NodeState, build_scheduler
from policies.usage import PORTRAIT_METRICS as USAGE_PORTRAIT_METRICS
from policies.usage import WINDOW_METRICS as USAGE_WINDOW_METRICS
from portraits.hourly import HOURS, HourlyPortraits
from schemas.events import MetricSample
from schemas.exceptions import InvalidInput
from schemas.pod import PodRequest
from streams.core.metrics import (
    PORTRAIT_METRICS,
    WINDOW_METRICS,
    MetricsCore,
    NodeSummary,
    Summary,
    WorkloadSummary,
    summary_from_json,
)

T0 = 1_700_000_000.0 - 1_700_000_000.0 % 86400.0
"""A midnight UTC: hour h of the test day starts at T0 + 3600 h."""
HOUR = 3600.0

# ----------------------------------------------------------------------------------------------- builders


def node_sample(ts: float, *, node: str = "n1", **values: float) -> MetricSample:
    return MetricSample(ts=ts, node=node, values=values or {"cpu": 1.0})


def pod_sample(ts: float, pod: str = "p1", workload: str | None = "web", **values: float) -> MetricSample:
    return MetricSample(ts=ts, node="n1", pod=pod, workload=workload, values=values or {"cpu": 1.0})


def bad_sample(ts: float, **values: Any) -> MetricSample:
    """A sample that skipped validation (as a buggy producer in the same process could hand over)."""
    return MetricSample.model_construct(ts=ts, node="n1", pod=None, workload=None, values=values)


def feed(core: MetricsCore, samples: list[MetricSample], batch: int | None = None) -> list[Summary]:
    size = batch or max(len(samples), 1)
    out: list[Summary] = []
    for start in range(0, len(samples), size):
        out += core.ingest(samples[start : start + size])
    return out


def nodes_only(summaries: list[Summary]) -> list[NodeSummary]:
    return [s for s in summaries if isinstance(s, NodeSummary)]


def random_stream(count: int, nodes: int, seed: int, *, late: float = 0.0) -> list[MetricSample]:
    """Node and pod samples over a few nodes and workloads; a share `late` arrives up to 10 minutes late."""
    rng = random.Random(seed)
    samples, t = [], T0
    for _ in range(count):
        t += 3.0 * rng.random()
        ts = t - 600.0 * rng.random() if rng.random() < late else t
        node = f"n{rng.randrange(nodes)}"
        if rng.random() < 0.2:
            workload = rng.choice([None, "web", "db"])
            samples.append(pod_sample(ts, f"p{rng.randrange(9)}", workload, cpu=rng.random(), memory=1e8))
            continue
        values = {"cpu": 4.0 + rng.random(), "memory": 1e10 + 1e9 * rng.random()}
        if rng.random() < 0.3:
            values["bandwidth"] = 1e6 * rng.random()
        if rng.random() < 0.1:
            values = {"disk": 5e9}
        samples.append(node_sample(ts, node=node, **values))
    return samples


# ------------------------------------------------------------------------------------------------ basics


def test_window_and_portrait_metrics_are_the_ones_placement_reads() -> None:
    assert WINDOW_METRICS == USAGE_WINDOW_METRICS
    assert PORTRAIT_METRICS == USAGE_PORTRAIT_METRICS


def test_the_first_sample_of_a_node_yields_a_summary_with_window_portrait_and_seen() -> None:
    [summary] = MetricsCore().ingest([node_sample(T0 + 5 * HOUR + 7, cpu=2.0, memory=4e9, disk=1e9)])
    assert isinstance(summary, NodeSummary)
    assert (summary.node, summary.ts, summary.window_end) == ("n1", T0 + 5 * HOUR + 7, T0 + 5 * HOUR + 7)
    assert summary.window == {"cpu": (2.0, 0.0), "memory": (4e9, 0.0)}
    assert summary.portrait is not None and summary.seen is not None
    assert sorted(summary.portrait) == ["cpu", "disk", "memory"]
    assert summary.portrait["cpu"][5] == (2.0, 0.0)
    assert [h for h, cell in enumerate(summary.portrait["cpu"]) if cell is not None] == [5]
    assert summary.seen[5] == T0 + 5 * HOUR + 7
    assert all(t == -math.inf for h, t in enumerate(summary.seen) if h != 5)


@dataclass(frozen=True)
class IntervalCase:
    name: str
    offsets: list[float]
    """Sample times after T0, in arrival order; every sample has the same values (no move)."""
    sent: list[float]
    """Offsets of the node clock at each summary."""
    interval: float = 10.0


INTERVAL_CASES = [
    IntervalCase(
        "Samples closer than the interval send nothing until the clock is a full interval past the last.",
        [0, 4, 9.9, 10, 15, 19.9, 20],
        [0, 10, 20],
    ),
    IntervalCase("Every sample sends when they are an interval apart.", [0, 10, 20, 30], [0, 10, 20, 30]),
    IntervalCase(
        "A late sample does not move the clock back, so it cannot trigger the interval rule.",
        [0, 12, 5, 8, 22],
        [0, 12, 22],
    ),
    IntervalCase(
        "A sample far ahead of the last summary sends at once, stamped with its own time.",
        [0, 3, 3600],
        [0, 3600],
    ),
    IntervalCase("An interval of zero sends on every sample.", [0, 0, 1, 1], [0, 0, 1, 1], interval=0.0),
    IntervalCase(
        "A long interval keeps a steady node quiet after its first summary.", [0, 50, 90], [0], interval=100.0
    ),
]


@pytest.mark.parametrize("case", INTERVAL_CASES, ids=[c.name for c in INTERVAL_CASES])
@pytest.mark.parametrize("batch", [1, 3, 100], ids=["one by one", "in threes", "in one batch"])
def test_the_interval_rule_counts_event_time(case: IntervalCase, batch: int) -> None:
    core = MetricsCore(summary_interval=case.interval)
    out = feed(core, [node_sample(T0 + offset) for offset in case.offsets], batch)
    assert [s.ts - T0 for s in nodes_only(out)] == case.sent


def test_the_wall_clock_plays_no_part_samples_from_1970_summarise_like_any_other() -> None:
    out = feed(MetricsCore(), [node_sample(offset) for offset in (0.0, 5.0, 10.0)])
    assert [s.ts for s in out] == [0.0, 10.0]


@dataclass(frozen=True)
class MoveCase:
    name: str
    second: dict[str, float]
    """Values of a second sample 1 s after a first of cpu 1.0, memory 100."""
    sends: bool


MOVE_CASES = [
    MoveCase("The same values again send nothing before the interval.", {"cpu": 1.0, "memory": 100.0}, False),
    MoveCase(
        "A window mean 4 % up (cpu 1.08 beside 1.0) sends nothing.", {"cpu": 1.08, "memory": 100.0}, False
    ),
    MoveCase(
        "A window mean 6 % up (cpu 1.12 beside 1.0) sends at once.", {"cpu": 1.12, "memory": 100.0}, True
    ),
    MoveCase("A window mean 6 % down sends at once as well.", {"cpu": 1.0, "memory": 88.0}, True),
    MoveCase("Exactly 5 % is not more than 5 %.", {"cpu": 1.0, "memory": 110.0}, False),
    MoveCase("A metric appearing in the window counts as a move.", {"cpu": 1.0, "bandwidth": 5.0}, True),
    MoveCase("A sample of portrait-only metrics moves no window mean.", {"disk": 1e12}, False),
]


@pytest.mark.parametrize("case", MOVE_CASES, ids=[c.name for c in MOVE_CASES])
def test_a_move_of_more_than_five_percent_sends_a_summary_early(case: MoveCase) -> None:
    core = MetricsCore(summary_interval=10.0, move_threshold=0.05)
    first = core.ingest([node_sample(T0, cpu=1.0, memory=100.0)])
    second = core.ingest([MetricSample(ts=T0 + 1, node="n1", values=case.second)])
    assert len(first) == 1
    assert len(second) == int(case.sends)


def test_a_move_is_measured_against_the_last_summary_not_the_last_sample() -> None:
    # A one-second window holds only the newest sample, so its mean is that sample: 3 % steps each stay
    # under 5 % of the sample before, but the second step is 6.09 % from what was last sent.
    core = MetricsCore(summary_interval=1000.0, window=1.0, buckets=1)
    out = feed(core, [node_sample(T0 + 2.0 * i, cpu=1.03**i) for i in range(4)], batch=1)
    assert [round(s.window["cpu"][0], 4) for s in nodes_only(out)] == [1.0, 1.0609]


def test_portraits_go_out_at_most_every_portrait_interval_and_seen_travels_with_them() -> None:
    core = MetricsCore(summary_interval=10.0, portrait_interval=300.0)
    out = nodes_only(feed(core, [node_sample(T0 + 10.0 * i) for i in range(70)], batch=7))
    assert len(out) == 70
    with_portrait = [s.ts - T0 for s in out if s.portrait is not None]
    assert with_portrait == [0.0, 300.0, 600.0]
    assert all((s.portrait is None) == (s.seen is None) for s in out)


def test_a_portrait_carries_exactly_the_samples_up_to_the_one_that_triggered_it() -> None:
    core = MetricsCore(summary_interval=10.0, portrait_interval=20.0)
    values = [1.0, 3.0, 5.0, 7.0, 9.0]
    # One batch: the portrait at t=20 must not include the samples at 30 and 40 already in the batch.
    out = nodes_only(core.ingest([node_sample(T0 + 10.0 * i, cpu=v) for i, v in enumerate(values)]))
    portraits = {s.ts - T0: s.portrait["cpu"][0] for s in out if s.portrait is not None}
    assert portraits.keys() == {0.0, 20.0, 40.0}
    assert portraits[0.0] == (1.0, 0.0)
    # Decay weighs later samples a little more (1e-5 over seconds): means of 1, 3, 5 and of 1 … 9.
    assert portraits[20.0] is not None and math.isclose(portraits[20.0][0], 3.0, rel_tol=1e-4)
    assert portraits[40.0] is not None and math.isclose(portraits[40.0][0], 5.0, rel_tol=1e-4)
    seen_at_20 = next(s.seen for s in out if s.ts == T0 + 20.0)
    assert seen_at_20 is not None and seen_at_20[0] == T0 + 20.0


# --------------------------------------------------------------------------------------------- workloads


def test_pod_samples_feed_their_workloads_portrait_and_not_the_node() -> None:
    core = MetricsCore(portrait_interval=300.0)
    out = feed(
        core,
        [
            pod_sample(T0 + 2 * HOUR, "web-1", "web", cpu=1.0),
            pod_sample(T0 + 2 * HOUR + 1, "web-2", "web", cpu=3.0),
            pod_sample(T0 + 2 * HOUR + 2, "lonely", None, cpu=0.5),
            pod_sample(T0 + 2 * HOUR + 300, "web-1", "web", cpu=2.0),
        ],
        batch=1,
    )
    assert all(isinstance(s, WorkloadSummary) for s in out)
    assert [(s.workload, s.ts - T0 - 2 * HOUR) for s in out if isinstance(s, WorkloadSummary)] == [
        ("web", 0.0),
        ("lonely", 2.0),
        ("web", 300.0),
    ]
    last = out[-1]
    assert isinstance(last, WorkloadSummary)
    cell = last.portrait["cpu"][2]
    assert cell is not None and math.isclose(cell[0], 2.0, rel_tol=1e-6)
    assert core.node_state("n1") is None
    portrait = last.to_portrait()
    assert portrait is not None and portrait.metrics == PORTRAIT_METRICS
    assert portrait.has_data[:, 0].tolist() == [h == 2 for h in range(HOURS)]


def test_workload_portraits_agree_with_a_store_fed_one_sample_at_a_time() -> None:
    samples = [
        pod_sample(T0 + 97.0 * i, f"p{i % 4}", "web", cpu=0.1 * (i % 7), memory=1e6 * i) for i in range(200)
    ]
    core = MetricsCore(portrait_interval=600.0)
    out = [s for s in feed(core, samples, batch=64) if isinstance(s, WorkloadSummary)]
    store = HourlyPortraits(PORTRAIT_METRICS, max_future=None)
    expected = {}
    for sample in samples:
        store.update("web", sample.ts, sample.values)
        expected[sample.ts] = store.portrait("web")
    for summary in out:
        portrait, reference = summary.to_portrait(), expected[summary.ts]
        assert portrait is not None and reference is not None
        assert (portrait.has_data == reference.has_data).all()
        np.testing.assert_allclose(portrait.mean, reference.mean, rtol=1e-9)
        np.testing.assert_allclose(portrait.std, reference.std, rtol=1e-6, atol=1e-3)


# ----------------------------------------------------------------------------------------- determinism


def test_the_same_samples_twice_give_identical_summaries() -> None:
    samples = random_stream(3000, nodes=6, seed=3, late=0.2)
    first = feed(MetricsCore(portrait_interval=120.0), samples, batch=250)
    second = feed(MetricsCore(portrait_interval=120.0), samples, batch=250)
    assert first == second
    assert [s.to_json() for s in first] == [s.to_json() for s in second]


def reference_summaries(samples: list[MetricSample], *, window: float, buckets: int) -> list[tuple[Any, ...]]:
    """The metrics agent's forwarding rule (a summary every 10 s, or at once when a window mean moves by more
    than 5 %) sample by sample, in plain Python: (node, clock, window, window_end, portrait sent) per node
    summary. The sliding window is the list of samples whose bucket is within `buckets` of the newest."""
    width = window / buckets
    state: dict[str, dict[str, Any]] = {}
    sent = []
    for sample in samples:
        if sample.pod is not None:
            continue
        st = state.setdefault(
            sample.node,
            {"clock": -math.inf, "last": -math.inf, "portrait": -math.inf, "means": [], "kept": []},
        )
        st["clock"] = max(st["clock"], sample.ts)
        values = {m: v for m, v in sample.values.items() if m in WINDOW_METRICS}
        if values:
            bucket = math.floor(sample.ts / width)
            st["head"] = max(st.get("head", bucket), bucket)
            if bucket > st["head"] - buckets:
                st["kept"].append((bucket, sample.ts, values))
        kept = [k for k in st["kept"] if k[0] > st.get("head", 0) - buckets]
        stats = {}
        for metric in WINDOW_METRICS:
            xs = [k[2][metric] for k in kept if metric in k[2]]
            if xs:
                mean = sum(xs) / len(xs)
                stats[metric] = (mean, math.sqrt(max(sum(x * x for x in xs) / len(xs) - mean * mean, 0.0)))
        means = [stats[m][0] if m in stats else None for m in WINDOW_METRICS]
        due = st["clock"] - st["last"] >= 10.0 or any(
            (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) > 0.05 * b)
            for a, b in zip(means, st["means"] or [None] * 3, strict=True)
        )
        if st["last"] == -math.inf:
            due = True
        if due:
            st["last"], st["means"] = st["clock"], means
            portrait = st["clock"] - st["portrait"] >= 120.0
            if portrait:
                st["portrait"] = st["clock"]
            end = max((k[1] for k in st["kept"]), default=-math.inf)
            sent.append((sample.node, st["clock"], stats, end, portrait))
    return sent


@pytest.mark.parametrize("batch", [1, 17, 500, 1500], ids=lambda b: f"batches of {b}")
def test_batched_ingest_sends_what_the_reference_sends_sample_by_sample(batch: int) -> None:
    samples = random_stream(1500, nodes=4, seed=11, late=0.2)
    expected = reference_summaries(samples, window=600.0, buckets=10)
    core = MetricsCore(window=600.0, buckets=10, portrait_interval=120.0)
    got = nodes_only(feed(core, samples, batch))
    assert [(s.node, s.ts, s.window_end, s.portrait is not None) for s in got] == [
        (node, clock, end, portrait) for node, clock, _, end, portrait in expected
    ]
    for summary, (_, _, stats, _, _) in zip(got, expected, strict=True):
        assert summary.window.keys() == stats.keys()
        for metric, (mean, std) in stats.items():
            assert math.isclose(summary.window[metric][0], mean, rel_tol=1e-9)
            # Σx² − n·μ² cancels: memory (1e10 bytes) keeps about 6 significant digits of its std.
            assert math.isclose(summary.window[metric][1], std, rel_tol=1e-6, abs_tol=1e-6 * max(mean, 1.0))


def test_the_window_sent_last_matches_the_sliding_window_store() -> None:
    samples = random_stream(1500, nodes=4, seed=5, late=0.1)
    core = MetricsCore(summary_interval=0.0)
    out = nodes_only(feed(core, samples, batch=300))
    last = {s.node: s for s in out}
    for node, summary in last.items():
        stats = core.windows.key_stats(node, now=summary.ts)
        assert summary.window.keys() == stats.keys()
        for metric, (mean, std, _) in stats.items():
            assert math.isclose(summary.window[metric][0], mean, rel_tol=1e-12)
            assert math.isclose(summary.window[metric][1], std, rel_tol=1e-6, abs_tol=1.0)


# ------------------------------------------------------------------------------------------------- state


def test_a_core_restored_from_node_state_sends_the_portraits_an_uninterrupted_core_sends() -> None:
    # A sample per node every 10 s, so both cores send a summary on every sample and portraits on the same.
    rng = random.Random(7)
    samples = [
        node_sample(T0 + 10.0 * step + i, node=f"n{i}", cpu=rng.random(), memory=1e9 * rng.random(), disk=5.0)
        for step in range(400)
        for i in range(3)
    ]
    cut = 500
    whole = MetricsCore()
    before = feed(whole, samples[:cut], batch=100)
    after_whole = nodes_only(feed(whole, samples[cut:], batch=100))

    crashed = MetricsCore()
    assert feed(crashed, samples[:cut], batch=100) == before
    states = {node: crashed.node_state(node) for node in ("n0", "n1", "n2")}
    resumed = MetricsCore()
    for node, data in states.items():
        assert data is not None
        resumed.restore_node(node, data)
    after_resumed = nodes_only(feed(resumed, samples[cut:], batch=100))

    def portraits(out: list[NodeSummary]) -> list[tuple[str, float, Any, Any]]:
        return [(s.node, s.ts, s.portrait, s.seen) for s in out if s.portrait is not None]

    assert len(portraits(after_whole)) >= 9
    assert portraits(after_resumed) == portraits(after_whole)


def test_a_restored_workload_continues_its_portrait_exactly() -> None:
    samples = [pod_sample(T0 + 61.0 * i, "p", "web", cpu=0.01 * (i % 13)) for i in range(300)]
    whole = MetricsCore()
    feed(whole, samples[:120], batch=40)
    expected = feed(whole, samples[120:], batch=40)
    first = MetricsCore()
    feed(first, samples[:120], batch=40)
    data = first.workload_state("web")
    assert data is not None
    resumed = MetricsCore()
    resumed.restore_workload("web", data)
    assert feed(resumed, samples[120:], batch=40) == expected


def test_restoring_replaces_what_the_core_knew_and_rejects_garbage_with_the_key_named() -> None:
    source = MetricsCore()
    source.ingest([node_sample(T0, cpu=2.0)])
    data = source.node_state("n1")
    assert data is not None and len(data) < 4096
    target = MetricsCore()
    target.ingest([node_sample(T0 + 100 * HOUR, cpu=9.0)])
    target.restore_node("n1", data)
    assert target.node_state("n1") == data
    for garbage in (b"", b"EYN1" + b"\0" * 10, b"XXXX" + data[4:], data[:-8]):
        with pytest.raises(InvalidInput, match="'n1'"):
            target.restore_node("n1", garbage)
    assert target.node_state("n1") == data
    with pytest.raises(InvalidInput, match="'web'"):
        target.restore_workload("web", data)


# ------------------------------------------------------------------------------------------------- flush


def test_flush_sends_every_unsent_change_once_and_then_nothing() -> None:
    core = MetricsCore(summary_interval=10.0, portrait_interval=300.0)
    feed(
        core, [node_sample(T0 + i, cpu=1.0) for i in range(5)] + [pod_sample(T0 + i, cpu=0.5) for i in (3, 4)]
    )
    flushed = core.flush(T0 + 5)
    assert [type(s).__name__ for s in flushed] == ["NodeSummary", "WorkloadSummary"]
    node = flushed[0]
    assert isinstance(node, NodeSummary)
    assert node.ts == T0 + 4 and node.portrait is not None and node.window["cpu"] == (1.0, 0.0)
    assert core.flush(T0 + 5) == []


def test_flush_reads_windows_as_of_now_without_moving_them() -> None:
    core = MetricsCore(window=600.0, buckets=10)
    core.ingest([node_sample(T0, cpu=1.0), node_sample(T0 + 1, cpu=1.0)])
    [late] = core.flush(T0 + 3600.0)
    assert isinstance(late, NodeSummary) and late.window == {} and late.window_end == T0 + 1
    # The window itself did not slide: a sample just after the old ones still joins them.
    [next_summary] = core.ingest([node_sample(T0 + 2, cpu=4.0)])
    assert isinstance(next_summary, NodeSummary)
    assert next_summary.window["cpu"][0] == 2.0


# --------------------------------------------------------------------------------------------- bad input


def test_bad_samples_are_counted_by_reason_and_never_raised() -> None:
    core = MetricsCore()
    out = core.ingest(
        [
            bad_sample(T0, cpu=float("nan")),
            bad_sample(T0, cpu=-1.0),
            bad_sample(T0, cpu=1e19),
            bad_sample(T0, cpu=float("inf")),
            bad_sample(float("nan"), cpu=1.0),
            bad_sample(T0, cpu="lots"),
            node_sample(T0, gpu_util=0.5),
            node_sample(T0, cpu=1.0, gpu_util=0.5),
            node_sample(T0 + 7200.0, cpu=1.0),
        ],
        now=T0,
    )
    assert core.counters.rejected == {
        "value not finite": 3,
        "negative value": 1,
        "absurd value": 1,
        "timestamp not finite, negative or after year 9999": 1,
        "no metric values": 1,
        "timestamp in the future": 1,
    }
    assert core.counters.accepted == 1
    assert core.counters.ignored_metrics == 2
    assert [s.window for s in nodes_only(out)] == [{"cpu": (1.0, 0.0)}]


def test_samples_older_than_the_window_still_feed_the_portrait_and_are_counted() -> None:
    core = MetricsCore(window=600.0, buckets=10, summary_interval=0.0)
    out = nodes_only(feed(core, [node_sample(T0 + 3600.0, cpu=1.0), node_sample(T0, cpu=3.0)], batch=1))
    assert core.counters.dropped_old == 1 and core.counters.accepted == 2
    assert [s.window["cpu"][0] for s in out] == [1.0, 1.0]
    portrait = core.node_portraits.portrait("n1")
    assert portrait is not None and portrait.has_data[0, 0]


# ------------------------------------------------------------------------------------------------ wire


def _full_node_summary() -> NodeSummary:
    core = MetricsCore()
    [summary] = core.ingest([node_sample(T0 + 3 * HOUR, cpu=0.25, memory=3e9, bandwidth=0.0)])
    assert isinstance(summary, NodeSummary)
    return summary


def test_summaries_survive_a_json_round_trip_through_bytes() -> None:
    node = _full_node_summary()
    quiet = NodeSummary("n2", 12.5, {}, -math.inf, None, None)
    workload = WorkloadSummary("web", 3.0, {"cpu": [None] * 23 + [(0.5, 0.125)]})
    for summary in (node, quiet, workload):
        wire = orjson.loads(orjson.dumps(summary.to_json()))
        assert type(summary).from_json(wire) == summary
        assert summary_from_json(wire) == summary
    assert orjson.loads(orjson.dumps(node.to_json()))["seen"][0] is None


def _with(change: dict[str, Any]) -> dict[str, Any]:
    data = _full_node_summary().to_json()
    for path, value in change.items():
        target = data
        *parents, last = path.split(".")
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if value is _DELETE:
            del target[last]
        elif isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return data


_DELETE = object()


@dataclass(frozen=True)
class BadFieldCase:
    name: str
    change: dict[str, Any]
    field: str


BAD_FIELD_CASES = [
    BadFieldCase("A missing node is named.", {"node": _DELETE}, "node"),
    BadFieldCase("An empty node name is named.", {"node": ""}, "node"),
    BadFieldCase("A negative ts is named.", {"ts": -1.0}, "ts"),
    BadFieldCase("A boolean ts is named.", {"ts": True}, "ts"),
    BadFieldCase(
        "A window metric placement does not know is named.", {"window.gpu": [1.0, 0.0]}, "window.gpu"
    ),
    BadFieldCase("A window pair of three numbers is named.", {"window.cpu": [1.0, 0.0, 2.0]}, "window.cpu"),
    BadFieldCase("A NaN std in the window is named.", {"window.cpu": [1.0, float("nan")]}, "window.cpu"),
    BadFieldCase("A string window_end is named.", {"window_end": "soon"}, "window_end"),
    BadFieldCase("A portrait metric nobody keeps is named.", {"portrait.gpu": [None] * 24}, "portrait.gpu"),
    BadFieldCase("A portrait of 23 hours is named.", {"portrait.cpu": [None] * 23}, "portrait.cpu"),
    BadFieldCase(
        "A negative hourly mean is named with its hour.", {"portrait.cpu.3": [-1.0, 0.0]}, "portrait.cpu.3"
    ),
    BadFieldCase("A seen list of the wrong length is named.", {"seen": [None] * 3}, "seen"),
    BadFieldCase("A seen hour that is not a time is named.", {"seen.4": "x"}, "seen.4"),
    BadFieldCase("A portrait without seen is refused on seen.", {"seen": None}, "seen"),
    BadFieldCase("An unknown field is named.", {"colour": "red"}, "colour"),
    BadFieldCase(
        "A workload summary sent as a node summary is refused on kind.", {"kind": "workload"}, "kind"
    ),
]


@pytest.mark.parametrize("case", BAD_FIELD_CASES, ids=[c.name for c in BAD_FIELD_CASES])
def test_from_json_rejects_a_bad_field_with_one_line_naming_it(case: BadFieldCase) -> None:
    with pytest.raises(InvalidInput) as caught:
        NodeSummary.from_json(_with(case.change))
    assert caught.value.field == case.field
    assert str(caught.value).startswith(f"{case.field}: ")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("data", "field_name"),
    [
        ({"kind": "workload", "workload": "w", "ts": 1.0}, "portrait"),
        ({"workload": "w", "ts": 1.0, "portrait": None}, "portrait"),
        ({"workload": 7, "ts": 1.0, "portrait": {}}, "workload"),
        ({"workload": "w", "ts": 1.0, "portrait": {"cpu": [[1.0, 0.0]] * 24}, "window": {}}, "window"),
    ],
    ids=[
        "A workload summary without a portrait is refused on portrait.",
        "A null workload portrait is refused on portrait.",
        "A workload that is not a string is named.",
        "A node field in a workload summary is an unknown field.",
    ],
)
def test_workload_from_json_rejects_a_bad_field_naming_it(data: dict[str, Any], field_name: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        WorkloadSummary.from_json(data)
    assert caught.value.field == field_name


def test_from_json_refuses_what_is_not_an_object_and_summary_from_json_needs_a_kind() -> None:
    with pytest.raises(InvalidInput, match="JSON object"):
        NodeSummary.from_json([1, 2])
    with pytest.raises(InvalidInput, match=r"^kind: "):
        summary_from_json({"node": "n1"})


# ------------------------------------------------------------------------------------------- placement


def test_summaries_plug_into_node_usage_and_seen_releases_a_pod_hour_by_hour() -> None:
    scheduler = build_scheduler(
        [NodeState.model_validate({"name": "n1", "capacity": {"cpu": "8", "memory": "16Gi", "pods": 110}})]
    )
    snapshot = scheduler.snapshot
    usage, row = snapshot.usage, snapshot.row_of("n1")
    core = MetricsCore()
    # A sample per hour: each one is a portrait interval past the last, so the last summary has all 24.
    workload = core.ingest([pod_sample(T0 + h * HOUR, "old", "web", cpu=0.5) for h in range(HOURS)])[-1]
    assert isinstance(workload, WorkloadSummary) and core.flush(T0 + HOURS * HOUR) == []
    portrait = workload.to_portrait()
    assert portrait is not None
    usage.set_workload_portrait("web", portrait)
    pod = PodRequest.model_validate({"uid": "web-1", "workload": "web", "requests": {"cpu": "1"}})
    snapshot.assume(snapshot.pod_info(pod), row, at=T0 + 2.5 * HOUR)

    # The node is sampled in hour 1 (before the pod arrived) and hour 3 (after).
    summary = core.ingest([node_sample(T0 + 1 * HOUR, cpu=2.0), node_sample(T0 + 3 * HOUR, cpu=2.5)])[-1]
    assert isinstance(summary, NodeSummary) and summary.seen is not None
    node_portrait = summary.to_portrait()
    assert node_portrait is not None
    usage.set_window(row, summary.window, summary.window_end)
    usage.set_node_portrait(row, node_portrait, seen=np.array(summary.seen))
    base = usage.base_mean[row, :, PORTRAIT_METRICS.index("cpu")]
    assert base[3] == pytest.approx(2.5)  # measured after the pod: the portrait already holds it
    assert base[1] == pytest.approx(2.0 + 0.5)  # measured before it: the pod's workload portrait adds
    assert base[5] == pytest.approx(0.5)  # never measured: the pod alone
