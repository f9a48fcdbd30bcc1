"""Faust's consumer, delivering a fetched record without four tasks per record when nothing has to wait.

faust-streaming's `Consumer._drain_messages` hands every record to the streams through
``wait_first(callback(message), suspend_flow.wait())``: four tasks (the delivery, the flow-suspension wait,
the consumer's stopped and crashed events) and an `asyncio.wait` per record, so that a delivery blocked on
a full stream buffer is abandoned when a rebalance suspends the flow. Nearly every delivery does not block
at all (the flow is open, the buffer has room), and measured under load that bookkeeping cost the worker
more than decoding and validating the record did.

Here the delivery coroutine is first stepped in place. When it completes without waiting (the common case),
that was the whole delivery; when it waits, the rest of it runs exactly as Faust runs it, raced against the
flow's suspension by `wait_first`. Everything else (offsets, gaps, commits, yielding every 100 records) is
Faust's loop, unchanged.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator, Coroutine, Generator
from typing import Any, cast

import faust
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer

__all__ = ["FastDeliveryApp", "FastDeliveryConsumer"]


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], waiting_on: Any) -> Generator[Any, Any, Any]:
    """Continue `coro`, which has yielded `waiting_on` to its (absent) task, inside the awaiting task: the
    task waits on what `coro` waits on, then sends (or throws) into `coro`, as asyncio's Task would."""
    while True:
        try:
            yield waiting_on
        except BaseException as exc:  # cancellation (the flow was suspended) or an error: coro decides
            try:
                waiting_on = coro.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                waiting_on = coro.send(None)
            except StopIteration as done:
                return done.value


async def _finish(coro: Coroutine[Any, Any, Any], waiting_on: Any) -> Any:
    return await _resume(coro, waiting_on)


class FastDeliveryConsumer(AIOKafkaConsumer):
    def on_buffer_full(self, tp: Any) -> None:
        """Faust pauses fetching a partition whose stream buffer is 80 % full, and resumes it from the
        buffer's reads once it drains. A rebalance empties the buffers without those reads, so a partition
        that nothing else refills the buffer for can stay paused. (One hang of the two-workers fault test,
        under a batching change since removed, left a pod-requests partition unread with the worker idle.)
        So no partition is paused here: a full buffer blocks the delivery instead, as Faust does at 100 %,
        and a rebalance abandons that delivery like any other."""

    async def _drain_messages(self, fetcher: Any) -> None:  # pragma: no cover - Faust's loop, see module doc
        callback = self.callback
        getmany = self.getmany
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        get_read_offset = self._read_offset.__getitem__
        set_read_offset = self._read_offset.__setitem__
        commit_every = self._commit_every
        acks_enabled_for = self.app.topics.acks_enabled_for
        set_flag, unset_flag = self.diag.set_flag, self.diag.unset_flag

        yield_every = 100
        num_since_yield = 0
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                set_flag(CONSUMER_FETCHING)
                ait = cast(AsyncIterator[Any], getmany(timeout=1.0))
                await self.sleep(0)
                if not self.should_stop:
                    async for tp, message in ait:
                        num_since_yield += 1
                        if num_since_yield > yield_every:
                            await asyncio.sleep(0)
                            num_since_yield = 0
                        offset = message.offset
                        r_offset = get_read_offset(tp)
                        if r_offset is None or offset >= r_offset:
                            gap = offset - (r_offset or 0)
                            if gap > 1 and r_offset and acks_enabled_for(message.topic):
                                await self._add_gap(tp, r_offset + 1, offset)
                            if commit_every is not None and self._n_acked >= commit_every:
                                self._n_acked = 0
                                await self.commit()
                            delivery = cast(Coroutine[Any, Any, Any], callback(message))
                            try:
                                waiting_on = delivery.send(None)
                            except StopIteration:
                                pass  # delivered without waiting
                            else:
                                await self.wait_first(_finish(delivery, waiting_on), self.suspend_flow.wait())
                            set_read_offset(tp, offset)
                    unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            unset_flag(CONSUMER_FETCHING)


TABLE_WRITES_IN_FLIGHT = 20_000
"""How many table changelog records may wait in Faust's producer buffer before the consumer stops handing
records to the agents. Faust's default, 100, stalled every input of the applier (and of the metrics agent)
for a flush whenever one batch wrote more keys than that, one record at a time through `wait_for`; a batch
of 1,000 bindings writes 1,000 ledger entries. Nothing is lost by waiting longer: Faust flushes this
buffer (and the Kafka producer) before it commits any offset."""


class FastDeliveryApp(faust.App):
    """A Faust app whose consumer is `FastDeliveryConsumer` and whose producer buffers a few batches of table
    writes (`TABLE_WRITES_IN_FLIGHT`) before it holds the streams back."""

    def _new_producer(self) -> Any:
        producer = super()._new_producer()
        producer.buffer.max_messages = TABLE_WRITES_IN_FLIGHT
        return producer

    def _new_consumer(self) -> Any:
        return FastDeliveryConsumer(
            self.transport,
            callback=self.topics.on_message,
            loop=self.transport.loop,
            on_partitions_revoked=self._on_partitions_revoked,
            on_partitions_assigned=self._on_partitions_assigned,
            beacon=self.beacon,
        )
