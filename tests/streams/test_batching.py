"""`streams.faust_overrides.batching.take_batches`, through Faust's own agent test context (an in-memory
channel, no broker). The agents run it against Kafka in every pipeline test."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import faust
import pytest

import streams.faust_overrides.batching
from streams.faust_overrides.batching import take_batches

# ------------------------------------------------------------------------------------------ builders

_apps = itertools.count()
QUIET_S = 0.02
"""A lull long enough to measure on a loaded machine (`streams.faust_overrides.batching.QUIET_S` is 0: one
loop turn)."""
WINDOW = 0.3
WITHIN = 0.05


@pytest.fixture(autouse=True)
def wider_lull(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams.faust_overrides.batching, "QUIET_S", QUIET_S)


def batching_agent(max_: int, within: float = WITHIN) -> tuple[Any, list[tuple[list[Any], float]]]:
    """An agent that records each batch `take_batches` hands it: (values, when)."""
    app = faust.App(f"eyrie-test-batching-{next(_apps)}", store="memory://", autodiscover=False)
    batches: list[tuple[list[Any], float]] = []

    @app.agent(app.channel())
    async def collect(stream: Any) -> None:
        async for events in take_batches(stream, max_, within):
            batches.append(([event.value for event in events], time.monotonic()))

    return collect, batches


# ------------------------------------------------------------------------------------------ the cases


def test_full_batches_are_handed_over_at_once_and_a_lone_record_after_the_lull_not_the_window(
    monkeypatch: pytest.MonkeyPatch,
):
    # A lull and a window long enough that a stall of a loaded machine (a few hundred milliseconds) cannot
    # pass for a wait: "at once" is well under the lull, "after the lull" at least the lull and well under
    # the window.
    quiet, window = 0.5, 3.0
    monkeypatch.setattr(streams.faust_overrides.batching, "QUIET_S", quiet)
    agent, batches = batching_agent(max_=3, within=window)

    async def scenario() -> tuple[float, float]:
        async with agent.test_context() as context:
            started = time.monotonic()
            for value in range(7):
                await context.put(value)
            await asyncio.sleep(3 * quiet)
            late = time.monotonic()
            await context.put("late")
            await asyncio.sleep(3 * quiet)
            return started, late

    started, late = asyncio.run(scenario())
    assert [values for values, _ in batches] == [[0, 1, 2], [3, 4, 5], [6], ["late"]]
    full, _, rest, lone = (at for _, at in batches)
    assert full - started < quiet  # full: no wait
    assert rest - started < window / 2
    # The lone record waited for the lull from its own arrival, not for a clock that kept ticking while idle.
    assert quiet <= lone - late < window / 2


def test_with_the_production_lull_of_one_loop_turn_a_burst_is_one_batch_and_a_lone_record_its_own(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(streams.faust_overrides.batching, "QUIET_S", 0.0)
    agent, batches = batching_agent(max_=1000, within=WINDOW)

    async def scenario() -> None:
        async with agent.test_context() as context:
            await asyncio.gather(*(context.put(value) for value in range(5)))  # as a fetch hands them over
            await asyncio.sleep(WITHIN)
            await context.put("late")
            await asyncio.sleep(WITHIN)

    asyncio.run(scenario())
    assert [values for values, _ in batches] == [[0, 1, 2, 3, 4], ["late"]]


def test_records_that_keep_coming_make_one_batch_until_they_stop_or_the_window_ends():
    agent, batches = batching_agent(max_=1000, within=WINDOW)

    async def scenario() -> None:
        async with agent.test_context() as context:
            for value in range(5):  # a trickle, faster than the lull
                await context.put(value)
                await asyncio.sleep(QUIET_S / 5)
            await asyncio.sleep(2 * QUIET_S)
            stream_started = time.monotonic()
            sent = 0
            while time.monotonic() - stream_started < 1.5 * WINDOW:  # longer than a window
                await context.put(f"b{sent}")
                sent += 1
                await asyncio.sleep(QUIET_S / 5)
            await asyncio.sleep(2 * WINDOW)

    asyncio.run(scenario())
    trickle, *backlog = [values for values, _ in batches]
    assert trickle == [0, 1, 2, 3, 4]
    assert len(backlog) >= 2  # the window cut the longer stream
    assert [v for values in backlog for v in values] == [f"b{i}" for i in range(sum(map(len, backlog)))]


def test_with_no_window_a_record_is_handed_over_as_soon_as_the_agent_is_free():
    agent, batches = batching_agent(max_=10, within=0.0)

    async def scenario() -> float:
        async with agent.test_context() as context:
            sent = time.monotonic()
            await context.put("alone")
            await asyncio.sleep(WITHIN)
            return sent

    sent = asyncio.run(scenario())
    assert [values for values, _ in batches] == [["alone"]]
    assert batches[0][1] - sent < WITHIN


def test_an_idle_agent_sleeps_instead_of_waking_every_within():
    agent, batches = batching_agent(max_=10)
    waits = 0

    async def scenario() -> None:
        nonlocal waits
        async with agent.test_context() as context:
            await context.put("first")
            await asyncio.sleep(2 * WITHIN)
            stream = next(iter(context._actors)).stream  # the stream take_batches reads
            real = stream.wait_for_stopped

            async def counted(*args: Any, **kwargs: Any) -> Any:
                nonlocal waits
                waits += 1
                return await real(*args, **kwargs)

            stream.wait_for_stopped = counted
            await asyncio.sleep(10 * WITHIN)

    asyncio.run(scenario())
    assert [values for values, _ in batches] == [["first"]]
    assert waits == 0  # Faust's take_events would have woken about ten times


def test_every_event_of_a_batch_is_acknowledged_once_the_agent_asks_for_the_next():
    app = faust.App(f"eyrie-test-batching-{next(_apps)}", store="memory://", autodiscover=False)
    acked_before_next: list[list[bool]] = []

    @app.agent(app.channel())
    async def collect(stream: Any) -> None:
        previous: list[Any] = []
        async for events in take_batches(stream, 2, WITHIN):
            acked_before_next.append([event.message.acked for event in previous])
            previous = list(events)

    async def scenario() -> None:
        async with collect.test_context() as context:
            for value in range(4):
                await context.put(value)
            await asyncio.sleep(2 * WITHIN)

    asyncio.run(scenario())
    assert acked_before_next == [[], [True, True]]


@pytest.mark.parametrize(
    ("case", "every", "step", "steps", "turns_expected"),
    [
        ("a long synchronous loop gives the event loop a turn about every `every`", 0.02, 0.005, 60, True),
        ("a loop shorter than `every` never gives up the event loop", 10.0, 0.0, 1000, False),
    ],
)
def test_a_breather_gives_the_loop_a_turn_only_once_its_interval_has_passed(
    case: str, every: float, step: float, steps: int, turns_expected: bool
) -> None:
    async def scenario() -> tuple[int, list[float], float]:
        breathe = streams.faust_overrides.batching.Breather(every)
        waits: list[float] = []
        turns = 0

        async def neighbour() -> None:  # stands for the Kafka consumer's heartbeat: it wants a turn often
            while True:
                asked = time.monotonic()
                await asyncio.sleep(0)
                waits.append(time.monotonic() - asked)

        other = asyncio.create_task(neighbour())
        await asyncio.sleep(0)  # the neighbour is now waiting for its next turn
        waits.clear()
        started = time.monotonic()
        for _ in range(steps):
            time.sleep(step)  # work that does not yield
            before = len(waits)
            await breathe()
            turns += len(waits) > before
        elapsed = time.monotonic() - started
        other.cancel()
        return turns, waits, elapsed

    turns, waits, elapsed = asyncio.run(scenario())
    if not turns_expected:
        assert (turns, waits) == (0, [])
        return
    # Each turn comes `every` after the last (however long the steps really took on a loaded machine), and
    # the neighbour is never kept waiting for the whole loop.
    assert 2 <= turns <= elapsed / every + 1
    assert max(waits) < elapsed / 2
