"""A worker's Kafka consumer waits `fetch_max_wait_ms` for a fetch, not Faust's 1,500 ms, and hands records
to the streams without a task when the delivery does not wait."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import faust
import pytest

from streams.app import create_app
from streams.fetching import _Started
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


async def delivery(log: list[Any], gate: asyncio.Future[Any] | None) -> str:
    """What Faust's fetch loop hands over for a record: a delivery that waits on `gate` (when given)."""
    log.append("started")
    if gate is not None:
        log.append(("gate", await gate))
    log.append("delivered")
    return "ok"


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


def test_a_delivery_that_does_not_wait_is_done_in_the_call_without_a_task(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[Any], int]:
        app = worker_app(tmp_path)
        log: list[Any] = []
        tasks_before = len(asyncio.all_tasks())
        await app.consumer._hand_over(delivery(log, None))
        return log, len(asyncio.all_tasks()) - tasks_before

    log, new_tasks = asyncio.run(scenario())
    assert log == ["started", "delivered"]
    assert new_tasks == 0


@pytest.mark.parametrize(
    ("case", "suspend_flow", "expected_log"),
    [
        (
            "a delivery that waits goes on from where it stopped once its wait ends",
            False,
            ["started", ("gate", 7), "delivered"],
        ),
        (
            "a delivery that waits is abandoned when flow is suspended first, as Faust abandons it",
            True,
            ["started"],
        ),
    ],
)
def test_a_delivery_that_waits_races_the_suspension_of_flow(
    case: str, suspend_flow: bool, expected_log: list[Any], tmp_path: Path
) -> None:
    async def scenario() -> list[Any]:
        app = worker_app(tmp_path)
        log: list[Any] = []
        gate: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        call = asyncio.ensure_future(app.consumer._hand_over(delivery(log, gate)))
        await asyncio.sleep(0.01)
        if suspend_flow:
            app.consumer.suspend_flow.set()
        else:
            gate.set_result(7)
        await asyncio.wait_for(call, 1.0)
        await asyncio.sleep(0.01)
        if not gate.done():
            gate.set_result(7)  # too late: the abandoned delivery must not go on
            await asyncio.sleep(0.01)
        return log

    assert asyncio.run(scenario()) == expected_log


def test_a_started_coroutine_finished_by_a_task_gets_its_results_and_its_cancellation() -> None:
    async def body(gate: asyncio.Future[int], log: list[Any]) -> None:
        await asyncio.sleep(0)  # a bare yield: the task steps it again
        log.append(("gate", await gate))
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            log.append("cancelled")
            raise

    async def scenario() -> list[Any]:
        log: list[Any] = []
        gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        coroutine = body(gate, log)
        task = asyncio.ensure_future(_Started(coroutine, coroutine.send(None)))
        await asyncio.sleep(0.01)
        gate.set_result(5)
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return log

    assert asyncio.run(scenario()) == [("gate", 5), "cancelled"]
