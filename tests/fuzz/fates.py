"""What happened to each hostile record, and whether that is the fate the corpus expects.

`run_in_process` feeds a corpus through the same pure cores the agents call, the way each agent calls them
(forwarders: `envelope_from_record`; metrics: `decode_records`, `future_error`, `MetricsCore`; applier:
`decode_record`, `Ledger`; placement: `decode_envelopes`, `Shard`), and records what came out. The Kafka test
collects the same `Outcome` from the live topics. `problems` compares an outcome with the corpus.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from schemas.events import Binding, BindingResult, DeadLetter, MetricSample
from schemas.exceptions import InvalidInput
from schemas.pod import PodDeleted
from streams.core.decoders import decode_record, decode_records
from streams.core.ingress import envelope_from_model, envelope_from_record, future_error, pack_envelopes
from streams.core.ledger import Ledger
from streams.core.metrics import MetricsCore, NodeSummary
from streams.core.sequencer import Envelope, Kind, decode_envelopes
from streams.core.shard import Output, Refused, Release, Shard
from tests.fuzz.corpus import TOPICS, Fate, Hostile

__all__ = ["Outcome", "Where", "problems", "refused_node", "run_in_process"]

Where = tuple[str, int, int]
"""(short topic, partition, offset) of a record."""


@dataclass
class Outcome:
    letters: dict[Where, list[DeadLetter]] = field(default_factory=lambda: defaultdict(list))
    """Dead letters that cite a record."""
    refusals: Counter[str] = field(default_factory=Counter)
    """Placement's dead letters for envelopes it could not apply (they cite no offset), by node."""
    results: Counter[str] = field(default_factory=Counter)
    """The applier's results, by uid."""
    verdicts: Counter[str] = field(default_factory=Counter)
    """Placement's unschedulable verdicts, by uid."""
    strays: list[DeadLetter] = field(default_factory=list)
    """Dead letters that cite nothing this outcome can place."""


def refused_node(letter: DeadLetter) -> str | None:
    """The node named in placement's dead letter for an envelope it refused (its raw is the envelope)."""
    try:
        envelope = orjson.loads(letter.raw)
        name = envelope["v"]["node"]["name"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    return name if isinstance(name, str) else None


def problems(
    sent: Mapping[Where, Hostile], outcome: Outcome, never_sent: Iterable[Hostile] = ()
) -> list[str]:
    """Every way `outcome` differs from the fates of the `sent` records (empty when all is as documented)."""
    found: list[str] = []
    refusals: Counter[str] = Counter()
    results: Counter[str] = Counter()
    for where, record in sent.items():
        letters = outcome.letters.get(where, [])
        expected = record.letters if record.fate is Fate.DEAD_LETTER else 0
        if len(letters) != expected:
            errors = [letter.error[:120] for letter in letters]
            found.append(f"{where} {record.klass}: {len(letters)} dead letters, expected {expected} {errors}")
        for letter in letters:
            if "\n" in letter.error:
                found.append(
                    f"{where} {record.klass}: a dead letter of several lines: {letter.error[:200]!r}"
                )
            if record.names is not None and record.names not in letter.error:
                found.append(f"{where} {record.klass}: {letter.error[:200]!r} does not name {record.names!r}")
        if record.fate is Fate.REFUSED and record.node is not None:
            refusals[record.node] += 1
        if record.result_uid is not None:
            results[record.result_uid] += 1
        if record.verdict_uid is not None and outcome.verdicts[record.verdict_uid] < 1:
            found.append(f"{where} {record.klass}: no unschedulable verdict for {record.verdict_uid}")
        if record.fate is Fate.NEVER_SENT:
            found.append(f"{where} {record.klass}: reached the topic")
    for node, count in refusals.items():
        if outcome.refusals[node] != count:
            found.append(f"refusals of {node}: {outcome.refusals[node]}, expected {count}")
    unexpected = set(outcome.refusals) - set(refusals)
    if unexpected:
        found.append(f"refusals nobody expected: {sorted(unexpected)[:5]}")
    for uid, count in results.items():
        if outcome.results[uid] != count:
            found.append(f"results for {uid}: {outcome.results[uid]}, expected {count}")
    if outcome.strays:
        found.append(f"{len(outcome.strays)} stray dead letters, e.g. {outcome.strays[0].error[:200]!r}")
    strays = set(outcome.letters) - set(sent)
    if strays:
        found.append(f"dead letters citing records nobody sent: {sorted(strays)[:5]}")
    found += [
        f"{record.topic} {record.klass}: was sent"
        for record in never_sent
        if record.fate is not Fate.NEVER_SENT
    ]
    return found


# ---------------------------------------------------------------------------------------- in process


class _Pipeline:
    """The agents' logic around the cores, without Kafka: one worker and one applier."""

    def __init__(self, now: float, limit: int) -> None:
        self.now = now
        self.limit = limit
        self.shard = Shard()
        self.ledger = Ledger({}, {})
        self.core = MetricsCore()
        self.outcome = Outcome()

    def letter(self, topic: str, partition: int, offset: int | None, letter: DeadLetter) -> None:
        if offset is None:
            self.outcome.strays.append(letter)
        else:
            self.outcome.letters[(topic, partition, offset)].append(letter)

    def place(self, envelopes: Sequence[Envelope], topic: str, partition: int, offset: int) -> None:
        _, refused = pack_envelopes(envelopes, self.limit - 1024)
        for index in refused:
            self.letter(topic, partition, offset, DeadLetter(topic=topic, raw="", error=refused[index]))
        for index, envelope in enumerate(envelopes):
            if index not in refused:
                self.publish(self.shard.feed(envelope))

    def publish(self, outputs: list[Output]) -> None:
        for output in outputs:
            if isinstance(output, Binding):
                self.apply(output)
            elif isinstance(output, BindingResult):
                self.outcome.verdicts[output.uid] += 1
            elif isinstance(output, Release):
                self.ledger.delete(output.deleted.uid, self.now)
            elif isinstance(output, Refused):
                name = getattr(getattr(output.envelope.value, "node", None), "name", None)
                if name is None:
                    self.outcome.strays.append(DeadLetter(topic="sequencer", raw="", error=output.reason))
                else:
                    self.outcome.refusals[name] += 1

    def apply(self, binding: Binding) -> None:
        result = self.ledger.apply(binding, self.now)
        self.outcome.results[binding.uid] += 1
        envelope = envelope_from_model(result, result.at, "bindings/0")
        if envelope is not None:
            self.publish(self.shard.feed(envelope))

    def feed(self, record: Hostile, partition: int, offset: int) -> None:
        topic, key, value = record.topic, record.key, record.value
        if topic in ("pod-requests", "node-events", "config"):
            result = envelope_from_record(topic, partition, offset, key, value, now=self.now)
            if isinstance(result, DeadLetter):
                self.letter(topic, partition, offset, result)
            elif result is not None:
                self.place([result], topic, partition, offset)
            if topic == "node-events":  # the applier reads node events too (and dead-letters nothing)
                decoded = decode_record(topic, partition, offset, key, value)
                if decoded.value is not None:
                    self.ledger.apply_node_event(decoded.value, self.now)
        elif topic == "metrics":
            samples: list[MetricSample] = []
            for decoded in decode_records(topic, partition, offset, key, value):
                if decoded.dead_letter is not None:
                    self.letter(topic, partition, offset, decoded.dead_letter)
                    continue
                late = future_error(decoded.value.ts, self.now)
                if late is not None:
                    self.letter(topic, partition, offset, DeadLetter(topic=topic, raw="", error=late))
                    continue
                samples.append(decoded.value)
            summaries = [
                Envelope(Kind.SUMMARY if isinstance(s, NodeSummary) else Kind.WORKLOAD, s.ts, s, "metrics/0")
                for s in self.core.ingest(samples)
            ]
            self.place(summaries, topic, partition, offset)
        elif topic == "bindings":
            decoded = decode_record(topic, partition, offset, key, value)
            if decoded.dead_letter is not None:
                self.letter(topic, partition, offset, decoded.dead_letter)
            elif isinstance(decoded.value, PodDeleted):
                self.ledger.delete(decoded.value.uid, self.now)
            else:
                self.apply(decoded.value)
        else:
            try:
                envelopes = decode_envelopes(value)  # type: ignore[arg-type]  # a tombstone is hostile too
            except InvalidInput as exc:
                self.letter(topic, partition, offset, DeadLetter(topic=topic, raw="", error=str(exc)))
                return
            for item in envelopes:
                if isinstance(item, InvalidInput):
                    self.letter(topic, partition, offset, DeadLetter(topic=topic, raw="", error=str(item)))
                else:
                    self.publish(self.shard.feed(item))


def run_in_process(
    records: Mapping[str, Sequence[Hostile]], *, now: float, limit: int
) -> tuple[dict[Where, Hostile], list[Hostile], Outcome, _Pipeline]:
    """Feed every topic's records round robin (as concurrent agents would see them), each topic in order on
    partition 0, offsets from 0. Records that would never reach a topic are set aside, not fed."""
    pipeline = _Pipeline(now, limit)
    sent: dict[Where, Hostile] = {}
    never: list[Hostile] = []
    offsets = dict.fromkeys(TOPICS, 0)
    longest = max((len(items) for items in records.values()), default=0)
    for index in range(longest):
        for topic in TOPICS:
            items = records.get(topic, ())
            if index >= len(items):
                continue
            record = items[index]
            if record.fate is Fate.NEVER_SENT:
                never.append(record)
                continue
            where = (topic, 0, offsets[topic])
            offsets[topic] += 1
            sent[where] = record
            pipeline.feed(record, 0, where[2])
    return sent, never, pipeline.outcome, pipeline
