"""A worker's Kafka consumer: it waits `fetch_max_wait_ms` for a fetch, not Faust's 1,500 ms; it runs on the
app's loop, not a thread; a partition Faust pauses is paused in aiokafka too; a record's hand-over runs
inline until it has to wait, and then goes on as an await would; after a rebalance every stream partition
starts where its commits say, and its records wait until it does."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Any

import faust
import pytest
from aiokafka import TopicPartition

from streams.faust_overrides.fetching import _start, _StreamHold
from streams.runtime.app import create_app
from streams.settings import load_settings
from tests.topics import topic_with

# ------------------------------------------------------------------------------------------- builders


def worker_app(tmp_path: Path, bootstrap: str = "127.0.0.1:9092", **values: Any) -> faust.App:
    settings = load_settings(
        env={}, bootstrap_servers=bootstrap, data_dir=str(tmp_path), topic_prefix="fetching.", **values
    )
    return create_app(settings, "worker")


def kafka_consumer_of(app: faust.App) -> Any:
    """The aiokafka consumer the app's consumer service would start for this worker (not started here)."""
    return app.consumer._thread._create_worker_consumer(app.transport)


async def handover(trace: list[str], gate: asyncio.Future[str] | None, fail: str | None) -> str:
    """A hand-over as Faust's on_message is one: it waits only when `gate` is given (a full queue)."""
    trace.append("started")
    try:
        if fail == "before waiting":
            raise ValueError(fail)
        if gate is not None:
            trace.append(await gate)
        if fail == "after waiting":
            raise ValueError(fail)
        trace.append("delivered")
        return "value"
    except asyncio.CancelledError:
        trace.append("cancelled")
        raise


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    ("case", "waits", "fail", "cancel", "expected"),
    [
        (
            "a hand-over that never waits is done inside _start",
            False,
            None,
            False,
            ("done", ["started", "delivered"]),
        ),
        (
            "an error before any wait is raised by _start",
            False,
            "before waiting",
            False,
            ("raised", ["started"]),
        ),
        (
            "a hand-over that waits goes on when its future is set, and returns its value",
            True,
            None,
            False,
            ("value", ["started", "room", "delivered"]),
        ),
        (
            "an error after the wait reaches whoever awaits the rest",
            True,
            "after waiting",
            False,
            ("raised", ["started", "room"]),
        ),
        (
            "cancelling the task that awaits the rest cancels the hand-over itself",
            True,
            None,
            True,
            ("cancelled", ["started", "cancelled"]),
        ),
    ],
)
def test_a_records_hand_over_runs_inline_until_it_has_to_wait(
    case: str, waits: bool, fail: str | None, cancel: bool, expected: tuple[str, list[str]]
) -> None:
    async def scenario() -> tuple[str, list[str]]:
        trace: list[str] = []
        gate = asyncio.get_running_loop().create_future() if waits else None
        try:
            rest = _start(handover(trace, gate, fail))
        except ValueError:
            return "raised", trace
        if rest is None:
            return "done", trace
        task = asyncio.ensure_future(rest)
        await asyncio.sleep(0)
        if cancel:
            task.cancel()
        else:
            assert gate is not None
            gate.set_result("room")
        try:
            return await task, trace
        except ValueError:
            return "raised", trace
        except asyncio.CancelledError:
            return "cancelled", trace

    assert asyncio.run(scenario()) == expected


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
    """What `streams.faust_overrides.fetching` replaces: if Faust ever takes a setting for this, this test
    says so."""

    async def build() -> int:
        app = faust.App("fetching-plain", broker="kafka://127.0.0.1:9092", datadir=str(tmp_path), env={})
        return int(kafka_consumer_of(app)._fetch_max_wait_ms)

    assert asyncio.run(build()) == 1500


def test_an_awaitable_that_is_not_a_coroutine_is_left_to_be_awaited() -> None:
    async def scenario() -> bool:
        future = asyncio.get_running_loop().create_future()
        return _start(future) is future

    assert asyncio.run(scenario())


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
        for thread in threading.enumerate():
            if thread.name == "eyrie-warm":  # the app's warm-up of placement (`placement._warm`) ends alone
                thread.join()
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


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("case", "committed", "acked", "expected"),
    [
        (
            "a partition with no committed offset goes back to its first record, not on from its last fetch",
            None,
            True,
            {"position": 0, "read_offset": 0, "sought": True},
        ),
        (
            "a partition with a committed offset goes to it",
            2,
            True,
            {"position": 2, "read_offset": 2, "sought": True},
        ),
        (
            "a partition no stream acknowledges (a table's changelog) is left where it is",
            None,
            False,
            {"position": 3, "read_offset": None, "sought": True},
        ),
    ],
)
def test_a_seek_to_the_committed_offsets_puts_every_stream_partition_where_its_commits_say(
    case: str,
    committed: int | None,
    acked: bool,
    expected: dict[str, Any],
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    """Faust seeks each partition to its committed offset after a rebalance; aiokafka skips a partition with
    none, which then went on from its last fetch, past records cleared from the streams' queues."""
    topic = f"fetching.seek-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)

    async def scenario() -> dict[str, Any]:
        await topic_with(kafka_bootstrap, topic, (str(value).encode() for value in range(5)))
        app: Any = worker_app(tmp_path, kafka_bootstrap)
        app.topics.acks_enabled_for = lambda name: acked and name == topic
        faust_consumer = app.consumer
        service = faust_consumer._thread
        await service.start()
        try:
            consumer = service._ensure_consumer()
            consumer.assign([tp])
            if committed is not None:
                await consumer.commit({tp: committed})
            consumer.seek(tp, 3)  # where a fetch before the rebalance left it
            await faust_consumer.perform_seek()
            return {
                "position": await consumer.position(tp),
                "read_offset": faust_consumer._read_offset.get(tp),
                "sought": tp in faust_consumer._sought,
            }
        finally:
            await service.stop()

    assert asyncio.run(scenario()) == expected


@pytest.mark.parametrize(
    ("case", "events", "holding"),
    [
        ("a consumer holds stream records until its first assignment is sought and resumed", [], True),
        ("an assignment holds them", ["sought", "resumed", "assigned"], True),
        (
            "the flow resuming before the seek (to read changelogs) keeps holding",
            ["assigned", "resumed"],
            True,
        ),
        (
            "a finished seek alone keeps holding: the queues are cleared on the resume",
            ["assigned", "sought"],
            True,
        ),
        (
            "the resume after a finished seek lets them through",
            ["assigned", "resumed", "sought", "resumed"],
            False,
        ),
        (
            "a seek starting again holds them until the resume after it",
            ["assigned", "sought", "resumed", "seeking"],
            True,
        ),
        (
            "a seek started but not finished keeps holding through a resume",
            ["assigned", "seeking", "resumed"],
            True,
        ),
    ],
)
def test_stream_records_are_held_from_an_assignment_until_the_flow_resumes_after_the_seek(
    case: str, events: list[str], holding: bool
) -> None:
    hold = _StreamHold()
    for event in events:
        getattr(hold, event)()
    assert hold.holding is holding


@pytest.mark.parametrize(
    ("case", "events", "sought_back"),
    [
        (
            "a resume that ends the hold returns what was passed over",
            ["assigned", "sought", "resumed"],
            {"a"},
        ),
        ("a resume that keeps holding returns nothing yet", ["assigned", "resumed"], set()),
        ("what was passed over is returned once", ["assigned", "sought", "resumed", "resumed"], set()),
    ],
)
def test_partitions_passed_over_while_holding_are_sought_back_when_the_hold_ends(
    case: str, events: list[str], sought_back: set[str]
) -> None:
    """A partition at its end fetches nothing more, so no jump past its read offset would ever show."""
    hold = _StreamHold()
    hold.passed_over.add("a")
    returned: set[str] = set()
    for event in events:
        returned = getattr(hold, event)() or set()
    assert returned == sought_back


@pytest.mark.kafka
def test_the_first_offsets_a_seek_asks_for_do_not_wait_behind_a_fetch_the_broker_holds(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The broker holds a fetch of partitions with nothing new for `fetch_max_wait_ms` and answers a request
    sent behind it on the same connection only after it. The seek asks for the first offsets of the stream
    partitions with nothing committed once the fetcher has positions to fetch from, so on the fetch
    connection that request waited out such a fetch at every start of a worker (200 ms, measured); it goes
    on the coordination connection."""
    wait_s = 6.0
    names = {name: f"fetching.{name}-{uuid.uuid4().hex[:8]}" for name in ("quiet", "uncommitted")}
    quiet, uncommitted = (TopicPartition(topic, 0) for topic in names.values())

    async def scenario() -> dict[str, Any]:
        await topic_with(kafka_bootstrap, names["quiet"], (b"0", b"1"))
        await topic_with(kafka_bootstrap, names["uncommitted"], ())
        app: Any = worker_app(tmp_path, kafka_bootstrap, fetch_max_wait_ms=int(wait_s * 1000))
        app.topics.acks_enabled_for = lambda name: name in names.values()
        faust_consumer = app.consumer
        service = faust_consumer._thread
        await service.start()
        try:
            consumer = service._ensure_consumer()
            consumer.assign([quiet, uncommitted])
            await consumer.commit({quiet: 2})
            async with asyncio.timeout(wait_s / 2):  # the fetcher sends a fetch the broker holds
                while not consumer._fetcher._in_flight:
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)  # for the fetch to reach the broker: in flight is set as it is sent
            loop = asyncio.get_running_loop()
            started = loop.time()
            await faust_consumer.perform_seek()
            return {
                "sought within half the held fetch's wait": loop.time() - started < wait_s / 2,
                "position": await consumer.position(uncommitted),
                "read_offset": faust_consumer._read_offset.get(uncommitted),
            }
        finally:
            await service.stop()

    assert asyncio.run(scenario()) == {
        "sought within half the held fetch's wait": True,
        "position": 0,
        "read_offset": 0,
    }
