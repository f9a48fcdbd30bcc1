"""The Faust apps: one for workers (forwarders, metrics, placement), one for the applier.

Agents stay thin (decode, call a pure core from `streams.core`, send); this module only wires topics,
tables and agents together. Workers and the applier are separate consumer groups, so the applier sees
every binding whichever worker placed it, and workers scale out without splitting the ledger.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from pathlib import Path

import faust
from faust.types import TopicT

from streams.faust_overrides.fetching import EyrieApp
from streams.faust_overrides.tables import EyrieTableManager
from streams.faust_overrides.worker import EyrieWorker
from streams.runtime.agents.common import Topics
from streams.runtime.lifecycle import PROBE_S, Lifecycle, probe_broker
from streams.runtime.logs import EyrieHandler, configure_logging, flush_repeats
from streams.runtime.observability import Observability, install
from streams.runtime.security import faust_broker
from streams.settings import Settings

__all__ = ["GC_THRESHOLDS", "app_id", "create_app", "run_app"]

ROLES = ("worker", "applier")

GC_THRESHOLDS = (10_000, 2, 1_000)
"""Python's collector thresholds in a worker or an applier (the defaults are 700, 10, 10). Their heaps hold
a cluster's worth of long-lived objects (node specs, portraits, queued and assumed pods), and the defaults
walked all of it (a full collection) every few thousand allocations; decoding a batch of pods allocates that
many. The first two thresholds set how long a pause is: a young collection walks every tracked object that
survived since the last one, and each placed pod keeps about 28 (its request, snapshot records, loads). At
100,000 / 50, at 500 pods/s, the worker stopped 55-75 ms every 7.7 s for generation 0, and generation 1
would have walked up to 5 million objects at once; at 10,000 / 2 its pauses are 12-33 ms every 3 s (both
measured with a `gc.callbacks` timer in `bench.pipeline`'s latency phase). Each object is walked once per
young generation either way, so the total is the same. Full collections still wait for 1,000 of
generation 1's, and for the heap to have grown by a quarter."""


def _topics(app: EyrieApp, settings: Settings, observe: Observability) -> Topics:
    def topic(short: str, partitions: int | None = None) -> TopicT:
        return app.topic(
            settings.topic(short),
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=partitions,
            allow_empty=True,
        )

    return Topics(
        metrics=topic("metrics", settings.partitions),
        node_events=topic("node-events", 1),
        pod_requests=topic("pod-requests", settings.partitions),
        bindings=topic("bindings", settings.partitions),
        binding_results=topic("binding-results", settings.partitions),
        dead_letters=topic("dead-letters", 1),
        config=topic("config", 1),
        sequencer=topic("sequencer", settings.shards),
        settings=settings,
        app=app,
        observe=observe,
    )


def app_id(settings: Settings, role: str) -> str:
    """The Faust app id of `role`, which is also its Kafka consumer group."""
    return f"{settings.topic_prefix}{role}".replace(".", "-").strip("-")


def create_app(settings: Settings, role: str = "worker", *, web_port: int | None = None) -> faust.App:
    """A Faust app for `role`; its agents are registered and ready for `run_app`."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}")
    datadir = Path(settings.data_dir) / role
    datadir.mkdir(parents=True, exist_ok=True)
    app = EyrieApp(
        app_id(settings, role),
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        **faust_broker(settings),  # broker URLs and TLS/SASL credentials
        # No implicit channel may fall back to a codec that could execute data (pickle): raw bytes only.
        key_serializer="raw",
        value_serializer="raw",
        # eyrie's settings are Faust's only configuration: Faust's own variables (BROKER_URL,
        # APP_VALUE_SERIALIZER=pickle, ...) would otherwise override the values above.
        env={},
        store=settings.store,
        datadir=str(datadir),
        topic_partitions=settings.partitions,
        topic_replication_factor=1,
        topic_disable_leader=True,
        table_standby_replicas=1,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=settings.heartbeat_interval_s,
        broker_rebalance_timeout=settings.rebalance_timeout_s,
        broker_commit_interval=1.0,
        producer_linger=settings.linger_ms / 1000,
        producer_max_request_size=settings.max_message_bytes,
        # Batches stay within the topics' max.message.bytes; a fetch holds at least one largest record.
        producer_max_batch_size=min(16384, settings.max_message_bytes),
        consumer_max_fetch_size=max(1024**2, settings.max_message_bytes),
        producer_acks=-1,
        stream_wait_empty=False,
        web_enabled=web_port is not None,
        web_port=web_port or 6066,
        web_bind=settings.web_host,
        autodiscover=False,
        TableManager=EyrieTableManager,  # without Faust's fixed second before the tables' registration
        # Faust's check that every assigned partition is fetched and its stream moving (it logs an error
        # for one that is not); `streams.faust_overrides.fetching` leaves the partitions eyrie pauses out of
        # it.
        stream_processing_timeout=settings.stall_timeout_s,
        broker_commit_livelock_soft_timeout=settings.stall_timeout_s,
    )
    app.lifecycle = Lifecycle(role, settings, web_port)
    observe = Observability()
    install(app, observe, role)
    topics = _topics(app, settings, observe)
    if role == "worker":
        from streams.runtime.agents import forward, metrics, placement

        forward.register(app, topics)
        metrics.register(app, topics)
        placement.register(app, topics)
    else:
        from streams.runtime.agents import applier

        applier.register(app, topics)
    return app


def _on_ready(lifecycle: Lifecycle) -> Callable[[EyrieWorker], None]:
    """What a worker does once started: its "ready" line, then `_watch` for as long as it runs."""

    def ready(worker: EyrieWorker) -> None:
        lifecycle.ready(worker.app)
        worker.add_future(_watch(worker, lifecycle))

    return ready


async def _watch(worker: EyrieWorker, lifecycle: Lifecycle) -> None:
    """About once a second: collapsed log repeats whose window is over, the assignment, the broker."""
    while not worker.should_stop:
        await worker.sleep(PROBE_S)
        if worker.should_stop:
            break
        flush_repeats()
        lifecycle.check_assignment(worker.app)
        lifecycle.check_broker(await probe_broker(worker.app))


def run_app(app: faust.App) -> None:
    """Run until SIGINT/SIGTERM (Faust's worker owns the event loop and signal handling); logs one line
    when ready and one when stopped (`streams.runtime.lifecycle`), and exits with the worker's status."""
    gc.set_threshold(*GC_THRESHOLDS)
    if not any(isinstance(handler, EyrieHandler) for handler in logging.getLogger().handlers):
        configure_logging()  # run without the CLI: its defaults for a worker
    lifecycle: Lifecycle | None = getattr(app, "lifecycle", None)
    worker = EyrieWorker(app, quiet=True, on_ready=None if lifecycle is None else _on_ready(lifecycle))
    try:
        worker.execute_from_commandline()
    except SystemExit as exit_:
        flush_repeats(every=True)
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if lifecycle is not None:
            crash = worker.crash_reason
            reason = worker.stop_reason if code == 0 else f"failed: {crash!r}" if crash else "failed"
            lifecycle.stopped(code, reason)
        raise
