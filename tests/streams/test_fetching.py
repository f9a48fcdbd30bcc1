"""A worker's Kafka consumer: it waits `fetch_max_wait_ms` for a fetch, not Faust's 1,500 ms; it runs on the
app's loop, not a thread; a partition Faust pauses is paused in aiokafka too."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import faust
import pytest
from aiokafka import TopicPartition

from streams.app import create_app
from streams.settings import load_settings

# ------------------------------------------------------------------------------------------- builders


def worker_app(tmp_path: Path, bootstrap: str = "127.0.0.1:9092", **values: Any) -> faust.App:
    settings = load_settings(
        env={}, bootstrap_servers=bootstrap, data_dir=str(tmp_path), topic_prefix="fetching.", **values
    )
    return create_app(settings, "worker")


def kafka_consumer_of(app: faust.App) -> Any:
    """The aiokafka consumer the app's consumer service would start for this worker (not started here)."""
    return app.consumer._thread._create_worker_consumer(app.transport)


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    ("case", "values", "expected"),
    [
        ("by default a worker's fetch waits 200 ms, not Faust's 1,500", {}, 200),
        ("the setting sets the wait", {"fetch_max_wait_ms": 20}, 20),
    ],
)
def test_the_worker_consumer_takes_its_fetch_wait_from_the_settings(
    case: str, values: dict[str, Any], expected: int, tmp_path: Path
) -> None:
    async def build() -> int:
        return int(kafka_consumer_of(worker_app(tmp_path, **values))._fetch_max_wait_ms)

    assert asyncio.run(build()) == expected


def test_a_plain_faust_worker_would_wait_1500_ms(tmp_path: Path) -> None:
    """What `streams.fetching` replaces: if Faust ever takes a setting for this, this test says so."""

    async def build() -> int:
        app = faust.App("fetching-plain", broker="kafka://127.0.0.1:9092", datadir=str(tmp_path), env={})
        return int(kafka_consumer_of(app)._fetch_max_wait_ms)

    assert asyncio.run(build()) == 1500


@pytest.mark.kafka
def test_the_started_consumer_fetches_with_that_wait(kafka_bootstrap: str, tmp_path: Path) -> None:
    async def started_wait() -> int:
        consumer = kafka_consumer_of(worker_app(tmp_path, kafka_bootstrap, fetch_max_wait_ms=45))
        await consumer.start()
        try:
            return int(consumer._fetcher._fetch_max_wait_ms)
        finally:
            await consumer.stop()

    assert asyncio.run(started_wait()) == 45


@pytest.mark.kafka
def test_the_kafka_consumer_runs_on_the_apps_loop_and_stopping_it_leaves_the_apps_tasks_alone(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """No consumer thread: the aiokafka consumer lives on the loop the agents run on, Faust's calls to it
    are plain awaits, and its service stops without cancelling the rest of that loop (mode's thread
    service cancels every task left on its loop when it ends)."""

    async def scenario() -> dict[str, Any]:
        app = worker_app(tmp_path, kafka_bootstrap)
        service = app.consumer._thread
        threads_before = threading.active_count()
        bystander = asyncio.create_task(asyncio.sleep(60))
        await service.start()
        try:
            consumer = service._ensure_consumer()
            facts = {
                "threads_added": threading.active_count() - threads_before,
                "consumer_loop_is_running_loop": consumer._client._loop is asyncio.get_running_loop(),
                "sync_call": await service.call_thread(lambda: "sync"),
                "async_call": await service.call_thread(asyncio.sleep, 0, "async"),
            }
        finally:
            await service.stop()
        facts["bystander_cancelled"] = bystander.cancelled()
        facts["consumer_closed"] = consumer._closed
        bystander.cancel()
        return facts

    assert asyncio.run(scenario()) == {
        "threads_added": 0,
        "consumer_loop_is_running_loop": True,
        "sync_call": "sync",
        "async_call": "async",
        "bystander_cancelled": False,
        "consumer_closed": True,
    }


@pytest.mark.kafka
def test_a_partition_faust_pauses_is_paused_in_the_kafka_consumer_too(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Faust's pause only stops handing records over; without this, the changelog partitions of a worker's
    own tables stayed in every fetch after a rebalance. Partitions not assigned are passed over."""

    async def scenario() -> list[set[tuple[str, int]]]:
        app = worker_app(tmp_path, kafka_bootstrap)
        service = app.consumer._thread
        await service.start()
        try:
            consumer = service._ensure_consumer()
            table, stream = TopicPartition("fetching.changelog", 0), TopicPartition("fetching.input", 0)
            consumer.assign([table, stream])
            seen = []
            app.consumer.pause_partitions(tp for tp in (table, TopicPartition("not-assigned", 0)))
            seen.append({tuple(tp) for tp in consumer.paused()})
            app.consumer.resume_partitions([table])
            seen.append({tuple(tp) for tp in consumer.paused()})
            return seen
        finally:
            await service.stop()

    assert asyncio.run(scenario()) == [{("fetching.changelog", 0)}, set()]
