"""A real worker's metrics tables on a real broker: after a churn of pods and a deleted node, the changelog
holds the live keys only (the departed ones tombstoned), and a fresh worker recovers exactly those states and
resumes them, while a departed key that comes back starts afresh."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from schemas.codec import encode
from schemas.events import MetricSample
from streams.core.metrics import MetricsCore, state_clock
from streams.demo.processes import start_role, stop_all
from streams.runtime.agents.metrics import NODES_TABLE, WORKLOADS_TABLE
from streams.runtime.app import app_id
from streams.runtime.topics import ensure_topics
from streams.settings import Settings, load_settings
from tests.streams.changelogs import read_changelog

pytestmark = pytest.mark.kafka

TTL = 100.0
WAIT_S = 120.0

# ------------------------------------------------------------------------------------------- builders


def node_sample(ts: float, node: str) -> MetricSample:
    return MetricSample(ts=ts, node=node, values={"cpu": 2.0, "memory": 4e9})


def pod_sample(ts: float, pod: str, workload: str | None = None) -> MetricSample:
    return MetricSample(ts=ts, node="n-live", pod=pod, workload=workload, values={"cpu": 0.5, "memory": 1e8})


def history(base: float) -> list[MetricSample]:
    """300 pods without a workload, one starting every 5 s and sampled three times 10 s apart; a workload
    and a node sampled every 10 s throughout (1,600 s); a node deleted after 500 s."""
    timed: list[tuple[float, int, MetricSample]] = []
    for index in range(300):
        for step in range(3):
            ts = base + 5 * index + 10 * step
            timed.append((ts, len(timed), pod_sample(ts, f"pod-{index}")))
    for second in range(0, 1601, 10):
        ts = base + second
        timed.append((ts, len(timed), pod_sample(ts, "web-1", "web")))
        timed.append((ts, len(timed), node_sample(ts, "n-live")))
        if second <= 500:
            timed.append((ts, len(timed), node_sample(ts, "n-gone")))
    timed.sort(key=lambda item: (item[0], item[1]))
    return [sample for _, _, sample in timed]


def worker_env(settings_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return {**os.environ, **settings_env, "EYRIE_DATA_DIR": str(tmp_path / "faust")}


async def produce(settings: Settings, samples: list[MetricSample]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, linger_ms=5)
    await producer.start()
    try:
        for sample in samples:  # one partition: the worker sees them in this order
            await producer.send(
                settings.topic("metrics"), encode(sample), key=sample.node.encode(), partition=0
            )
        await producer.flush()
    finally:
        await producer.stop()


async def table_view(settings: Settings, table: str) -> dict[str, bytes]:
    """What a recovering worker rebuilds from `table`'s changelog: each key's last value, none where the
    last is a tombstone."""
    view, _ = await read_changelog(settings, f"{app_id(settings, 'worker')}-{table}-changelog")
    return view


def wait_for(
    settings: Settings, done: Callable[[dict[str, bytes], dict[str, bytes]], bool]
) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """The two tables' changelog views, once `done` holds of them."""
    deadline = time.monotonic() + WAIT_S
    while True:
        nodes = asyncio.run(table_view(settings, NODES_TABLE))
        workloads = asyncio.run(table_view(settings, WORKLOADS_TABLE))
        if done(nodes, workloads):
            return nodes, workloads
        if time.monotonic() > deadline:
            clocks = {key: clock_of(value) for key, value in {**nodes, **workloads}.items()}
            raise AssertionError(f"the changelogs never got there: {clocks}")
        time.sleep(1.0)


def clock_of(data: bytes | None) -> float | None:
    return None if data is None else state_clock(data)


# ---------------------------------------------------------------------------------------------- tests


def test_a_fresh_worker_recovers_the_live_metrics_states_and_none_of_the_departed(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"eyrie-test-{uuid.uuid4().hex[:8]}."
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "EYRIE_TOPIC_PREFIX": prefix,
        "EYRIE_METRICS_STATE_TTL_S": str(TTL),
    }
    settings = load_settings(env=env)
    asyncio.run(ensure_topics(settings))
    base = time.time() - 3000.0
    end = base + 1600.0
    logs = tmp_path / "logs"
    logs.mkdir()

    first = start_role("worker", worker_env(env, tmp_path / "first"), logs, suffix="-first")
    try:
        asyncio.run(produce(settings, history(base)))
        before_nodes, before_workloads = wait_for(
            settings, lambda nodes, _: clock_of(nodes.get("n-live")) == end and "n-gone" not in nodes
        )
    finally:
        stop_all([first])
    # Live at the end: keys sampled within the ttl of the last sample (pod-296's last, at 1,500 s, is the
    # ttl itself behind: expired).
    assert set(before_nodes) == {"n-live"}
    assert set(before_workloads) == {"web", "pod-297", "pod-298", "pod-299"}

    second = start_role("worker", worker_env(env, tmp_path / "second"), logs, suffix="-second")
    try:
        # Each key is written back with a summary, or once its clock is a quarter of the ttl past its entry's:
        # web's entry is at most at 1,600 s (rewritten per batch), pod-297's was written at its first sample.
        resumed = [pod_sample(end + 1, "pod-297"), pod_sample(end + 30, "web-1", "web")]
        returning = [pod_sample(end + 1, "pod-0"), node_sample(end + 1, "n-gone")]
        clock_keeper = [node_sample(end + 31, "n-live")]
        asyncio.run(produce(settings, [resumed[0], *returning, resumed[1], *clock_keeper]))
        expected = {"pod-297": end + 1, "pod-0": end + 1, "web": end + 30}
        after_nodes, after_workloads = wait_for(
            settings,
            lambda nodes, workloads: (
                clock_of(nodes.get("n-live")) == end + 31
                and all(clock_of(workloads.get(key)) == ts for key, ts in expected.items())
            ),
        )
    finally:
        stop_all([second])

    settings_core: Callable[[], MetricsCore] = lambda: MetricsCore(  # noqa: E731
        summary_interval=settings.summary_interval, state_ttl=TTL
    )
    # Resumed: the state before the restart with the one new sample, as a core that restored it computes.
    for sample in resumed:
        key = sample.workload or sample.pod or ""
        core = settings_core()
        core.restore_workload(key, before_workloads[key])
        core.ingest([sample])
        assert after_workloads[key] == core.workload_state(key)
    # Back after the ttl: a first state, nothing of before.
    fresh = settings_core()
    fresh.ingest(returning)
    assert after_workloads["pod-0"] == fresh.workload_state("pod-0")
    assert after_nodes["n-gone"] == fresh.node_state("n-gone")
    assert set(after_workloads) == {"web", "pod-297", "pod-298", "pod-299", "pod-0"}
