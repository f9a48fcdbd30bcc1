"""A live `eyrie replay` that stops part way does not leave placement holding live input: Ctrl-C (or
SIGTERM) ends its session before it exits, and a replayer killed outright is released by the worker after
``replay_session_timeout_s``, which `/health` reports as a stale session first.

A real worker and applier (`eyrie worker --web-port`, `eyrie applier`) and a real `eyrie replay` child
process, replaying a log that pauses ten minutes after its first pod."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer

from schemas.eventlog import EventLogWriter
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodRequest
from streams.client import EyrieClient
from streams.local.broker import free_ports
from streams.runtime.topics import ensure_topics
from streams.settings import Settings, load_settings
from tests.commands import REPO
from tests.streams.test_observability import scrape, wait_answering
from tests.streams.test_pipeline import Pipeline

pytestmark = pytest.mark.kafka

TIMEOUT_S = 10.0
"""The worker's ``replay_session_timeout_s``; /health calls a session stale after half of it."""
PAUSE_S = 600.0
"""How long the replayed log pauses after its first pod (replayed at its own pace)."""

Sample = tuple[float, int, dict[str, Any]]
"""/health at a moment (monotonic): status code and body."""

# ------------------------------------------------------------------------------------------- builders


def paused_log(path: Path, tag: str) -> Path:
    """A node and pod `<tag>-early` at once, then pod `<tag>-late` after `PAUSE_S`: 3 events."""
    resources = {"cpu": "16", "memory": "64Gi", "pods": 110}
    spec = NodeSpec(name=f"{tag}-node", capacity=resources, allocatable=resources)
    with EventLogWriter(path) as log:
        log.write(0.0, "node-events", spec.name, NodeEvent(type="upsert", node=spec))
        log.write(0.0, "pod-requests", f"{tag}-early", pod(f"{tag}-early"))
        log.write(PAUSE_S, "pod-requests", f"{tag}-late", pod(f"{tag}-late"))
    return path


def pod(uid: str) -> PodRequest:
    return PodRequest(uid=uid, requests={"cpu": "1", "memory": "1Gi"})


def start_replay(pipeline: Pipeline, log: Path) -> subprocess.Popen[str]:
    """`eyrie replay LOG --speed 1`, as a user runs it."""
    return subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "replay", str(log), "--speed", "1"],
        cwd=REPO,
        env=pipeline.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def first_results(settings: Settings, uids: set[str], timeout: float) -> dict[str, float]:
    """When (monotonic) this test saw each pod's first binding result, for those seen within `timeout`."""
    consumer = AIOKafkaConsumer(
        settings.topic("binding-results"),
        bootstrap_servers=settings.bootstrap_servers,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    await consumer.start()
    try:
        while seen.keys() < uids and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    uid = orjson.loads(record.value or b"{}").get("uid")
                    if uid in uids:
                        seen.setdefault(uid, time.monotonic())
    finally:
        await consumer.stop()
    return seen


async def publish(settings: Settings, uid: str) -> float:
    """Publish a live pod; when (monotonic) it was acknowledged."""
    async with EyrieClient(settings, create_topics=False) as client:
        await client.publish_pod(pod(uid))
        await client.flush()
    return time.monotonic()


def health(port: int) -> Sample:
    status, body = scrape(port, "/health")
    return time.monotonic(), status, json.loads(body)


async def watch_until_placed(
    settings: Settings, port: int, uid: str, timeout: float
) -> tuple[float | None, list[Sample]]:
    """When `uid` got its first result (None: not within `timeout`), and /health every 0.25 s until then."""
    samples: list[Sample] = []

    async def poll() -> None:
        while True:
            samples.append(await asyncio.to_thread(health, port))
            await asyncio.sleep(0.25)

    poller = asyncio.create_task(poll())
    try:
        seen = await first_results(settings, {uid}, timeout)
    finally:
        poller.cancel()
    return seen.get(uid), samples


def sessions_of(sample: Sample, log: Path) -> list[dict[str, Any]]:
    """The replay sessions of `log`'s replay in a /health sample."""
    return [s for s in sample[2]["replay_sessions"] if s["session"].startswith(f"{log.name}-")]


def stale(sample: Sample, log: Path) -> bool:
    return any(session["stale"] for session in sessions_of(sample, log))


@pytest.fixture(scope="module")
def pipeline(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Pipeline, int]]:
    """A worker (and its web port) and an applier; replay sessions time out after `TIMEOUT_S`."""
    workdir = tmp_path_factory.mktemp("release")
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "EYRIE_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:8]}.",
        "EYRIE_PARTITIONS": "2",
        "EYRIE_DATA_DIR": str(workdir / "faust"),
        "EYRIE_SESSION_TIMEOUT_S": "6",
        "EYRIE_REPLAY_SESSION_TIMEOUT_S": str(TIMEOUT_S),
    }
    settings = load_settings(env=env)
    asyncio.run(ensure_topics(settings))
    running = Pipeline(settings, env, workdir)
    port = free_ports(1)[0]
    running.start("worker", "--web-port", str(port))
    running.start("applier")
    try:
        wait_answering(port)
        yield running, port
    finally:
        running.stop()


def replay_placed_its_first_pod(
    pipeline: Pipeline, log: Path, replay: subprocess.Popen[str], tag: str
) -> None:
    placed = asyncio.run(first_results(pipeline.settings, {f"{tag}-early"}, 90.0))
    if not placed:
        replay.kill()
        _, stderr = replay.communicate()
        raise AssertionError(
            f"the replay's first pod was never placed; replay said: {stderr}\n{pipeline.logs()}"
        )


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    ("sent", "code"),
    [
        pytest.param(
            signal.SIGINT,
            130,
            id="Ctrl-C on a live replay ends its session, so a pod published after is placed at once.",
        ),
        pytest.param(
            signal.SIGTERM,
            143,
            id="SIGTERM on a live replay ends its session, so a pod published after is placed at once.",
        ),
    ],
)
def test_an_interrupted_live_replay_ends_its_session_before_it_exits(
    pipeline: tuple[Pipeline, int], tmp_path: Path, sent: signal.Signals, code: int
) -> None:
    running, port = pipeline
    tag = sent.name.lower()
    log = paused_log(tmp_path / f"{tag}.jsonl", tag)
    replay = start_replay(running, log)
    replay_placed_its_first_pod(running, log, replay, tag)
    assert sessions_of(health(port), log), "the replay's session is not on /health"
    replay.send_signal(sent)
    _, stderr = replay.communicate(timeout=30)
    published = asyncio.run(publish(running.settings, f"{tag}-after"))
    placed, samples = asyncio.run(watch_until_placed(running.settings, port, f"{tag}-after", 3 * TIMEOUT_S))

    assert placed is not None, "the pod published after the replay stopped was never placed"
    assert replay.returncode == code, stderr
    assert (
        f"interrupted by {sent.name}: published 2 of 3 events, then ended its session" in stderr.splitlines()
    )
    assert "Traceback" not in stderr
    assert placed - published < TIMEOUT_S / 2  # not the timeout's doing: its session never went stale
    assert not any(stale(sample, log) for sample in samples)
    assert not sessions_of(health(port), log)


def test_a_killed_live_replay_is_released_by_the_timeout_and_reported_stale_on_health_before(
    pipeline: tuple[Pipeline, int], tmp_path: Path
) -> None:
    running, port = pipeline
    log = paused_log(tmp_path / "killed.jsonl", "killed")
    replay = start_replay(running, log)
    replay_placed_its_first_pod(running, log, replay, "killed")
    # While the log pauses, the replayer's heartbeats keep its session fresh past the stale mark.
    pausing: list[Sample] = []
    until = time.monotonic() + TIMEOUT_S * 0.6
    while time.monotonic() < until:
        pausing.append(health(port))
        time.sleep(0.5)
    replay.kill()
    replay.wait(10)
    killed = time.monotonic()
    asyncio.run(publish(running.settings, "killed-after"))
    placed, samples = asyncio.run(watch_until_placed(running.settings, port, "killed-after", 4 * TIMEOUT_S))
    after = health(port)

    assert placed is not None, f"the pod published after the replayer died was never placed\n{running.logs()}"
    assert all(sessions_of(sample, log) and not stale(sample, log) for sample in pausing), pausing
    assert all(sample[2]["status"] == "ok" for sample in pausing)
    assert placed - killed >= TIMEOUT_S - 1.5, "released before the timeout"
    reported = [sample for sample in samples if stale(sample, log)]
    assert reported, f"/health never reported the stale session: {samples}"
    first = reported[0]
    assert first[0] < placed
    assert (first[1], first[2]["status"]) == (200, "degraded")
    (session,) = sessions_of(first, log)
    assert session["held"] >= 1 and session["since_watermark_s"] >= TIMEOUT_S / 2
    assert not sessions_of(after, log) and after[2]["status"] == "ok"
