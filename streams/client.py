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
import math
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
from schemas.pod import PodBound, PodDeleted, PodRequest
from streams.core.decoders import ELEMENTS_PER_RECORD, Decoded, decode_records, json_arrays
from streams.core.ingress import is_watermark
from streams.faust_overrides.clients import refresh_metadata
from streams.runtime.security import client_security, consumer_limits, kafka_errors, producer_limits
from streams.runtime.topics import ensure_topics
from streams.settings import Settings

__all__ = ["DECISION_STATUSES", "Decision", "Deletion", "EyrieClient", "latest_decisions"]


DECISION_STATUSES = ("pending", "applied", "conflict", "rejected", "unschedulable", "deleted")
"""A pod's states on the decisions stream: bound and not yet applied, then the applier's or placement's
verdict, or gone (deleted by its owner, preempted, or dropped by its workload's scale-down)."""


@dataclass(slots=True)
class Decision:
    """A pod's latest state on the decisions stream (`status`: one of `DECISION_STATUSES`).

    `at` is when the pod reached that state, in Unix seconds (by the clock of whoever decided: placement,
    the applier, or the deletion's sender); `time` is the same instant in ISO-8601 UTC for people.
    """

    uid: str
    node: str | None
    cluster: str | None
    status: str
    reasons: list[str] = field(default_factory=list)
    profile: str | None = None
    score: int | None = None
    attempt: int = 0
    at: float | None = None
    namespace: str | None = None
    name: str | None = None

    @property
    def time(self) -> str | None:
        if self.at is None:
            return None
        stamp = datetime.fromtimestamp(self.at, tz=UTC).isoformat(timespec="milliseconds")
        return stamp.replace("+00:00", "Z")

    def to_json(self) -> dict[str, Any]:
        # Who and what first, then where and why, then the details: the order a person reads a line in.
        return {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "status": self.status,
            "node": self.node,
            "cluster": self.cluster,
            "reasons": list(self.reasons),
            "profile": self.profile,
            "score": self.score,
            "attempt": self.attempt,
            "time": self.time,
            "at": self.at,
        }


@dataclass(frozen=True, slots=True)
class Deletion:
    """A pod seen deleted: `ts` its deletion time, `reason` who said so, and `after` the latest attempt it
    ends (a binding or result of a later attempt means the pod was placed again, as a replica can be)."""

    ts: float
    reason: str
    after: float


DELETED_BY_OWNER = "pod deleted"
RELEASED = "released by placement (pod deleted, preempted, or its workload scaled down)"


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
            binding.namespace,
            binding.name,
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
        namespace=result.namespace or (binding.namespace if binding else None),
        name=result.name or (binding.name if binding else None),
    )


def _latest(
    binding: Binding | None, result: BindingResult | None, deletion: Deletion | None
) -> Decision | None:
    if result is not None and binding is not None and _binding_is_newer(binding, result):
        result = None
    if binding is None and result is None:
        return None
    return _unless_deleted(_join(binding, result), deletion)


def _unless_deleted(decision: Decision, deletion: Deletion | None) -> Decision:
    """`decision`, or the pod gone if `deletion` ends the attempt it reports."""
    if deletion is not None and decision.attempt <= deletion.after:
        decision.status, decision.reasons, decision.at = "deleted", [deletion.reason], deletion.ts
    return decision


def latest_decisions(
    bindings: Mapping[str, Binding],
    results: Mapping[str, BindingResult],
    deletions: Mapping[str, Deletion] | None = None,
) -> list[Decision]:
    """Each pod's latest state from its latest binding, latest result and deletion, in decision order
    (by `at`, ties by uid). `eyrie decisions` and `eyrie replay --offline --out` both print these."""
    decisions = []
    for uid in {**bindings, **results}:
        decision = _latest(bindings.get(uid), results.get(uid), (deletions or {}).get(uid))
        if decision is not None:
            decisions.append(decision)
    decisions.sort(key=lambda d: (d.at if d.at is not None else -math.inf, d.uid))
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
        raw: bool | Collection[str] = False,
    ) -> AsyncIterator[tuple[str, Any]]:
        """Decoded records of the given topics (short names) in per-partition order.

        Without `follow`: everything up to the end offsets at the time of the call, then stop. With `follow`:
        keep reading; stop after `until_idle` seconds without a record (never, when None). Invalid records
        are published to the dead-letter topic and yielded as `Decoded(dead_letter=...)`. With `raw` (True,
        or the short names of some of the topics): aiokafka's records of those topics as they are (key,
        value, headers, timestamp), undecoded.
        """
        names = {self.settings.topic(short): short for short in short_topics}
        undecoded = set(names.values()) if raw is True else set(raw or ())
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
                        if short in undecoded:
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
        """Without `follow`: one `Decision` per pod, its latest state, once the topics are read to their end,
        in decision order. With `follow`: a `Decision` every time a pod gets a result or is deleted.

        Deletions come from two places: placement's releases on the bindings topic (a pod it had placed),
        and the owners' `PodDeleted` on pod-requests (also a pod that never found a node). Pod requests are
        read raw and only deletions decoded: the forwarders already dead-lettered the invalid ones. Pods
        bound by others (`PodBound`, on both topics) are no decisions of eyrie's, and are left out."""
        bindings: dict[str, Binding] = {}
        results: dict[str, BindingResult] = {}
        deletions: dict[str, Deletion] = {}

        def delete(uid: str, ts: float, reason: str, after: float) -> Decision | None:
            known = deletions.get(uid)
            if known is not None and known.after >= after:
                return None  # nothing new: placement's release of a pod its owner deleted
            if not follow:
                deletions[uid] = Deletion(ts, reason, after)
                return None
            before = _latest(bindings.get(uid), results.get(uid), known)
            deletions[uid] = Deletion(ts, reason, after)
            if before is not None and before.status == "deleted":
                return None  # said once: an owner's deletion and placement's release of the same pod
            decision = _latest(bindings.get(uid), results.get(uid), deletions[uid])
            if decision is None and reason == RELEASED:
                # Placed before this command started following: its release is still worth a line.
                decision = Decision(uid, None, None, "deleted", [reason], at=ts)
            return decision

        async for short, item in self.records(
            ["bindings", "binding-results", "pod-requests"],
            from_beginning=from_beginning,
            follow=follow,
            until_idle=until_idle,
            raw=("pod-requests",),
        ):
            decision: Decision | None = None
            if short == "pod-requests":
                if item.value is None or b"PodDeleted" not in item.value:
                    continue  # a pod request: decoding every one would cost more than the rest
                for decoded in decode_records(short, item.partition, item.offset, item.key, item.value):
                    if isinstance(decoded.value, PodDeleted):
                        uid = decoded.value.uid
                        decision = delete(uid, decoded.value.ts, DELETED_BY_OWNER, math.inf)
            elif isinstance(item.value, Binding):
                bindings[item.value.uid] = item.value
            elif isinstance(item.value, PodBound):
                continue  # placement counted a pod someone else bound: no decision of eyrie's
            elif isinstance(item.value, PodDeleted):
                # Placement's release follows the binding it undoes on that binding's partition.
                uid = item.value.uid
                known = bindings.get(uid)
                decision = delete(uid, item.value.ts, RELEASED, known.attempt if known else -1)
            elif isinstance(item.value, BindingResult):
                uid = item.value.uid
                results[uid] = item.value
                if follow:
                    # The topics are read concurrently: the deletion of a pod may be read before its result.
                    decision = _unless_deleted(_join(bindings.get(uid), item.value), deletions.get(uid))
            if decision is not None:
                yield decision
        if follow:
            return
        for latest in latest_decisions(bindings, results, deletions):
            yield latest

    async def _partitions(self, consumer: AIOKafkaConsumer, topic: str) -> set[int]:
        await refresh_metadata(consumer)
        found = consumer.partitions_for_topic(topic)
        if not found:
            raise BrokerError(f"topic {topic} does not exist (run a command that creates topics first)")
        return set(found)

    async def _report(self, decoded: Decoded) -> None:
        assert decoded.dead_letter is not None
        self.dead_letters += 1
        if self._producer is not None:
            await self.send("dead-letters", decoded.dead_letter.topic, decoded.dead_letter)
