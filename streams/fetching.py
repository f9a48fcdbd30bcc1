"""Faust's app, with its Kafka consumer fetching at eyrie's pace (`Settings.fetch_max_wait_ms`).

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
ms; at 200 ms p50 114 and 71 ms, p99 395 and 180 ms (README, "Pipeline benchmark").
"""

from __future__ import annotations

from typing import Any, cast

import aiokafka
import faust
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer

__all__ = ["EyrieApp"]


class EyrieApp(faust.App):
    """A Faust app whose worker consumer waits at most `fetch_max_wait_ms` for a fetch to fill."""

    def __init__(self, *args: Any, fetch_max_wait_ms: int, **kwargs: Any) -> None:
        self.fetch_max_wait_ms = fetch_max_wait_ms
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
    def _new_consumer_thread(self) -> AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _ConsumerThread(AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # Read by aiokafka when the consumer starts and builds its fetcher; Faust passes no other value.
        consumer._fetch_max_wait_ms = cast(EyrieApp, self.app).fetch_max_wait_ms
        return consumer
