"""The delivery fast path (`streams.delivery`): a record's delivery coroutine stepped in place, and the rest
of a delivery that has to wait finished as asyncio's Task would have finished it.

The consumer loop itself runs in every Kafka test (every worker and applier uses it); these check the
trampoline without a broker, including the case those tests rarely reach: a delivery cancelled while it
waits, which is how Faust abandons one when a rebalance suspends the flow."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams.app import create_app
from streams.delivery import TABLE_WRITES_IN_FLIGHT, FastDeliveryConsumer, _finish
from streams.settings import load_settings

# ------------------------------------------------------------------------------------------ builders


class Recorder:
    """A delivery that records what happened to it; `gate` (if any) is what it waits on."""

    def __init__(self, gate: asyncio.Future[Any] | None = None, *, sleeps: int = 0) -> None:
        self.gate = gate
        self.sleeps = sleeps
        self.events: list[str] = []

    async def deliver(self) -> str:
        self.events.append("started")
        try:
            for _ in range(self.sleeps):
                await asyncio.sleep(0)  # a bare yield: the task is simply rescheduled
            if self.gate is not None:
                self.events.append(f"got {await self.gate}")
        except asyncio.CancelledError:
            self.events.append("cancelled")
            raise
        self.events.append("done")
        return "delivered"


def step(recorder: Recorder) -> tuple[Any, Any]:
    """What the consumer does first: step the delivery in place. (coroutine, what it waits on) or
    (None, result) when it completed without waiting."""
    coro = recorder.deliver()
    try:
        return coro, coro.send(None)
    except StopIteration as done:
        return None, done.value


# ------------------------------------------------------------------------------------------ the cases


def test_a_delivery_that_never_waits_completes_in_one_step_with_no_task():
    recorder = Recorder()
    coro, result = step(recorder)
    assert (coro, result) == (None, "delivered")
    assert recorder.events == ["started", "done"]


def test_a_delivery_that_waits_on_a_future_is_finished_with_the_future_s_result():
    async def scenario() -> tuple[Any, list[str]]:
        gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        recorder = Recorder(gate)
        coro, waiting_on = step(recorder)
        assert coro is not None and waiting_on is gate
        task = asyncio.ensure_future(_finish(coro, waiting_on))
        await asyncio.sleep(0)
        assert not task.done()  # still waiting on the gate
        gate.set_result("room in the buffer")
        return await task, recorder.events

    result, events = asyncio.run(scenario())
    assert result == "delivered"
    assert events == ["started", "got room in the buffer", "done"]


def test_a_delivery_that_yields_bare_turns_is_rescheduled_until_it_completes():
    async def scenario() -> tuple[Any, list[str]]:
        recorder = Recorder(sleeps=3)
        coro, waiting_on = step(recorder)
        assert coro is not None and waiting_on is None
        return await _finish(coro, waiting_on), recorder.events

    assert asyncio.run(scenario()) == ("delivered", ["started", "done"])


def test_a_delivery_cancelled_while_it_waits_is_cancelled_inside_as_faust_abandons_it():
    async def scenario() -> tuple[bool, list[str], bool]:
        gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        recorder = Recorder(gate)
        coro, waiting_on = step(recorder)
        task = asyncio.ensure_future(_finish(coro, waiting_on))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled(), recorder.events, gate.cancelled()

    cancelled, events, gate_cancelled = asyncio.run(scenario())
    assert cancelled
    assert events == ["started", "cancelled"]
    assert gate_cancelled  # what it waited on was cancelled with it, as under asyncio's own Task


def test_an_error_raised_after_the_wait_reaches_the_awaiting_task():
    async def failing(gate: asyncio.Future[str]) -> None:
        await gate
        raise ValueError("undecodable")

    async def scenario() -> None:
        gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        coro = failing(gate)
        waiting_on = coro.send(None)
        task = asyncio.ensure_future(_finish(coro, waiting_on))
        gate.set_result("go")
        await task

    with pytest.raises(ValueError, match="undecodable"):
        asyncio.run(scenario())


@pytest.mark.parametrize("role", ["worker", "applier"])
def test_both_roles_run_the_fast_delivery_consumer_and_buffer_a_few_batches_of_table_writes(tmp_path, role):
    app = create_app(load_settings(env={}, data_dir=str(tmp_path)), role)
    assert isinstance(app.consumer, FastDeliveryConsumer)
    assert app.producer.buffer.max_messages == TABLE_WRITES_IN_FLIGHT
