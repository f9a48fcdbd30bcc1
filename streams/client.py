"""The Python client: publish pod requests, deletions, node events and metric samples; read decisions.

::

    async with EyrieClient(load_settings()) as client:
        await client.publish_pod(PodRequest(uid="web-1", requests={"cpu": "500m", "memory": "1Gi"}))
        async for decision in client.decisions(follow=True, until_idle=5):
            print(decision.uid, decision.status, decision.node)

Publishing is batched by the producer (``linger_ms``) and idempotent (``enable_idempotence``), so a retried
send never duplicates a record; records are keyed by their identity (pod uid, node name) so each key's
events stay in order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, MessageSizeTooLargeError
from pydantic import BaseModel

from schemas.codec import encode
from schemas.documents import Document
from schemas.events import Binding, BindingResult, MetricSample
from schemas.exceptions import BrokerError, InvalidInput
from schemas.node import NodeEvent
from schemas.pod import PodDeleted, PodRequest
from streams.core.ingress import is_watermark
from streams.records import ELEMENTS_PER_RECORD, Decoded, decode_records, json_arrays
from streams.security import client_security, consumer_limits, kafka_errors, producer_limits
from streams.settings import Settings
from streams.topics import ensure_topics

__all__ = ["Decision", "EyrieClient", "latest_decisions"]


@dataclass(slots=True)
class Decision:
    """A pod's latest state on the decisions stream (`status` ``pending``: bound, not yet applied)."""

    uid: str
    node: str | None
    cluster: str | None
    status: str
    reasons: list[str] = field(default_factory=list)
    profile: str | None = None
    score: int | None = None
    attempt: int = 0
    at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _join(binding: Binding | None, result: BindingResult | None) -> Decision:
    if result is None:
        assert binding is not None
        return Decision(
            binding.uid,
            binding.node,
            binding.cluster,
            "pending",
            [],
            binding.profile,
            binding.score,
            binding.attempt,
            binding.decided_at,
        )
    # A result names the node it applies to; the binding adds what only placement knew.
    same = binding is not None and binding.uid == result.uid and binding.node == result.node
    return Decision(
        uid=result.uid,
        node=result.node if result.status != "unschedulable" else None,
        cluster=result.cluster or (binding.cluster if same and binding else None),
        status=result.status,
        reasons=list(result.reasons),
        profile=binding.profile if same and binding else None,
        score=binding.score if same and binding else None,
        attempt=result.attempt,
        at=result.at,
    )


def latest_decisions(bindings: dict[str, Binding], results: dict[str, BindingResult]) -> list[Decision]:
    """Each pod's latest state from its latest binding and latest result (`eyrie decisions` and
    `eyrie replay --offline --out` both print these)."""
    decisions = []
    for uid in {**bindings, **results}:
        binding, result = bindings.get(uid), results.get(uid)
        if result is not None and binding is not None and _binding_is_newer(binding, result):
            result = None
        decisions.append(_join(binding, result))
    return decisions


def _binding_is_newer(binding: Binding, result: BindingResult) -> bool:
    # The two topics are read concurrently, so arrival order says nothing; attempts do (a retry after a
    # conflict). An unschedulable verdict comes from placement itself, so a binding decided after it (the
    # pod fitted once the cluster changed) supersedes it.
    if binding.attempt > result.attempt:
        return True
    return result.status == "unschedulable" and binding.decided_at >= result.at


class EyrieClient:
    """Async client over one producer (started lazily) and short-lived consumers."""

    def __init__(self, settings: Settings, *, create_topics: bool = True) -> None:
        self.settings = settings
        self._create_topics = create_topics
        self._producer: AIOKafkaProducer | None = None
        self._pending: list[asyncio.Future[Any]] = []
        self.dead_letters = 0

    async def __aenter__(self) -> EyrieClient:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        with kafka_errors(self.settings):
            if self._create_topics:
                await ensure_topics(self.settings)
            self._producer = AIOKafkaProducer(
                bootstrap_servers=self.settings.bootstrap_servers,
                client_id=self.settings.client_id,
                enable_idempotence=True,
                acks="all",
                linger_ms=self.settings.linger_ms,
                request_timeout_ms=self.settings.request_timeout_ms,
                **producer_limits(self.settings, max_batch_size=256 * 1024),
                **client_security(self.settings),
            )
            await self._producer.start()

    async def close(self) -> None:
        if self._producer is not None:
            try:
                await self.flush()
            finally:
                await self._producer.stop()
                self._producer = None

    # -- publishing ---------------------------------------------------------------------------------

    async def send(
        self,
        short_topic: str,
        key: str | None,
        value: BaseModel | dict[str, Any] | bytes,
        *,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
    ) -> None:
        """Queue one record (a model, a plain document such as a profile, or bytes already encoded); it is
        delivered by the next batch. `flush` waits for every queued record."""
        if self._producer is None:
            raise BrokerError("client not started: use `async with EyrieClient(...)`")
        if isinstance(value, BaseModel):
            payload = encode(value)
        elif isinstance(value, dict):
            payload = orjson.dumps(value)
        else:
            payload = value
        try:
            future = await self._producer.send(
                self.settings.topic(short_topic),
                payload,
                key=key.encode() if key is not None else None,
                headers=headers,
                partition=partition,
            )
        except MessageSizeTooLargeError:
            raise InvalidInput(
                f"a record of {len(payload):,} bytes for {self.settings.topic(short_topic)} (key {key!r}) is "
                f"over max_message_bytes ({self.settings.max_message_bytes:,})"
            ) from None
        self._pending.append(future)
        if len(self._pending) >= 10_000:
            await self.flush()

    async def flush(self) -> None:
        """Wait until every queued record is acknowledged; raises `BrokerError` if any failed."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        results = await asyncio.gather(*pending, return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise BrokerError(f"{len(failures)} of {len(results)} records were not delivered: {failures[0]}")

    async def publish_pod(self, pod: PodRequest) -> None:
        await self.send("pod-requests", pod.uid, pod)

    async def delete_pod(self, uid: str, ts: float | None = None) -> None:
        await self.send("pod-requests", uid, PodDeleted(uid=uid, ts=time.time() if ts is None else ts))

    async def publish_node_event(self, event: NodeEvent) -> None:
        await self.send("node-events", event.node.name, event)

    async def publish_metric(self, sample: MetricSample) -> None:
        await self.send("metrics", sample.node, sample)

    async def publish_metrics(self, samples: Iterable[MetricSample]) -> None:
        """Several samples, one record per node (a JSON array, in the given order), or as few as
        ``max_message_bytes`` and `ELEMENTS_PER_RECORD` allow: the cheap way to ship a scrape, since every
        consumer pays per record."""
        by_node: dict[str, list[bytes]] = {}
        for sample in samples:
            by_node.setdefault(sample.node, []).append(encode(sample))
        limit = self.settings.max_value_bytes
        for node, encoded in by_node.items():
            for record in json_arrays(encoded, limit, ELEMENTS_PER_RECORD):
                await self.send("metrics", node, record)

    async def publish_documents(
        self, documents: Iterable[Document], on_sent: Callable[[], None] | None = None
    ) -> int:
        """Send documents loaded by `schemas.documents.load_documents`; returns how many were sent."""
        count = 0
        for document in documents:
            await self.send(document.topic, document.key, document.value)
            count += 1
            if on_sent is not None:
                on_sent()
        await self.flush()
        return count

    # -- consuming ----------------------------------------------------------------------------------

    async def records(
        self,
        short_topics: Iterable[str],
        *,
        from_beginning: bool = True,
        follow: bool = False,
        until_idle: float | None = None,
        raw: bool = False,
    ) -> AsyncIterator[tuple[str, Any]]:
        """Decoded records of the given topics (short names) in per-partition order.

        Without `follow`: everything up to the end offsets at the time of the call, then stop. With `follow`:
        keep reading; stop after `until_idle` seconds without a record (never, when None). Invalid records
        are published to the dead-letter topic and yielded as `Decoded(dead_letter=...)`. With `raw`:
        aiokafka's records as they are (key, value, headers, timestamp), undecoded.
        """
        names = {self.settings.topic(short): short for short in short_topics}
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap_servers,
            client_id=self.settings.client_id,
            group_id=None,
            enable_auto_commit=False,
            request_timeout_ms=self.settings.request_timeout_ms,
            **consumer_limits(self.settings),
            **client_security(self.settings),
        )
        try:
            with kafka_errors(self.settings, "read from"):
                await consumer.start()
            partitions = [
                TopicPartition(name, p)
                for name in names
                for p in sorted(consumer.partitions_for_topic(name) or await self._partitions(consumer, name))
            ]
            consumer.assign(partitions)
            if from_beginning:
                await consumer.seek_to_beginning(*partitions)
            else:
                await consumer.seek_to_end(*partitions)
            ends = await consumer.end_offsets(partitions) if not follow else {}
            remaining = set()
            for tp, end in ends.items():
                if end > await consumer.position(tp):
                    remaining.add(tp)
            if not follow and not remaining:
                return
            idle_since = time.monotonic()
            while True:
                batches = await consumer.getmany(timeout_ms=200, max_records=2000)
                if not batches:
                    if follow and until_idle is not None and time.monotonic() - idle_since >= until_idle:
                        return
                    continue
                idle_since = time.monotonic()
                for tp, messages in batches.items():
                    short = names[tp.topic]
                    for message in messages:
                        if is_watermark(message.headers):
                            continue  # a replay's control record, not data
                        if raw:
                            yield short, message
                            continue
                        for decoded in decode_records(
                            short,
                            tp.partition,
                            message.offset,
                            message.key,
                            message.value,
                            full_topic=tp.topic,
                        ):
                            if decoded.dead_letter is not None and short != "dead-letters":
                                await self._report(decoded)
                            yield short, decoded
                    if not follow and tp in remaining and messages[-1].offset + 1 >= ends[tp]:
                        remaining.discard(tp)
                if not follow and not remaining:
                    return
        except KafkaError as exc:
            raise BrokerError(f"cannot read from Kafka at {self.settings.bootstrap_servers}: {exc}") from None
        finally:
            await consumer.stop()

    async def events(self, short_topic: str, **options: Any) -> AsyncIterator[Any]:
        """Valid models of one topic; invalid records go to dead letters and are skipped."""
        async for _, decoded in self.records([short_topic], **options):
            if decoded.dead_letter is None:
                yield decoded.value

    async def decisions(
        self, *, from_beginning: bool = True, follow: bool = False, until_idle: float | None = None
    ) -> AsyncIterator[Decision]:
        """Without `follow`: one `Decision` per pod, its latest state, once the topics are read to their end.
        With `follow`: a `Decision` every time a pod gets a result, as it happens."""
        bindings: dict[str, Binding] = {}
        results: dict[str, BindingResult] = {}
        async for _, decoded in self.records(
            ["bindings", "binding-results"],
            from_beginning=from_beginning,
            follow=follow,
            until_idle=until_idle,
        ):
            value = decoded.value
            if isinstance(value, Binding):
                bindings[value.uid] = value
            elif isinstance(value, BindingResult):
                results[value.uid] = value
                if follow:
                    yield _join(bindings.get(value.uid), value)
        if follow:
            return
        for decision in latest_decisions(bindings, results):
            yield decision

    async def _partitions(self, consumer: AIOKafkaConsumer, topic: str) -> set[int]:
        await consumer._client.force_metadata_update()  # aiokafka has no public refresh
        found = consumer.partitions_for_topic(topic)
        if not found:
            raise BrokerError(f"topic {topic} does not exist (run a command that creates topics first)")
        return set(found)

    async def _report(self, decoded: Decoded) -> None:
        assert decoded.dead_letter is not None
        self.dead_letters += 1
        if self._producer is not None:
            await self.send("dead-letters", decoded.dead_letter.topic, decoded.dead_letter)
