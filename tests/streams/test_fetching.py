"""A worker's Kafka consumer waits `fetch_max_wait_ms` for a fetch, not Faust's 1,500 ms."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import faust
import pytest

from streams.app import create_app
from streams.settings import load_settings

# ------------------------------------------------------------------------------------------- builders


def worker_app(tmp_path: Path, bootstrap: str = "127.0.0.1:9092", **values: Any) -> faust.App:
    settings = load_settings(
        env={}, bootstrap_servers=bootstrap, data_dir=str(tmp_path), topic_prefix="fetching.", **values
    )
    return create_app(settings, "worker")


def kafka_consumer_of(app: faust.App) -> Any:
    """The aiokafka consumer Faust's consumer thread would start for this worker (not started here)."""
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
