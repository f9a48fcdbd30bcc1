"""A real worker on a real broker: after a long churn of workloads, the shard its sequencer partition
rebuilds (as a worker taking it over does) holds the portraits of the workloads sampled within the metrics
ttl only, exactly those the metrics core still holds offline."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.events import MetricSample
from streams.core.metrics import MetricsCore, WorkloadSummary
from streams.core.shard import Shard
from streams.demo.processes import start_role, stop_all
from streams.runtime.agents.placement import _rebuild
from streams.runtime.topics import ensure_topics
from streams.settings import Settings, load_settings
from tests.streams.test_metrics_recovery_kafka import produce, worker_env

pytestmark = pytest.mark.kafka

TTL = 100.0
WORKLOADS = 400
WAIT_S = 120.0

# ------------------------------------------------------------------------------------------- builders


def churn(base: float) -> list[MetricSample]:
    """One workload starting every 5 s, its pod sampled three times 10 s apart; a node sampled every 10 s
    throughout, keeping the clock going."""
    timed: list[tuple[float, int, MetricSample]] = []
    for index in range(WORKLOADS):
        for step in range(3):
            ts = base + 5 * index + 10 * step
            values = {"cpu": 1.0 + index % 5, "memory": 1e8}
            timed.append(
                (
                    ts,
                    len(timed),
                    MetricSample(
                        ts=ts, node="n1", pod=f"job-{index}-pod", workload=f"job-{index}", values=values
                    ),
                )
            )
    for second in range(0, 5 * WORKLOADS + 200, 10):
        ts = base + second
        timed.append((ts, len(timed), MetricSample(ts=ts, node="n1", values={"cpu": 1.0, "memory": 1e9})))
    timed.sort(key=lambda item: (item[0], item[1]))
    return [sample for _, _, sample in timed]


async def sequencer_end(settings: Settings) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, group_id=None)
    await consumer.start()
    await asyncio.sleep(0)
    try:
        tp = TopicPartition(settings.topic("sequencer"), 0)
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


def rebuilt(settings: Settings) -> Shard:
    async def rebuild() -> Shard:
        return await _rebuild(settings, 0, await sequencer_end(settings))

    return asyncio.run(rebuild())


# ---------------------------------------------------------------------------------------------- tests


def test_a_workers_shard_holds_the_portraits_of_live_workloads_only_after_a_long_churn(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "EYRIE_TOPIC_PREFIX": f"eyrie-test-{uuid.uuid4().hex[:8]}.",
        "EYRIE_METRICS_STATE_TTL_S": str(TTL),
    }
    settings = load_settings(env=env)
    asyncio.run(ensure_topics(settings))
    samples = churn(time.time() - 3000.0)
    offline = MetricsCore(summary_interval=settings.summary_interval, state_ttl=TTL)
    told = offline.ingest(samples)
    drops = sum(1 for s in told if isinstance(s, WorkloadSummary) and s.expired is not None)
    live = set(offline.workload_names())
    assert drops == WORKLOADS - len(live) and len(live) < 40
    logs = tmp_path / "logs"
    logs.mkdir()

    worker = start_role("worker", worker_env(env, tmp_path / "worker"), logs)
    try:
        asyncio.run(produce(settings, samples))
        deadline = time.monotonic() + WAIT_S
        while True:
            shard = rebuilt(settings)
            if shard.counters["workload_portraits_dropped"] >= drops:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the sequencer never got there: {dict(shard.counters)}")
            time.sleep(1.0)
    finally:
        stop_all([worker])
    held = shard.scheduler.snapshot.usage.workloads
    assert set(held) == live  # bounded by the live workloads, not the 400 that ever ran
    assert shard.counters["workload"] == WORKLOADS + drops
