"""Batches for eyrie's agents that sleep until their first record (`take_batches`).

faust-streaming's `Stream.take_events(max_, within)` wakes the agent every `within` whether or not anything
came, and hands over what arrived on that clock: every idle agent of a worker (three forwarders, metrics,
placement) paid a wake-up with its tasks `1 / within` times a second, and a record waited for the next tick
at every hop, so the clock could not be short without costing CPU nor long without costing latency.
`take_batches` sleeps until a record arrives, then gathers while records keep coming: it hands the batch
over after a lull of `QUIET_S`, at `max_` records, or `within` after the first record. A backlog, whose
records arrive back to back, makes large batches, up to the window (the costs paid per batch, a produce
request, a sequencer record, acknowledgements, are shared); a lone record waits one turn of the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

from faust.streams import Stream
from mode.utils.aiter import aiter
from mode.utils.futures import notify

from streams.faust_overrides.tables import send_table_changes

__all__ = ["BREATHE_S", "IDLE_CHECK_S", "QUIET_S", "Breather", "take_batches"]

QUIET_S = 0.0
"""A batch is handed over once no record has arrived for this long (or its window is over): records of a
backlog arrive back to back and make large batches, a lone record waits only this long. At 0, one turn of
the event loop: the consumer hands over a fetch's records inline (`streams.faust_overrides.fetching`), so a
backlog's batch is whole by then. It was 1 ms, a timed wait per batch and hop; on a machine where a 1 ms wait
cost 82 µs of CPU, 0 took about a fifth off the worker's CPU and 5 ms off p50 at 50 pods/s, and moved nothing
beyond the noise under load (docs/pipeline-performance.md)."""

IDLE_CHECK_S = 1.0
"""How often an idle taker wakes to see whether its stream stopped."""

BREATHE_S = 0.05
"""The longest an agent's loop over a batch keeps the event loop to itself (`Breather`)."""


class Breather:
    """Gives the event loop a turn once `every` seconds have passed since the last: the Kafka consumer
    (fetches, heartbeats, rebalances) runs on the agents' loop (`streams.faust_overrides.fetching`), so a loop
    over thousands of records, a shard's rebuild or a backlog's batch, must not hold it for seconds. Costs a
    clock read when it is not yet time."""

    __slots__ = ("_due", "_every")

    def __init__(self, every: float = BREATHE_S) -> None:
        self._every = every
        self._due = time.monotonic() + every

    async def __call__(self) -> None:
        if time.monotonic() >= self._due:
            await asyncio.sleep(0)
            self._due = time.monotonic() + self._every


def take_batches(
    stream: Stream[Any], max_: int, within: float, acked: Callable[[], None] | None = None
) -> AsyncGenerator[list[Any], None]:
    """Batches of up to `max_` events of `stream`: sleeps until the first arrives, then hands the batch over
    when it is full, when `QUIET_S` passed without a new record, or `within` seconds after its first record,
    whichever comes first. Events are acknowledged once the batch's consumer asks for the next one, as by
    `Stream.take_events` (whose buffering this follows); `acked` is called once they are."""
    batches = _take_batches(stream, max_, within, acked)
    stream._active_agens.add(batches)  # closed by the stream on stop, as Faust does for take_events
    return batches


async def _take_batches(
    stream: Any, max_: int, within: float, acked: Callable[[], None] | None
) -> AsyncGenerator[list[Any], None]:
    # `stream` untyped: mode's annotations take its own Event, where Faust's take_events passes asyncio's.
    buffer: list[Any] = []
    consumed = asyncio.Event()
    consuming: asyncio.Future[None] | None = None
    loop = asyncio.get_running_loop()
    # The taker sleeps on one future that a timer or `add_to_buffer` resolves. Not `Stream.wait_for_stopped`:
    # each call builds three tasks (the event, the stream's stopped and crashed events) and an asyncio.wait,
    # about 30 µs, and at a few hundred records a second most batches are one record that waits twice.
    waiter: asyncio.Future[None] | None = None
    wake_on_arrival = False

    def wake() -> None:
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def sleep(timeout: float, *, on_arrival: bool) -> None:
        nonlocal waiter, wake_on_arrival
        waiter, wake_on_arrival = loop.create_future(), on_arrival
        timer = loop.call_later(timeout, wake)
        try:
            await waiter
        finally:
            timer.cancel()
            waiter = None

    async def add_to_buffer(value: Any) -> Any:
        nonlocal consuming
        try:
            if consuming is not None:  # the batch being consumed is not to change under its reader
                try:
                    await consuming
                finally:
                    consuming = None
            event = stream.current_event
            if event is None:
                raise RuntimeError("Take buffer found current_event is None")
            buffer.append(event)
            if wake_on_arrival or len(buffer) >= max_:
                wake()
            if len(buffer) >= max_:
                consumed.clear()
                await stream.wait(consumed)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            stream.log.exception("Error adding to take buffer: %r", exc)
            await stream.crash(exc)
        return value

    enable_acks = stream.enable_acks
    stream.enable_acks = False  # acknowledged below, once consumed
    stream.add_processor(add_to_buffer)
    stream._enable_passive(aiter(stream.channel))
    try:
        while not stream.should_stop:
            if not buffer:
                # Idle: a record wakes this, and the timer only looks at `should_stop` now and then (a
                # stopping worker cancels its agents anyway).
                await sleep(IDLE_CHECK_S, on_arrival=True)
                continue
            deadline = loop.time() + within
            while len(buffer) < max_:
                left = deadline - loop.time()
                if left <= 0:
                    break
                gathered = len(buffer)
                await sleep(min(QUIET_S, left), on_arrival=False)
                if len(buffer) == gathered:
                    break  # a lull: what came is the batch
            consuming = loop.create_future()
            events = list(buffer)
            try:
                yield events
            finally:
                buffer.clear()
                await send_table_changes(stream.app)
                for event in events:
                    await stream.ack(event)
                if acked is not None:
                    acked()
                notify(consuming)
                consumed.set()
    finally:
        stream.enable_acks = enable_acks
        stream._processors.remove(add_to_buffer)
