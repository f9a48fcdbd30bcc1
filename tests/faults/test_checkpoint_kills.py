"""The placement worker killed (SIGKILL) at seeded points of a live replay while it checkpoints its shard
every few hundred sequencer records, once while a checkpoint is half written, and restarted each time.

Afterwards every pod must have exactly one final decision, no node may ever have held more than its
allocatable in the applier's ledger, and every pod must be bound to the node a clean offline replay of the
same log chose: a restored checkpoint plus the sequencer's tail is the state the killed worker had. The
half-written checkpoint must have been noticed (its slot unreadable, the other one used). The run's figures
go into the fault table.

It runs on the session's broker (it never stops the broker), so it runs wherever the Kafka tests do.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.recovery import topic_bytes
from schemas.eventlog import read_events
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodRequest
from streams.core.checkpoint import decode_checkpoint
from streams.core.sequencer import Envelope, Kind
from streams.core.shard import Shard
from streams.demo.processes import start_role
from streams.demo.workload import NODE_SECONDS_PER_ARRIVAL, generate_gpu_like_log
from streams.recording.replay import OfflineResult, replay_live, replay_offline
from streams.runtime.agents.placement import PAUSE_BEFORE_MANIFEST_ENV, checkpoint_write
from streams.runtime.checkpoint_slots import CheckpointRecords, slot_key
from streams.settings import Settings
from tests.faults.table import FaultRow, checkpoint_settings, record_row
from tests.faults.test_faults import (
    REBUILT,
    Progress,
    follow,
    judge,
    read_outputs,
    settle,
    until,
)
from tests.streams.test_pipeline import Pipeline, start_pipeline

PODS = 3_000
NODES = 100
LOAD_DIVISOR = 4.0
"""As the fault cases': busy nodes, but not a queue of unschedulable pods retried on every deletion."""
RATE = 400.0
"""Events per second of the live replay: batches of a few envelopes, so many sequencer records."""
CHECKPOINT_EVERY = 100
"""Sequencer records between checkpoints: a dozen or more in the run, so every kill lands after some."""
SEED = 20261126
KILLS = 3
"""Kills at seeded points of the run; the second one cuts a checkpoint short."""
HALF_WRITTEN = 1
PAUSE_S = 120.0
"""How long the half-writing worker waits before its manifest: longer than the test takes to kill it."""

# ------------------------------------------------------------------------------------------- builders


def kill_points(seed: int, kills: int) -> list[float]:
    """Shares of the pods' results at which to kill, sorted, spread over the middle of the run."""
    rng = random.Random(seed)
    return sorted(rng.uniform(0.15, 0.85) for _ in range(kills))


def start_half_writing_worker(pipeline: Pipeline, name: str) -> Path:
    """A worker that stops between its first checkpoint's parts and manifest; returns its log."""
    env = {**pipeline.env, PAUSE_BEFORE_MANIFEST_ENV: str(PAUSE_S)}
    suffix = name.removeprefix("worker")
    pipeline.processes[name] = start_role("worker", env, pipeline.workdir, suffix=suffix)
    return pipeline.workdir / f"worker{suffix}.log"


async def logged(path: Path, line: str) -> None:
    await until(lambda: line in path.read_text(errors="replace"), f"{line!r} in {path.name}")


async def reached(progress: Progress, share: float, total: int) -> None:
    await until(lambda: progress.count() >= share * total, f"{share:.0%} of the results ({progress.count()})")


async def first_binding_after(progress: Progress, wall: float) -> float:
    """When (monotonic) the first binding created after `wall` (a kill) arrived: the restarted worker's."""
    await until(lambda: progress.first_binding_created_after(wall) is not None, "a binding after the kill")
    first = progress.first_binding_created_after(wall)
    assert first is not None
    return first


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, OfflineResult]:
    log = tmp_path_factory.mktemp("kills") / "workload.jsonl"
    gap = NODE_SECONDS_PER_ARRIVAL / NODES * LOAD_DIVISOR
    generate_gpu_like_log(log, nodes=NODES, pods=PODS, mean_interarrival_s=gap, metrics=False)
    return log, replay_offline(log, Settings())


@pytest.fixture
def pipeline(kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipeline]:
    monkeypatch.setenv("EYRIE_CHECKPOINT_EVERY_ENVELOPES", str(CHECKPOINT_EVERY))
    monkeypatch.setenv("EYRIE_CHECKPOINT_EVERY_S", "0")
    monkeypatch.setenv("EYRIE_SEQUENCER_DELETE_BEHIND_CHECKPOINTS", "true")
    monkeypatch.delenv(PAUSE_BEFORE_MANIFEST_ENV, raising=False)
    running = start_pipeline(kafka_bootstrap, tmp_path)
    yield running
    running.stop()


def small_shard(pods: int) -> Shard:
    """A shard of two nodes and `pods` pods placed on them, fed as the placement agent feeds it."""
    shard = Shard()
    for i in range(2):
        spec = NodeSpec.model_validate({"name": f"n{i}", "allocatable": {"cpu": "8", "memory": "16Gi"}})
        shard.feed(Envelope(Kind.NODE, 1.0, NodeEvent(type="upsert", node=spec), "node-events/0", offset=i))
    for i in range(pods):
        pod = PodRequest.model_validate(
            {"uid": f"p{i}", "containers": [{"name": "c", "requests": {"cpu": "100m"}}]}
        )
        shard.feed(Envelope(Kind.POD, 2.0 + i, pod, "pod-requests/0", offset=i))
    return shard


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    ("slots", "limit", "slot"),
    [
        pytest.param({}, 1_000_000, "a", id="A shard without checkpoints writes its first one into slot a."),
        pytest.param(
            {"a": 40}, 1_000_000, "b", id="With slot a written, the next checkpoint goes to slot b."
        ),
        pytest.param(
            {"a": 40, "b": 80}, 1_000_000, "a", id="With both written, the older slot is the one overwritten."
        ),
        pytest.param(
            {"a": 120, "b": 80}, 100, "b", id="A checkpoint larger than a record is split into many parts."
        ),
    ],
)
def test_the_records_a_worker_writes_for_a_checkpoint_read_back_as_the_shard_in_the_older_slot(
    slots: dict[str, int], limit: int, slot: str
) -> None:
    shard = small_shard(5)
    written, size, records = checkpoint_write(shard, 3, 200, slots, limit)
    assert written == slot
    # The manifest last: it is what makes the slot's new checkpoint the one read.
    assert records[-1][0] == slot_key("shard-3", slot)
    assert len(records) - 1 == -(-size // int(limit * 0.9))
    read = CheckpointRecords("shard-3", dict(records))
    data, offset = read.checkpoint(slot)
    restored, at = decode_checkpoint(data)
    assert (offset, at, len(data)) == (200, 200, size)
    assert set(restored.pods) == set(shard.pods)
    # Parts without their manifest (a write cut short) do not read back as a checkpoint.
    cut = CheckpointRecords("shard-3", dict(records[:-1]))
    assert cut.manifest(slot) is None


@pytest.mark.kafka
@pytest.mark.slow
def test_a_worker_killed_at_seeded_points_and_mid_checkpoint_places_every_pod_as_the_offline_replay(
    pipeline: Pipeline, workload: tuple[Path, OfflineResult]
) -> None:
    log, offline = workload
    uids = {e.value.uid for e in read_events(log) if isinstance(e.value, PodRequest)}
    points = kill_points(SEED, KILLS)

    async def scenario() -> list[float]:
        progress = Progress()
        stop = asyncio.Event()
        follower = asyncio.create_task(follow(pipeline.settings, progress, stop))
        replay = asyncio.create_task(replay_live(log, pipeline.settings, rate=RATE))
        recovery = []
        for index, share in enumerate(points):
            await reached(progress, share, len(uids))
            if index == HALF_WRITTEN:
                # Restart it as a worker that halts inside its first checkpoint, and kill it there: the
                # slot it overwrites then holds new parts under the old manifest.
                pipeline.kill("worker")
                await logged(start_half_writing_worker(pipeline, "worker-half"), "parts written, manifest in")
                name = "worker-half"
            else:
                name = "worker"
            injected = time.monotonic()
            pipeline.kill(name)
            await asyncio.sleep(1)
            pipeline.start("worker")
            kill_wall = time.time() - (time.monotonic() - injected)
            recovery.append(await first_binding_after(progress, kill_wall) - injected)
        await replay
        await settle(uids, progress, stop, follower)
        return recovery

    recovery = asyncio.run(scenario())
    stream, results = asyncio.run(read_outputs(pipeline.settings))
    sequencer = pipeline.settings.topic("sequencer")
    sequencer_bytes = asyncio.run(topic_bytes(pipeline.settings, [sequencer]))[sequencer]
    logs = pipeline.logs()
    rebuilds = [float(seconds) for seconds in REBUILT.findall(logs)]

    verdict = judge(uids, stream, results, log, offline)
    record_row(
        FaultRow(
            fault=f"worker SIGKILL ×{KILLS} at seeded points, one mid-checkpoint",
            pods=len(uids),
            lost=len(verdict.lost),
            duplicated=len(verdict.duplicated),
            overcommitted=len(verdict.overcommitted),
            recovery_s=max(recovery),
            differing=len(verdict.differing),
            rebuild_s=max(rebuilds, default=0.0),
            sequencer_bytes=sequencer_bytes,
            checkpoints=checkpoint_settings(CHECKPOINT_EVERY, 0),
        )
    )
    verdict.assert_clean()
    # The kills landed after checkpoints: workers restored from them, and the half-written one was refused.
    assert "restored from checkpoint" in logs
    assert "cannot be read (its parts do not match its manifest" in logs
