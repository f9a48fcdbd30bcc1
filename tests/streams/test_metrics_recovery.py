"""The metrics agent's state bounded by live keys, not history: keys that stop being sampled (deleted pods,
pods without a workload, deleted nodes) expire after `state_ttl` of event time, their table entries are
deleted, and nothing a live key would tell placement changes."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from schemas.events import MetricSample
from schemas.exceptions import ConfigError
from streams.core.metrics import MetricsCore, NodeSummary, Summary, WorkloadSummary, state_clock
from streams.runtime.agents.metrics import SWEEP_FRACTION, MetricsTables
from streams.settings import Settings

T0 = 1_700_000_000.0 - 1_700_000_000.0 % 86400.0

# ------------------------------------------------------------------------------------------- builders


def node_sample(ts: float, node: str = "n1", cpu: float = 1.0) -> MetricSample:
    return MetricSample(ts=ts, node=node, values={"cpu": cpu, "memory": 1e9 + cpu})


def pod_sample(ts: float, pod: str, workload: str | None = None, cpu: float = 0.5) -> MetricSample:
    return MetricSample(ts=ts, node="n1", pod=pod, workload=workload, values={"cpu": cpu, "memory": 1e8})


@dataclass(frozen=True)
class Churn:
    """Pods arriving one a second, each living `life` seconds and sampled every `every` seconds; some
    `workloads` (always live) sampled alongside; `nodes` nodes, each replaced by a new one every
    `node_life` seconds (the old one deleted)."""

    pods: int
    life: float = 200.0
    every: float = 20.0
    workloads: int = 3
    nodes: int = 4
    node_life: float = 3000.0

    def samples(self) -> list[MetricSample]:
        """In event-time order, as a live stream brings them."""
        timed: list[tuple[float, int, MetricSample]] = []
        for index in range(self.pods):
            start = T0 + index
            steps = int(self.life // self.every)
            for step in range(steps):
                ts = start + step * self.every
                timed.append((ts, len(timed), pod_sample(ts, f"pod-{index}", cpu=0.1 + (index % 7) / 10)))
        end = T0 + self.pods + self.life
        t = T0
        while t < end:
            for workload in range(self.workloads):
                timed.append((t, len(timed), pod_sample(t, f"w{workload}-pod", f"web-{workload}", 1.0)))
            for slot in range(self.nodes):
                generation = int((t - T0) // self.node_life)
                timed.append((t, len(timed), node_sample(t, f"node-{slot}-{generation}", 2.0 + slot)))
            t += 10.0
        timed.sort(key=lambda item: (item[0], item[1]))
        return [sample for _, _, sample in timed]


def feed(core: MetricsCore, samples: list[MetricSample], batch: int) -> list[Summary]:
    out: list[Summary] = []
    for start in range(0, len(samples), batch):
        out += core.ingest(samples[start : start + batch])
    return out


def feed_tables(tables: MetricsTables, samples: list[MetricSample], batch: int) -> list[Summary]:
    """As the agent does: sweep, restore each sample's key, ingest, write back."""
    out: list[Summary] = []
    for start in range(0, len(samples), batch):
        tables.sweep_if_due()
        part = samples[start : start + batch]
        for sample in part:
            tables.restore(sample)
        summaries = tables.core.ingest(part)
        tables.store(summaries)
        out += summaries
    return out


def shape(summaries: list[Summary]) -> list[tuple[str, str, float, bool]]:
    """Which summaries went out, without their float values."""
    return [
        ("node", s.node, s.ts, s.portrait is not None)
        if isinstance(s, NodeSummary)
        else ("workload", s.workload, s.ts, s.expired is None)
        for s in summaries
    ]


def expiries_only(summaries: list[Summary]) -> list[WorkloadSummary]:
    return [s for s in summaries if isinstance(s, WorkloadSummary) and s.expired is not None]


def summaries_only(summaries: list[Summary]) -> list[Summary]:
    return [s for s in summaries if not isinstance(s, WorkloadSummary) or s.expired is None]


def rows(core: MetricsCore) -> tuple[int, int]:
    """Rows the core's stores hold, live or awaiting compaction."""
    return len(core.windows), len(core.workload_portraits)


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    ("churn", "ttl"),
    [
        pytest.param(
            Churn(20_000), 600.0, id="Twenty thousand pods without a workload through a live set of 200."
        ),
        pytest.param(
            Churn(25_000, life=60.0, every=10.0, node_life=500.0),
            120.0,
            id="Shorter lives, nodes replaced every few minutes and a short ttl.",
        ),
    ],
)
def test_the_core_and_its_tables_hold_the_live_keys_and_a_ttl_of_the_departed_whatever_the_history(
    churn: Churn, ttl: float
) -> None:
    samples = churn.samples()
    tables = MetricsTables(MetricsCore(state_ttl=ttl), {}, {})
    most_rows = most_entries = 0
    for start in range(0, len(samples), 1000):
        feed_tables(tables, samples[start : start + 1000], 1000)
        most_rows = max(most_rows, *rows(tables.core))
        most_entries = max(most_entries, len(tables.nodes) + len(tables.workloads))
    # Live at any moment: the pods of the last `life` seconds, and those departed within the ttl (plus a batch
    # of slack, as expiry runs per batch).
    bound = int(churn.life + ttl + 1000 / (churn.life / churn.every) + churn.workloads + 2 * churn.nodes)
    assert len(tables.core.workload_names()) <= bound
    assert most_entries <= bound
    assert most_rows <= 2 * bound + 64


def test_expiry_changes_nothing_a_live_key_tells_placement() -> None:
    samples = Churn(3000).samples()
    expiring, keeping = MetricsCore(state_ttl=600.0), MetricsCore()
    told = feed(expiring, samples, 500)
    expiries = [s for s in told if isinstance(s, WorkloadSummary) and s.expired is not None]
    # Every summary, bit for bit; and besides them, word of each workload forgotten (for placement).
    assert [s for s in told if s not in expiries] == feed(keeping, samples, 500)
    live = expiring.workload_names()
    assert len(expiries) == 3000 + 3 - len(live)
    assert {"web-0", "web-1", "web-2"} <= set(live)
    assert len(keeping.workload_names()) == 3000 + 3  # without expiry: every pod that ever ran
    assert len(live) < 1000
    for workload in live:
        assert expiring.workload_state(workload) == keeping.workload_state(workload)
    for node in expiring.node_names():
        assert expiring.node_state(node) == keeping.node_state(node)


def gap_stream() -> list[MetricSample]:
    """Keys that go quiet for the ttl (100 s) or longer and come back, among others that keep the clock
    going."""
    samples: list[MetricSample] = []
    for second in range(0, 400, 5):
        t = T0 + second
        samples.append(node_sample(t, "steady", cpu=1.0 + second % 3))
        if second < 50 or second >= 200:
            samples.append(node_sample(t, "flaky", cpu=3.0))
            samples.append(pod_sample(t, "bare", cpu=0.25 if second < 50 else 0.75))
        if second in (0, 100, 195, 295):
            samples.append(pod_sample(t, "edge", "edge-job", cpu=0.5))
    return samples


@pytest.mark.parametrize("batch", [1, 2, 7, 50, 1000], ids=lambda b: f"Batches of {b} sample(s).")
def test_a_key_back_after_more_than_the_ttl_starts_afresh_however_the_stream_is_cut(batch: int) -> None:
    samples = gap_stream()
    one_by_one, cut = MetricsCore(state_ttl=100.0), MetricsCore(state_ttl=100.0)
    reference = feed(one_by_one, samples, 1)
    assert shape(feed(cut, samples, batch)) == shape(reference)
    assert (cut.node_names(), cut.workload_names()) == (one_by_one.node_names(), one_by_one.workload_names())
    back = [
        s
        for s in reference
        if isinstance(s, WorkloadSummary) and s.workload == "bare" and s.ts >= T0 + 200 and s.expired is None
    ]
    assert back[0].portrait["cpu"][0] == (0.75, 0.0)  # hour 0 of the day, without the 0.25 of before
    # The edge job's gaps: 100 s, the ttl itself (expired: a first summary again), 95 s (kept: no summary
    # due before the portrait interval) and 100 s again.
    edge = [
        (s.ts - T0, None if s.expired is None else s.expired - T0)
        for s in reference
        if isinstance(s, WorkloadSummary) and s.workload == "edge-job"
    ]
    # Each expiry goes out at the clock that expired the key (before the sample that brings it back) and
    # names the key's newest sample; the last one comes with the stream's last samples.
    assert edge == [(0.0, None), (100.0, 0.0), (100.0, None), (295.0, 195.0), (295.0, None), (395.0, 295.0)]


@dataclass(frozen=True)
class TtlCase:
    name: str
    ttl: float
    error: bool


@pytest.mark.parametrize(
    "case",
    [
        TtlCase("A positive ttl is taken.", 60.0, False),
        TtlCase("An infinite ttl never forgets.", math.inf, False),
        TtlCase("A ttl of zero would forget every key at once, and is refused.", 0.0, True),
        TtlCase("A negative ttl is refused.", -1.0, True),
        TtlCase("NaN is refused.", math.nan, True),
    ],
    ids=lambda case: case.name,
)
def test_the_state_ttl_is_a_positive_number(case: TtlCase) -> None:
    if case.error:
        with pytest.raises(ConfigError, match="state_ttl"):
            MetricsCore(state_ttl=case.ttl)
    else:
        assert MetricsCore(state_ttl=case.ttl).state_ttl == case.ttl


def test_the_setting_defaults_to_a_day_and_zero_turns_expiry_off() -> None:
    assert Settings().metrics_state_ttl_s == 86_400.0
    assert Settings(metrics_state_ttl_s=0).metrics_state_ttl_s == 0.0
    with pytest.raises(ValueError):
        Settings(metrics_state_ttl_s=-1)


def test_a_state_header_gives_its_clock_without_a_restore() -> None:
    core = MetricsCore()
    core.ingest([node_sample(T0 + 5), pod_sample(T0 + 7, "p", "web")])
    node, workload = core.node_state("n1"), core.workload_state("web")
    assert node is not None and workload is not None
    assert (state_clock(node), state_clock(workload)) == (T0 + 5, T0 + 7)
    assert state_clock(b"EYN1") is None and state_clock(b"nonsense" * 10) is None


def test_a_restored_state_already_past_the_ttl_is_not_resumed() -> None:
    before = MetricsCore(state_ttl=100.0)
    before.ingest([pod_sample(T0, "p", "web", cpu=9.0)])
    saved = before.workload_state("web")
    assert saved is not None
    after = MetricsCore(state_ttl=100.0)
    after.ingest([node_sample(T0 + 500)])
    after.restore_workload("web", saved)
    expiry, summary = after.ingest([pod_sample(T0 + 501, "p", "web", cpu=1.0)])
    # Placement first hears that the old state is gone (at the clock that expired it), then the new one.
    assert expiry == WorkloadSummary("web", T0 + 500, None, T0)
    assert isinstance(summary, WorkloadSummary) and summary.portrait is not None
    cells = [cell for cell in summary.portrait["cpu"] if cell is not None]
    assert cells == [(1.0, 0.0)]
    assert after.take_expired() == ([], ["web"])


def test_expired_keys_are_deleted_from_the_tables_and_a_key_back_in_time_is_written_again() -> None:
    tables = MetricsTables(MetricsCore(state_ttl=100.0), {}, {})
    feed_tables(tables, [node_sample(T0, "gone"), pod_sample(T0, "bare"), node_sample(T0 + 50, "steady")], 10)
    assert set(tables.nodes) == {"gone", "steady"} and set(tables.workloads) == {"bare"}
    feed_tables(tables, [node_sample(T0 + 100, "steady")], 10)
    assert set(tables.nodes) == {"steady"} and set(tables.workloads) == set()
    feed_tables(tables, [node_sample(T0 + 101, "gone"), node_sample(T0 + 300, "gone")], 10)
    assert set(tables.nodes) == {"gone"}  # back: a fresh state; steady now expired in the same batch


def test_a_recovered_agent_holds_what_it_held_before_and_sweeps_what_it_never_loaded() -> None:
    samples = Churn(2000, workloads=2, nodes=2, node_life=700.0).samples()
    ttl = 300.0
    running = MetricsTables(MetricsCore(state_ttl=ttl), {}, {})
    feed_tables(running, samples, 500)
    # A restart: the tables as recovery leaves them (the changelog's last value per key, none for a
    # tombstone), a fresh core that has loaded nothing yet.
    recovered = MetricsTables(MetricsCore(state_ttl=ttl), dict(running.nodes), dict(running.workloads))
    assert recovered.sweep_if_due() == 0  # nothing expired was left behind
    assert recovered.core.clock == running.core.clock
    assert (recovered.nodes, recovered.workloads) == (running.nodes, running.workloads)
    for data in running.workloads.values():
        clock = state_clock(data)
        # Rewritten once a fraction of the ttl behind its key, so a held key's entry never looks expired.
        assert clock is not None and clock > running.core.clock - ttl * (1 + SWEEP_FRACTION)
    # Time goes on with only the always-live keys sampled: what the fresh core never loaded is swept once
    # it falls behind, and the live keys resume from their tables in both.
    end = running.core.clock
    node = max(name for name in running.core.node_names() if name.startswith("node-0-"))
    later = [pod_sample(end + t, "w0-pod", "web-0") for t in range(10, int(2 * ttl), 10)]
    later += [node_sample(end + t, node) for t in range(10, int(2 * ttl), 10)]
    later.sort(key=lambda s: s.ts)
    told_recovered, told_running = feed_tables(recovered, later, 10), feed_tables(running, later, 10)
    assert shape(summaries_only(told_recovered)) == shape(summaries_only(told_running))
    assert set(recovered.workloads) == set(running.workloads) == {"web-0"}
    # The workloads the running core expired, the recovered agent's sweep expired (later, by its margin):
    # placement hears of each either way.
    swept = recovered.take_expiries()
    assert {s.workload for s in swept} == {s.workload for s in expiries_only(told_running)} != set()
    assert all(s.expired is not None and s.ts - s.expired >= ttl for s in swept)
    assert set(recovered.nodes) == set(running.nodes) == {node}


def test_the_sweep_runs_once_per_fraction_of_the_ttl_and_leaves_the_margin_of_a_rewrite() -> None:
    old = MetricsCore()
    old.ingest([pod_sample(T0, "ghost")])
    ghost = old.workload_state("ghost")
    assert ghost is not None
    tables = MetricsTables(MetricsCore(state_ttl=100.0), {}, {"ghost": ghost})
    margin = 100.0 * (1 + SWEEP_FRACTION)  # an entry this far behind is certainly of an expired key
    tables.core.ingest([node_sample(T0 + 101)])
    assert tables.sweep_if_due() == 0 and tables.swept_at == T0 + 101  # the first: not yet that far
    tables.core.ingest([node_sample(T0 + margin)])
    assert tables.sweep_if_due() == 0 and "ghost" in tables.workloads  # that far, but no sweep due yet
    tables.core.ingest([node_sample(T0 + 101 + SWEEP_FRACTION * 100)])
    assert tables.sweep_if_due() == 1 and "ghost" not in tables.workloads


def test_a_held_key_sampled_without_summaries_has_its_entry_rewritten_before_it_could_look_expired() -> None:
    tables = MetricsTables(MetricsCore(state_ttl=1000.0), {}, {})
    written = []
    for t in range(0, 1000, 10):  # a workload summary goes out once per portrait interval (300 s)
        feed_tables(tables, [pod_sample(T0 + t, "p", "web")], 10)
        clock = state_clock(tables.workloads["web"])
        assert clock is not None
        written.append(clock)
    assert sorted(set(written)) == [T0, T0 + 250, T0 + 300, T0 + 550, T0 + 600, T0 + 850, T0 + 900]
