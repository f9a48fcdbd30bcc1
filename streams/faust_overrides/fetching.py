"""Faust's app, with its Kafka consumer on the agents' loop, fetching at eyrie's pace (`fetch_max_wait_ms`).

faust-streaming builds a worker's aiokafka consumer with ``fetch_max_wait_ms=1500`` and no setting to change
it, and that wait stalled the pipeline. aiokafka keeps one fetch in flight per broker, and leaves out of it
every partition whose records the application has not taken yet. So when a busy worker is slow to take
what one fetch returned (pod requests and sequencer records, say), the next fetch names only its quiet
partitions, and the broker holds it for the whole wait: for 1.5 s nothing new reached the worker, for any
partition, however long its backlog. Every hop of the pipeline did this once loaded, the backlog grew
until batches were large enough to absorb the stalls, and latency stayed there.

With a wait of 200 ms the broker answers a fetch of quiet partitions soon, and the next fetch names
everything again. ``python -m bench.pipeline --nodes 5000 --pods 20000 --latency-share 0.5 --latency-rate
400`` (10,000 pods at 400/s after 10,000 flat out): at 1,500 ms p50 4,148 and 122 ms, p99 5,050 and 1,704
ms; at 200 ms p50 114 and 71 ms, p99 395 and 180 ms (docs/pipeline-performance.md).

The consumer's fetch loop is Faust's with three changes (`_Consumer._drain_messages`): offsets a rebalance
made it skip are read again rather than committed over; stream records are held from an assignment until
the flow resumes after the seek to the committed offsets, and a partition with no committed offset is
sought to its first one (the comment over `_Consumer.on_partitions_assigned` says why); and a record is
handed to its stream inline (`_start`) unless the hand-over has to wait, not through four tasks a record.

The Kafka consumer runs on the app's own event loop (`_ConsumerThread`), not in a thread of its own as
Faust has it. On the thread, every fetch went out and came back through `run_coroutine_threadsafe` (a
self-pipe write to wake the other loop, futures chained across threads), and two threads contended for the
GIL: py-spy put about a sixth of the worker's busy samples at 500 pods/s on that crossing. The price is
that a long synchronous stretch on the loop now also delays the consumer's fetches and heartbeats, so the
agents' long loops (a shard's rebuild, a large batch) give the loop a turn every `BREATHE_S`
(`streams.faust_overrides.batching.Breather`), far below the session timeout (`session_timeout_s`, 6 s).

A partition Faust pauses is paused in aiokafka too (`_Consumer.pause_partitions`), so the changelogs of a
worker's own tables stay out of its fetches.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Iterable
from typing import TYPE_CHECKING, Any, cast

import aiokafka
import faust
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from mode.utils.futures import maybe_async

from streams.faust_overrides.clients import first_offsets

if TYPE_CHECKING:
    from streams.runtime.lifecycle import Lifecycle

__all__ = ["EyrieApp"]


class EyrieApp(faust.App):
    """A Faust app whose Kafka consumer runs on the app's loop and waits at most `fetch_max_wait_ms` for a
    fetch to fill."""

    lifecycle: Lifecycle | None = None
    """The process's lifecycle lines (`streams.runtime.app.create_app` sets it; `run_app` writes them)."""

    def __init__(self, *args: Any, fetch_max_wait_ms: int, **kwargs: Any) -> None:
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.before_commit: list[Callable[[], Awaitable[None]]] = []
        """Called before the consumer commits offsets: an agent that holds outputs back after acknowledging
        the events that made them (the applier's results for placement) hands them to the producer here,
        which Faust flushes before it commits, so a committed input never leaves its output unsent."""
        self.after_commit: list[Callable[[], Awaitable[None]]] = []
        """Called once the consumer committed offsets: what is kept only until its inputs are committed
        (the ledger's deleted-pod entries) can go."""
        super().__init__(*args, **kwargs)

    def _new_consumer(self) -> Any:
        return _Consumer(
            self.transport,
            callback=self.topics.on_message,
            loop=self.transport.loop,
            on_partitions_revoked=self._on_partitions_revoked,
            on_partitions_assigned=self._on_partitions_assigned,
            beacon=self.beacon,
        )


class _Consumer(AIOKafkaConsumer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sought: set[Any] = set()
        """Partitions sought (to their committed offsets, or back over skipped ones) with nothing handed
        over since: their read offset is the next to read, not the last read."""
        self._reread_from: dict[Any, int] = {}
        """Per partition, the offset last sought back to since it was sought to its committed offset."""
        self._hold = _StreamHold()

    def _new_consumer_thread(self) -> AIOKafkaConsumerThread:
        # `thread_loop`: the loop the aiokafka consumer is built on and runs on, the app's own.
        return _ConsumerThread(self, loop=self.loop, thread_loop=self.loop, beacon=self.beacon)

    async def _drain_messages(self, fetcher: Any) -> None:
        """Faust 0.15's fetch loop (`faust.transport.consumer.Consumer._drain_messages`), with stream records
        held while `_hold` says so, records handed over inline (`_start`), and one more change: skipped
        offsets are read again, not committed over. Faust takes a jump in a partition's offsets for a
        gap (compaction, transaction markers) and counts the missing offsets as processed. eyrie's input
        topics have neither, and a jump there means records the consumer fetched and never handed over: a
        rebalance ended a fetch's hand-over halfway and Faust's seek back to the committed offsets failed ("No
        current assignment"), so the next fetch went on from where the last one had stopped. Counting those as
        processed let the commit pass them, and a worker that took the partition over never saw them. The
        partition is sought back to the first missing offset instead, and a jump seen again from the same
        offset (records that are really gone: retention) is a gap, as Faust has it.
        """
        callback = self.callback
        getmany = self.getmany
        consumer_should_stop = cast(Any, self)._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        get_read_offset = self._read_offset.__getitem__
        set_read_offset = self._read_offset.__setitem__
        set_flag = self.diag.set_flag
        unset_flag = self.diag.unset_flag
        commit_every = self._commit_every
        acks_enabled_for = self.app.topics.acks_enabled_for
        reread_from = self._reread_from
        hold = self._hold
        yield_every = 100
        since_yield = 0
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                set_flag(CONSUMER_FETCHING)
                records = cast(AsyncIterator[Any], getmany(timeout=1.0))
                await self.sleep(0)  # getmany may return at once, again and again
                if self.should_stop:
                    continue
                sought: set[Any] = set()
                async for tp, message in records:
                    since_yield += 1
                    if since_yield > yield_every:
                        await asyncio.sleep(0)
                        since_yield = 0
                    if tp in sought:
                        continue  # fetched past the offsets being read again: it comes back after them
                    if hold.holding and acks_enabled_for(message.topic):
                        hold.passed_over.add(tp)  # sought back to its read offset when the hold ends
                        continue
                    offset = message.offset
                    r_offset = get_read_offset(tp)
                    if r_offset is not None and offset < r_offset:
                        continue  # already handed over (Faust logs these as dropped)
                    if r_offset is not None and acks_enabled_for(message.topic):
                        # The read offset is the next to read right after a seek, else the last handed over.
                        expected = r_offset if tp in self._sought else r_offset + 1
                        if offset > expected:
                            if reread_from.get(tp) != expected:
                                reread_from[tp] = expected
                                sought.add(tp)
                                self.log.warning(
                                    "%s skipped offsets %d-%d: reading them again", tp, expected, offset - 1
                                )
                                await self.seek(tp, expected)
                                continue
                            await self._add_gap(tp, expected, offset - 1)
                    if commit_every is not None and self._n_acked >= commit_every:
                        self._n_acked = 0
                        await self.commit()
                    # Faust awaits every delivery in `wait_first`, against a flow suspension: four tasks
                    # and an asyncio.wait per record, about 45 µs, and two turns of the loop. A delivery
                    # almost always finishes without waiting (its stream's queue has room), so it runs
                    # inline, and only one that has to wait goes to `wait_first`.
                    rest = _start(callback(message))
                    if rest is not None:
                        await self.wait_first(rest, self.suspend_flow.wait())
                    set_read_offset(tp, offset)
                    self._sought.discard(tp)
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

    def pause_partitions(self, tps: Iterable[Any]) -> None:
        """Faust's pause only stops handing a partition's records over; aiokafka went on fetching it. So after
        a rebalance every fetch named the changelog partitions of the worker's own tables (Faust pauses them
        and never resumes them unless it recovers from them), and kept what came back from them for ever,
        unread. Pausing them in aiokafka too leaves them out of fetch requests."""
        tps = list(tps)
        super().pause_partitions(tps)
        consumer = self._thread._consumer
        if consumer is not None:
            consumer.pause(*_assigned(consumer, tps))

    def resume_partitions(self, tps: Iterable[Any]) -> None:
        tps = list(tps)
        super().resume_partitions(tps)
        consumer = self._thread._consumer
        if consumer is not None:
            consumer.resume(*_assigned(consumer, tps))

    # Where a partition's records start after a rebalance. Faust's revoke clears the records the streams
    # had not taken yet from their queues, and the assignment is to bring every stream partition back to its
    # committed offset (`perform_seek`) before the streams go on. Two things broke that, each seen in the
    # two-workers fault test as pods never placed:
    # - aiokafka's `seek_to_committed` passes over a partition with no committed offset (or 0), so such a
    #   partition went on from wherever its last fetch had stopped, past the cleared records. In one run a
    #   second worker joined in the first second, before any commit: the sequencer partition went on at
    #   offset 239, the shard was rebuilt up to there with outputs discarded, and most pods of offsets 28-238
    #   were never placed.
    # - Faust's table recovery resumes the flow before it seeks (to read the changelogs), and clears the
    #   streams' queues again when it resumes them after the seek (`FlowControlEvent.resume`). Records
    #   handed over in between, from before the seek or after it, were cleared with their read offsets
    #   already past them: in one run 508 offsets of a pod-requests partition were never forwarded, and
    #   its commits stopped there for good (Faust commits nothing above offsets never acknowledged).
    # So stream records are held from the assignment until the flow resumes after the seek, and a
    # partition with nothing committed is sought to its first offset. Records fetched while held are read
    # again: the partitions they came from are sought back to their read offsets when the hold ends.

    async def _commit_tps(self, tps: Iterable[Any], start_new_transaction: bool) -> bool:
        app = cast(EyrieApp, self.app)
        for send_held_outputs in app.before_commit:
            await send_held_outputs()
        committed = bool(await super()._commit_tps(tps, start_new_transaction))
        if committed:
            for committed_hook in app.after_commit:
                await committed_hook()
        return committed

    async def on_partitions_assigned(self, assigned: set[Any], generation_id: int = 0) -> None:
        self._hold.assigned()
        await super().on_partitions_assigned(assigned, generation_id)

    async def perform_seek(self) -> None:
        self._hold.seeking()
        await super().perform_seek()
        self._sought.update(self._read_offset)
        self._reread_from.clear()
        consumer = self._thread._consumer
        if consumer is not None:
            acks_enabled_for = self.app.topics.acks_enabled_for
            uncommitted = [
                tp
                for tp in consumer.assignment()
                if not self._read_offset.get(tp) and acks_enabled_for(tp.topic)
            ]
            if uncommitted:
                for tp, start in (await first_offsets(consumer, uncommitted)).items():
                    consumer.seek(tp, start)
                    self._read_offset[tp] = start  # Faust's own seek keeps 0 as None: "unknown"
        self._hold.sought()

    def resume_flow(self) -> None:
        super().resume_flow()
        passed_over = self._hold.resumed()
        consumer = self._thread._consumer
        if passed_over and consumer is not None:
            # Their position is past the records passed over; with nothing fetched after them (the end of
            # a partition) no jump would ever show it, and they would never be handed over.
            assigned = consumer.assignment()
            for tp in passed_over:
                offset = self._read_offset.get(tp)
                if offset is not None and tp in assigned:  # still sought: nothing was handed over
                    consumer.seek(aiokafka.TopicPartition(tp.topic, tp.partition), offset)

    async def seek(self, partition: Any, offset: int) -> None:
        await super().seek(partition, offset)
        self._sought.add(partition)


class _StreamHold:
    """Whether stream records are held back: from an assignment, or the start of a seek to the committed
    offsets, until the flow resumes after such a seek has finished (see `_Consumer.on_partitions_assigned`).
    A resume with no finished seek since (Faust's recovery resumes to read the changelogs) keeps holding."""

    __slots__ = ("_sought", "holding", "passed_over")

    def __init__(self) -> None:
        self.holding = True
        self._sought = False
        self.passed_over: set[Any] = set()
        """Partitions whose records were fetched and passed over while holding."""

    def assigned(self) -> None:
        self.holding, self._sought = True, False

    seeking = assigned

    def sought(self) -> None:
        self._sought = True

    def resumed(self) -> set[Any]:
        """Ends the hold if a seek has finished since it began, and returns the partitions passed over
        meanwhile, to seek back; else nothing."""
        if not (self.holding and self._sought):
            return set()
        self.holding = False
        passed_over, self.passed_over = self.passed_over, set()
        return passed_over


def _assigned(consumer: aiokafka.AIOKafkaConsumer, tps: list[Any]) -> list[aiokafka.TopicPartition]:
    """Faust's partitions that `consumer` has (aiokafka refuses to pause or resume any other)."""
    assigned = consumer.assignment()
    return [tp for tp in (aiokafka.TopicPartition(tp.topic, tp.partition) for tp in tps) if tp in assigned]


def _start(delivery: Awaitable[Any]) -> Awaitable[Any] | None:
    """Runs the coroutine `delivery` until it first waits: None if it finished without waiting (its value
    dropped), else the rest of it, to await. An exception it raises before waiting is raised here. Any other
    awaitable is returned as it is."""
    if not isinstance(delivery, Coroutine):
        return delivery
    try:
        awaiting = delivery.send(None)
    except StopIteration:
        return None
    return _Suspended(delivery, awaiting)


class _Suspended:
    """A coroutine that suspended on `awaiting`: awaiting this goes on with it as ``await`` would have."""

    __slots__ = ("awaiting", "coroutine")

    def __init__(self, coroutine: Coroutine[Any, Any, Any], awaiting: Any) -> None:
        self.coroutine = coroutine
        self.awaiting = awaiting

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine, awaiting = self.coroutine, self.awaiting
        try:
            while True:
                try:
                    value = yield awaiting
                except GeneratorExit:
                    coroutine.close()
                    raise
                except BaseException as exc:  # cancellation included: it is the coroutine's to handle
                    awaiting = coroutine.throw(exc)
                else:
                    awaiting = coroutine.send(value)
        except StopIteration as stop:
            return stop.value


class _InLoop:
    """What mode's `WorkerThread` does for a `ServiceThread`, on the app's own loop: `start` runs the service
    (`ServiceThread._serve`: start, wait until stopped, shut down) as a task instead of in a new thread."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self.task: asyncio.Task[None] | None = None  # held: the loop keeps only a weak reference to a task

    def start(self) -> None:
        self.task = self.service.parent_loop.create_task(self.service._serve())

    def stop(self) -> None:
        """Nothing to join: `_serve` ends on the loop by itself once the service is stopped."""


class _ConsumerThread(AIOKafkaConsumerThread):
    """Faust's aiokafka consumer service, run on the app's loop (the module's docstring says why). Built with
    ``thread_loop`` = the app's loop, so the aiokafka consumer, its fetcher and its coordinator live there;
    mode's thread plumbing (the method queue, the cross-loop events) becomes direct calls."""

    Worker = _InLoop  # type: ignore[assignment]  # mode types it as a Thread subclass

    async def call_thread(self, fun: Any, *args: Any, **kwargs: Any) -> Any:
        # Faust's calls (subscribe, commit, seek, position, every fetch of `getmany`, ...) are sync or async;
        # mode's queue took both.
        return await maybe_async(fun(*args, **kwargs))

    def _stopped_set(self) -> None:
        self._stopped.set()  # mode's goes through call_soon_threadsafe to the thread's loop

    def set_shutdown(self) -> None:
        self._shutdown.set()

    async def _gather_remaining_tasks(self) -> None:
        """mode cancels every task left on the thread's loop when the thread ends; that loop is the app's
        here, and its tasks are the app's to stop. The consumer's own (fetcher, coordinator) end with it."""

    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # Read by aiokafka when the consumer starts and builds its fetcher; Faust passes no other value.
        consumer._fetch_max_wait_ms = cast(EyrieApp, self.app).fetch_max_wait_ms
        return consumer

    def verify_event_path(self, now: float, tp: Any) -> None:
        """Faust's livelock check (every few seconds, per assigned partition: fetched lately? stream moving?)
        for the partitions aiokafka fetches. A partition eyrie pauses in aiokafka
        (`_Consumer.pause_partitions`: the changelogs of the worker's own tables) is never fetched on purpose,
        and Faust, which expects its paused partitions to be fetched all the same, logged "Aiokafka has not
        sent fetch request" for each of them at ERROR, about every 2.5 s, from `stall_timeout_s` after the
        start for as long as the process ran. Nor is a partition unfetched while the broker is lost, or
        just back, a livelock: one the outage kept from its first fetch was logged at ERROR as "not sent
        fetch request since start" (the lifecycle's one "broker lost" line says it all)."""
        if not self._is_paused(tp) and self._broker_settled(now):
            super().verify_event_path(now, tp)

    def verify_recovery_event_path(self, now: float, tp: Any) -> None:
        if not self._is_paused(tp) and self._broker_settled(now):
            super().verify_recovery_event_path(now, tp)

    def _broker_settled(self, now: float) -> bool:
        lifecycle = cast(EyrieApp, self.consumer.app).lifecycle
        return lifecycle is None or lifecycle.broker.settled(now, self.tp_fetch_request_timeout_secs)

    def _is_paused(self, tp: Any) -> bool:
        consumer = self._consumer
        return consumer is not None and aiokafka.TopicPartition(tp.topic, tp.partition) in consumer.paused()


# mode names a service's logger after the module that defines its class, so these Faust services would log
# as eyrie's own code, which `streams.runtime.logs` shows from a lower level than the libraries'. Set after
# the classes: mode replaces a logger given in a class body if it is already another module's.
EyrieApp.logger = faust.App.logger
_Consumer.logger = AIOKafkaConsumer.logger
_ConsumerThread.logger = AIOKafkaConsumerThread.logger
