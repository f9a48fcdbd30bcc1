"""Faults while a 20,000-pod log replays through a real broker, worker and applier.

Each case injects one fault mid-replay; afterwards every pod must have exactly one final decision (applied
or unschedulable), no node may ever have held more than its allocatable in the applier's ledger (walked
over the whole bindings stream, not only the end state), and every pod's node must equal a clean offline
replay of the same log. The figures of each case go into one table, printed at the end of the session
(`make test-faults`).

The module starts its own broker (the broker fault stops it), so it never disturbs the session's broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.recovery import topic_bytes
from schemas.eventlog import read_events
from schemas.events import Binding, BindingResult
from schemas.node import NodeEvent
from schemas.pod import PodDeleted, PodRequest
from streams.client import EyrieClient, latest_decisions
from streams.demo.workload import NODE_SECONDS_PER_ARRIVAL, generate_gpu_like_log
from streams.local.broker import LocalBroker, free_ports
from streams.recording.replay import OfflineResult, replay_live, replay_offline
from streams.settings import Settings
from tests.faults.table import FaultRow, checkpoint_settings, record_row
from tests.streams.test_pipeline import Pipeline, start_pipeline

REBUILT = re.compile(
    r"shard \d+(?: rebuilt from \d+ envelopes|: replayed sequencer records \S+"
    r"|: restored from checkpoint \w+ at offset \d+ \(\d+ records behind \d+\)) in ([0-9.]+) s"
)
"""A worker's log line for a shard it rebuilt (older workers worded it the first way): from the sequencer,
or from a checkpoint and the sequencer's records after it."""

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PODS = 20_000
NODES = 200
LOAD_DIVISOR = 4.0
"""Arrivals 4× sparser than the demo's (busy but not saturated): with the demo's load a third of the pods
wait unschedulable and retry on every deletion, which measures the queue rather than the faults."""
FINAL = {"applied", "unschedulable"}
SETTLED = FINAL | {"rejected", "conflict"}
"""What a pod's last result can be once nothing more happens to it (the quiet period tells): rejected, or a
conflict nothing followed, is a failure here, reported rather than waited out."""
QUIET_S = 5.0
CHECKPOINT_EVERY = 100
"""Sequencer records between checkpoints in the cases that checkpoint often: the replay's few thousand
records then hold a dozen checkpoints, so every kill lands after some (the default, 1,000 records or 15 s,
is rarely reached before the first fault of a flat-out replay)."""
TIMEOUT_S = 600.0

# ------------------------------------------------------------------------------------------- builders


@dataclass
class Progress:
    """binding-results as they arrive: when, and each pod's statuses; and the bindings placement sent, by
    when their producer created them (wall clock) and when they arrived here."""

    arrivals: list[float] = field(default_factory=list)
    latest: dict[str, str] = field(default_factory=dict)
    bindings: list[tuple[float, float]] = field(default_factory=list)

    def count(self) -> int:
        return len(self.arrivals)

    def first_after(self, moment: float) -> float | None:
        return next((t for t in self.arrivals if t > moment), None)

    def first_binding_created_after(self, wall: float) -> float | None:
        """When the first binding created after `wall` arrived here (monotonic)."""
        return next((arrived for created, arrived in self.bindings if created > wall), None)


async def follow(settings: Settings, progress: Progress, stop: asyncio.Event) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, group_id=None)
    await consumer.start()
    try:
        results, bindings = settings.topic("binding-results"), settings.topic("bindings")
        partitions = [TopicPartition(t, p) for t in (results, bindings) for p in range(settings.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        while not stop.is_set():
            with contextlib.suppress(Exception):  # the broker fault: keep polling until it is back
                batches = await consumer.getmany(timeout_ms=200, max_records=5000)
                now = time.monotonic()
                for messages in batches.values():
                    for message in messages:
                        value = orjson.loads(message.value)
                        if message.topic == results:
                            progress.arrivals.append(now)
                            progress.latest[value["uid"]] = value["status"]
                        elif "kind" not in value:  # a binding, not a release (PodDeleted)
                            progress.bindings.append((message.timestamp / 1000, now))
    finally:
        await consumer.stop()


async def until(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.2)


def owner_of_placement(ports: dict[str, int], settings: Settings) -> str:
    """Which named worker consumes the sequencer partition now (from its /health)."""
    sequencer = settings.topic("sequencer")
    for name, port in ports.items():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            if json.loads(response.read()).get("assigned", {}).get(sequencer):
                return name
    raise AssertionError("no worker owns the sequencer partition")


@dataclass
class Context:
    pipeline: Pipeline
    broker: LocalBroker
    progress: Progress
    ports: dict[str, int]


async def at_share(context: Context, share: float) -> None:
    progress = context.progress
    await until(
        lambda: progress.count() >= share * PODS, f"{share:.0%} of the results ({progress.count()} so far)"
    )


@dataclass(frozen=True)
class Injection:
    """One fault, in monotonic time. Recovery is measured to the first result after `resumed`, or, for a
    takeover, to the first binding the worker that took over decided."""

    injected: float
    resumed: float
    takeover: bool = False


Fault = Callable[[Context], Awaitable[list[Injection]]]
"""Injects a fault; returns one `Injection` per fault."""


async def kill_worker_twice(context: Context) -> list[Injection]:
    times = []
    for share in (0.25, 0.6):
        await at_share(context, share)
        injected = time.monotonic()
        context.pipeline.kill("worker")
        await asyncio.sleep(1)
        context.pipeline.start("worker")
        times.append(Injection(injected, time.monotonic()))
    return times


async def kill_applier(context: Context) -> list[Injection]:
    await at_share(context, 0.4)
    injected = time.monotonic()
    context.pipeline.kill("applier")
    await asyncio.sleep(1)
    context.pipeline.start("applier")
    return [Injection(injected, time.monotonic())]


async def stop_broker(context: Context) -> list[Injection]:
    await at_share(context, 0.4)
    injected = time.monotonic()
    await asyncio.to_thread(context.broker.down)
    await asyncio.sleep(10)
    await asyncio.to_thread(context.broker.up, 120.0)
    return [Injection(injected, time.monotonic())]


async def kill_active_of_two_workers(context: Context) -> list[Injection]:
    await at_share(context, 0.4)
    owner = owner_of_placement(context.ports, context.pipeline.settings)
    injected = time.monotonic()
    context.pipeline.kill(owner)
    return [Injection(injected, injected, takeover=True)]


def ledger_overcommitted(
    log: Path, bindings_stream: list[Binding | PodDeleted], results: list[BindingResult]
) -> set[str]:
    """Nodes that ever held more than their allocatable in the applier's ledger: the bindings topic (in
    per-node order) replayed with the bookings the applier reported as applied, and its releases."""
    allocatable = {
        e.value.node.name: dict(e.value.node.allocatable)
        for e in read_events(log)
        if isinstance(e.value, NodeEvent)
    }
    applied = {(r.uid, r.attempt) for r in results if r.status == "applied"}
    booked: dict[str, Binding] = {}
    released: set[str] = set()  # the ledger never books a deleted uid again (a resent binding is re-answered)
    held: dict[str, Counter[str]] = {name: Counter() for name in allocatable}
    over: set[str] = set()
    for record in bindings_stream:
        if isinstance(record, Binding):
            if (
                (record.uid, record.attempt) in applied
                and record.uid not in booked
                and record.uid not in released
            ):
                booked[record.uid] = record
                held[record.node].update(dict(record.requests))
                if any(
                    amount > allocatable[record.node].get(r, 0) for r, amount in held[record.node].items()
                ):
                    over.add(record.node)
        elif record.uid in booked:
            gone = booked.pop(record.uid)
            held[gone.node].subtract(dict(gone.requests))
            released.add(record.uid)
    return over


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a fault run did to the pods: each set names pods (or, for `overcommitted`, nodes)."""

    lost: set[str]
    """Without a final decision."""
    duplicated: set[str]
    """Applied on two nodes."""
    overcommitted: set[str]
    differing: list[str]
    """Bound elsewhere than the offline replay binds them."""

    def assert_clean(self) -> None:
        assert not self.lost, f"{len(self.lost)} pods without a final decision, e.g. {sorted(self.lost)[:3]}"
        assert not self.duplicated, (
            f"{len(self.duplicated)} pods applied on two nodes, e.g. {sorted(self.duplicated)[:3]}"
        )
        assert not self.overcommitted, f"nodes over allocatable: {sorted(self.overcommitted)[:5]}"
        assert not self.differing, (
            f"{len(self.differing)} pods placed unlike the offline replay, e.g. {self.differing[:3]}"
        )


async def settle(
    uids: Iterable[str], progress: Progress, stop: asyncio.Event, follower: asyncio.Task[None]
) -> None:
    """Waits until every pod is final and nothing has arrived for `QUIET_S` (a retried pod may still turn
    from unschedulable to applied until then), then stops the follower."""
    uids = list(uids)

    def final() -> int:
        return sum(1 for uid in uids if progress.latest.get(uid) in SETTLED)

    await until(lambda: final() == len(uids), f"every pod final ({final()} of {len(uids)})")
    await until(lambda: time.monotonic() - progress.arrivals[-1] > QUIET_S, "quiet")
    stop.set()
    await follower


def judge(
    uids: Iterable[str],
    stream: list[Binding | PodDeleted],
    results: list[BindingResult],
    log: Path,
    offline: OfflineResult,
) -> Verdict:
    """The verdict of a run from what the bindings and binding-results topics hold, against the offline
    replay of the same log."""
    uids = list(uids)
    latest = {
        d.uid: d
        for d in latest_decisions(
            {b.uid: b for b in stream if isinstance(b, Binding)}, {r.uid: r for r in results}
        )
    }
    lost = {uid for uid in uids if latest.get(uid) is None or latest[uid].status not in FINAL}
    applied_nodes: dict[str, set[str]] = {}
    for result in results:
        if result.status == "applied":
            applied_nodes.setdefault(result.uid, set()).add(result.node or "")
    duplicated = {uid for uid, nodes in applied_nodes.items() if len(nodes) > 1}
    offline_nodes = {d.uid: d.node for d in offline.decisions}
    differing = sorted(uid for uid in uids if latest.get(uid) and latest[uid].node != offline_nodes.get(uid))
    return Verdict(lost, duplicated, ledger_overcommitted(log, stream, results), differing)


async def read_outputs(settings: Settings) -> tuple[list[Binding | PodDeleted], list[BindingResult]]:
    stream: list[Binding | PodDeleted] = []
    results: list[BindingResult] = []
    async with EyrieClient(settings, create_topics=False) as client:
        async for _, decoded in client.records(["bindings", "binding-results"]):
            value = decoded.value
            if isinstance(value, Binding | PodDeleted):
                stream.append(value)
            elif isinstance(value, BindingResult):
                results.append(value)
    return stream, results


# ------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    if shutil.which("java") is None:
        pytest.skip("the fault tests start their own Kafka broker, which needs java")
    port, controller = free_ports(2)
    local = LocalBroker(port, tmp_path_factory.mktemp("fault-broker"), controller)
    local.up(timeout=120.0)
    yield local
    local.down()


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, OfflineResult]:
    log = tmp_path_factory.mktemp("faults") / "workload.jsonl"
    gap = NODE_SECONDS_PER_ARRIVAL / NODES * LOAD_DIVISOR
    generate_gpu_like_log(log, nodes=NODES, pods=PODS, mean_interarrival_s=gap, metrics=False)
    return log, replay_offline(log, Settings())


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    ("fault", "inject", "workers", "checkpoint_every"),
    [
        pytest.param(
            "worker SIGKILL ×2",
            kill_worker_twice,
            1,
            None,
            id="The placement worker is killed with SIGKILL and restarted, twice.",
        ),
        pytest.param(
            "applier SIGKILL", kill_applier, 1, None, id="The applier is killed with SIGKILL and restarted."
        ),
        pytest.param(
            "broker stopped 10 s",
            stop_broker,
            1,
            None,
            id="The broker stops for 10 seconds and starts again.",
        ),
        pytest.param(
            "2 workers, active killed",
            kill_active_of_two_workers,
            2,
            None,
            id="Two placement workers run at once and the active one is killed; the standby takes over.",
        ),
        pytest.param(
            "worker SIGKILL ×2",
            kill_worker_twice,
            1,
            CHECKPOINT_EVERY,
            id="The worker is killed twice while it checkpoints its shard often; each restart restores one.",
        ),
        pytest.param(
            "2 workers, active killed",
            kill_active_of_two_workers,
            2,
            CHECKPOINT_EVERY,
            id="Of two workers checkpointing often, the active one is killed; the other restores one.",
        ),
    ],
)
def test_after_the_fault_every_pod_is_decided_once_no_node_overfills_and_live_equals_offline(
    fault: str,
    inject: Fault,
    workers: int,
    checkpoint_every: int | None,
    broker: LocalBroker,
    workload: tuple[Path, OfflineResult],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log, offline = workload
    if checkpoint_every is not None:  # else the settings' defaults, which a flat-out replay rarely reaches
        monkeypatch.setenv("EYRIE_CHECKPOINT_EVERY_ENVELOPES", str(checkpoint_every))
    uids = {e.value.uid for e in read_events(log) if isinstance(e.value, PodRequest)}
    named = [f"worker-{i}" for i in range(workers)] if workers > 1 else []
    ports = dict(zip(named, free_ports(len(named)), strict=True))
    pipeline = start_pipeline(broker.bootstrap, tmp_path, web_ports=None)
    if workers > 1:
        pipeline.kill("worker")
        for name, port in ports.items():
            pipeline.start("worker", "--web-port", str(port), name=name)
    try:

        async def scenario() -> list[float]:
            progress = Progress()
            stop = asyncio.Event()
            follower = asyncio.create_task(follow(pipeline.settings, progress, stop))
            replay = asyncio.create_task(replay_live(log, pipeline.settings))
            times = await inject(Context(pipeline, broker, progress, ports))
            await replay
            await settle(uids, progress, stop, follower)
            recovery = []
            for injection in times:
                if injection.takeover:
                    # The first result after a kill may answer a binding the killed worker sent before it
                    # died; what shows the takeover is the first binding created after the kill, which
                    # only the worker that took over can have sent (producers stamp their wall clock).
                    kill_wall = time.time() - (time.monotonic() - injection.injected)
                    first = progress.first_binding_created_after(kill_wall)
                else:
                    # From the fault to the first result after the process or broker is back.
                    first = progress.first_after(injection.resumed)
                assert first is not None, "no result after the fault"
                recovery.append(first - injection.injected)
            return recovery

        recovery = asyncio.run(scenario())
        stream, results = asyncio.run(read_outputs(pipeline.settings))
        sequencer = pipeline.settings.topic("sequencer")
        sequencer_bytes = asyncio.run(topic_bytes(pipeline.settings, [sequencer]))[sequencer]
    finally:
        pipeline.stop()
    rebuilds = [float(seconds) for seconds in REBUILT.findall(pipeline.logs())]

    verdict = judge(uids, stream, results, log, offline)
    record_row(
        FaultRow(
            fault=fault,
            pods=len(uids),
            lost=len(verdict.lost),
            duplicated=len(verdict.duplicated),
            overcommitted=len(verdict.overcommitted),
            recovery_s=max(recovery),
            differing=len(verdict.differing),
            rebuild_s=max(rebuilds, default=0.0),
            sequencer_bytes=sequencer_bytes,
            checkpoints=checkpoint_settings(
                pipeline.settings.checkpoint_every_envelopes, pipeline.settings.checkpoint_every_s
            ),
        )
    )
    verdict.assert_clean()
    if checkpoint_every is not None:  # the worker that took over started from a checkpoint
        assert "restored from checkpoint" in pipeline.logs()
