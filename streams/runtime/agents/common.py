"""What every agent does the same way: the topic handles, dead letters, partitioning and shard routing,
envelope sends, byte tables."""

from __future__ import annotations

import zlib
from collections.abc import Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import faust
from faust.types import TopicT

from schemas.codec import encode
from schemas.events import DeadLetter
from streams.core.decoders import Decoded, dead_letter, decode_record, decode_records
from streams.core.ingress import envelope_from_record, pack_envelopes
from streams.core.sequencer import Envelope, Kind
from streams.faust_overrides.fetching import EyrieApp
from streams.faust_overrides.tables import new_bytes_table
from streams.runtime.observability import Observability
from streams.settings import Settings

__all__ = [
    "BATCH",
    "TableBytes",
    "Topics",
    "batch_window_s",
    "bytes_table",
    "decode_message",
    "decode_messages",
    "envelope_of",
    "letter_for",
    "partition_of",
    "send",
    "send_dead_letter",
    "send_envelopes",
    "shards_for",
]

BATCH = 1000
"""Agents take records in batches of up to `BATCH`, gathered for at most ``Settings.batch_window_ms``: the
cost of a Faust event is paid once per batch."""


@dataclass(frozen=True, slots=True)
class Topics:
    """What every agent is given: Faust handles of every topic, raw bytes in and out
    (`streams.core.decoders` does the decoding, so every consumer rejects the same records with the same
    dead letters), the settings, the app, and the app's metrics."""

    metrics: TopicT
    node_events: TopicT
    pod_requests: TopicT
    bindings: TopicT
    binding_results: TopicT
    dead_letters: TopicT
    config: TopicT
    sequencer: TopicT
    settings: Settings
    app: EyrieApp
    observe: Observability


def batch_window_s(settings: Settings) -> float:
    return float(settings.batch_window_ms) / 1000.0


def partition_of(key: str | bytes, partitions: int) -> int:
    """The partition of `key` among `partitions`, the same in every process and run: bindings by node,
    sequencer shards by cluster, table keys by key."""
    return zlib.crc32(key if isinstance(key, bytes) else key.encode()) % partitions


_BROADCAST = frozenset({Kind.WATERMARK, Kind.CONFIG, Kind.TICK, Kind.DELETE, Kind.SUMMARY, Kind.WORKLOAD})


def shards_for(envelope: Envelope, shards: int) -> range | tuple[int]:
    """Which sequencer partitions need `envelope`: a cluster's own shard, or all of them for what is not
    tied to one cluster (watermarks, profiles, clock ticks, deletions, load summaries).

    A pod goes to the shard of the cluster its ``eyrie.io/cluster`` label pins it to; without one, to the
    shard of its ``eyrie.io/federation`` label, else of the cluster ``default``. A workload is divided
    among the clusters of the shard it reaches, so the federation label names a cluster whose shard-mates
    share it (all clusters when there is one shard). Deletions go everywhere, so a workload's deletion
    reaches the shard that holds its replicas; results go to the shard of the cluster their binding names,
    which is the shard that placed it."""
    if shards == 1:
        return (0,)
    if envelope.kind in _BROADCAST:
        return range(shards)
    value = envelope.value
    if envelope.kind is Kind.NODE:
        return (partition_of(value.node.cluster, shards),)
    if envelope.kind is Kind.POD or envelope.kind is Kind.BOUND:  # a pod bound elsewhere goes as a pod does
        labels = value.labels if envelope.kind is Kind.POD else value.pod.labels
        key = labels.get("eyrie.io/cluster", labels.get("eyrie.io/federation", "default"))
        return (partition_of(key, shards),)
    if envelope.kind is Kind.RESULT:
        return (partition_of(value.cluster or "default", shards),)
    return range(shards)


def short_topic(topics: Topics, message: Any) -> str:
    return str(message.topic)[len(topics.settings.topic_prefix) :]


def _fields(topics: Topics, message: Any) -> tuple[str, int, int, bytes | None, bytes | None]:
    return short_topic(topics, message), message.partition, message.offset, message.key, message.value


def decode_message(topics: Topics, message: Any) -> Decoded:
    """A Faust record through the shared decoder (`streams.core.decoders`): a model or a dead letter."""
    return decode_record(*_fields(topics, message), full_topic=message.topic)


def decode_messages(topics: Topics, message: Any) -> list[Decoded]:
    """`decode_message` for topics whose records may carry an array of events (`streams.core.decoders`)."""
    return decode_records(*_fields(topics, message), full_topic=message.topic)


def envelope_of(topics: Topics, message: Any) -> Envelope | DeadLetter | None:
    """A Faust record as a sequencer envelope (`streams.core.ingress`)."""
    return envelope_from_record(*_fields(topics, message), message.headers, full_topic=message.topic)


async def send(
    topics: Topics, short_topic: str, key: bytes | None, value: bytes, partition: int | None = None
) -> None:
    """Queue one record on the app's producer. Straight to the Kafka producer rather than through
    `Topic.send`, whose per-record bookkeeping cost more than placing the pod; Faust still flushes this
    producer before it commits offsets, so an output is never lost behind a committed input."""
    await topics.app.producer.send(topics.settings.topic(short_topic), key, value, partition, None, None)


async def send_envelopes(topics: Topics, envelopes: Sequence[Envelope]) -> dict[int, str]:
    """Each shard's envelopes of the batch, in order, in as few sequencer records as ``max_message_bytes``
    allows (one, at the usual sizes: Kafka and Faust cost per record, not per byte). Returns the envelopes
    that cannot travel at all (index → reason) for the caller to dead-letter: the producer raises on an
    oversized record, and an agent that raises stops consuming."""
    if not envelopes:
        return {}
    settings = topics.settings
    limit = settings.max_value_bytes
    per_shard: dict[int, list[int]] = {}
    for index, envelope in enumerate(envelopes):
        for shard in shards_for(envelope, settings.shards):
            per_shard.setdefault(shard, []).append(index)
    refused: dict[int, str] = {}
    for shard, indices in per_shard.items():
        records, unsent = pack_envelopes([envelopes[i] for i in indices], limit)
        refused.update((indices[i], reason) for i, reason in unsent.items())
        for record in records:
            await send(topics, "sequencer", f"shard-{shard}".encode(), record, shard)
    return refused


async def send_dead_letter(topics: Topics, letter: DeadLetter) -> None:
    topics.observe.dead_letters.labels(letter.topic).inc()
    await send(topics, "dead-letters", letter.topic.encode(), encode(letter))


def letter_for(message: Any, error: str, value: bytes | None = None) -> DeadLetter:
    """The dead letter of a Faust record, carrying `value` if given (what of the record failed), else the
    record's own value."""
    raw = message.value if value is None else value
    return dead_letter(message.topic, message.partition, message.offset, message.key, raw, error)


class TableBytes(MutableMapping[str, bytes]):
    """A Faust table seen as ``str → bytes``. The table itself stores raw bytes keys, which is what comes
    back from its changelog on recovery, so keys are encoded here, in one place."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def __getitem__(self, key: str) -> bytes:
        value = self.table.get(key.encode())
        if value is None:
            raise KeyError(key)
        return bytes(value)

    def __setitem__(self, key: str, value: bytes) -> None:
        self.table[key.encode()] = value

    def __delitem__(self, key: str) -> None:
        del self.table[key.encode()]

    def __iter__(self) -> Iterator[str]:
        return (bytes(key).decode() for key in self.table)

    def __len__(self) -> int:
        return len(self.table)


def bytes_table(app: faust.App, name: str, partitions: int) -> TableBytes:
    """A table of raw bytes with a changelog (and a standby replica when workers are several), its keys
    partitioned as `partition_of` has them."""
    return TableBytes(new_bytes_table(app, name, partitions, partition_of))
