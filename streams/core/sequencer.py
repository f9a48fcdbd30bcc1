"""The sequencer topic's envelopes: their model, their codec, and the order a shard applies them in.

Every input of a placement shard (`streams.core.shard.Shard`) reaches it as an envelope on the shard's
sequencer partition. The order envelopes apply in is fixed by event time, not by which Kafka partition
happened to be fetched first (`ReorderBuffer`):

- Outside a replay session, envelopes apply in arrival order (the sequencer partition's order).
- A replay session begins with the first watermark. The replayer sends, on every partition of every topic
  it publishes to, watermarks ``T`` meaning "everything with ts ≤ T on this partition is published"; the
  forwarders pass them on. Envelopes from those partitions are held and applied in ``(ts, seq)`` order,
  seq being the log line, once every session partition has passed their ts. How the topics interleave on
  the way in is then invisible to placement.
- A session ends when every session partition has passed ts inf (the replayer's end marker), or when no
  watermark of it has come for the timeout a tick carries (the replayer died without a word). The time
  compared is the tick's stamp against the stamp the forwarder put on the session's latest watermark, both
  records on the partition, so a rebuild ends the session at the same envelope the live shard did.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson
from pydantic import BaseModel

from schemas.codec import model_from_mapping, to_jsonable
from schemas.events import BindingResult
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent
from schemas.pod import PodBound, PodDeleted, PodRequest
from streams.core.metrics import NodeSummary, WorkloadSummary

__all__ = [
    "TIMEOUT_KEY",
    "Envelope",
    "Kind",
    "ReorderBuffer",
    "Watermark",
    "decode_envelope",
    "decode_envelopes",
    "encode_envelope",
    "encode_envelopes",
    "tick_envelope",
]


class Kind(StrEnum):
    NODE = "node"
    POD = "pod"
    DELETE = "delete"
    BOUND = "bound"
    """A pod bound to a node by someone else (`PodBound`): counted there, never placed."""
    SUMMARY = "summary"
    WORKLOAD = "workload"
    RESULT = "result"
    CONFIG = "config"
    WATERMARK = "watermark"
    TICK = "tick"


@dataclass(frozen=True, slots=True)
class Watermark:
    """Everything with ``ts <= self.ts`` on `source` has been published (``ts`` inf: the session ended)."""

    session: str
    ts: float
    partitions: dict[str, int]
    """The session's topics and their partition counts: all of them must pass a time before it is applied."""

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "ts": None if math.isinf(self.ts) else self.ts,
            "partitions": self.partitions,
        }

    @classmethod
    def from_json(cls, data: object) -> Watermark:
        if not isinstance(data, dict):
            raise InvalidInput("a watermark must be a JSON object", field="watermark")
        session, ts, partitions = data.get("session"), data.get("ts"), data.get("partitions")
        if not isinstance(session, str) or not session:
            raise InvalidInput("must be a non-empty string", field="watermark.session")
        if ts is not None and (not isinstance(ts, int | float) or isinstance(ts, bool) or math.isnan(ts)):
            raise InvalidInput("must be a number or null (end of session)", field="watermark.ts")
        if not isinstance(partitions, dict) or not partitions:
            raise InvalidInput("must map topic names to partition counts", field="watermark.partitions")
        for topic, count in partitions.items():
            if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 100_000:
                raise InvalidInput("must be a partition count ≥ 1", field=f"watermark.partitions.{topic}")
        return cls(session, math.inf if ts is None else float(ts), dict(partitions))


@dataclass(frozen=True, slots=True)
class Envelope:
    """One input of a shard, in the shape the sequencer topic carries."""

    kind: Kind
    ts: float
    value: Any = None
    source: str = ""
    """``topic/partition`` it was forwarded from (watermarks are per source)."""
    seq: float = math.inf
    """Line of the replayed log it came from; inf for live input (after replayed input of equal ts)."""
    offset: int = -1
    """Offset of the input record in `source` (-1: not forwarded from a record). A forwarder that restarts
    resends what it forwarded after its last commit; the shard drops what it already applied by these."""


def _config_value(data: object) -> dict[str, Any]:
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise InvalidInput("must be {name, document}", field="value")
    document = data.get("document")
    if document is not None and not isinstance(document, dict):
        raise InvalidInput("must be a profile document or null", field="value.document")
    return data


TIMEOUT_KEY = "replay_session_timeout_s"
"""In a tick's value: how long a replay session may go without a watermark before the tick ends it. The tick
carries it, rather than the shard reading a setting, so a rebuild by a worker configured otherwise still
ends the session where the live shard did."""


def _tick_value(data: object) -> dict[str, float] | None:
    if data is None:
        return None
    timeout = data.get(TIMEOUT_KEY) if isinstance(data, dict) and len(data) == 1 else None
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout < math.inf:
        raise InvalidInput(f"must be null or {{{TIMEOUT_KEY!r}: seconds > 0}}", field="value")
    return {TIMEOUT_KEY: float(timeout)}


def tick_envelope(ts: float, session_timeout: float | None = None) -> Envelope:
    """A clock tick stamped `ts`; with `session_timeout`, it also ends a replay session whose latest
    watermark is at least that much older than `ts`."""
    value = None if session_timeout is None else {TIMEOUT_KEY: float(session_timeout)}
    return Envelope(Kind.TICK, ts, value, "tick")


_VALUE_READERS: dict[Kind, Any] = {
    Kind.NODE: lambda data: model_from_mapping(NodeEvent, data, prefix="value"),
    Kind.POD: lambda data: model_from_mapping(PodRequest, data, prefix="value"),
    Kind.DELETE: lambda data: model_from_mapping(PodDeleted, data, prefix="value"),
    Kind.BOUND: lambda data: model_from_mapping(PodBound, data, prefix="value"),
    Kind.RESULT: lambda data: model_from_mapping(BindingResult, data, prefix="value"),
    Kind.SUMMARY: NodeSummary.from_json,
    Kind.WORKLOAD: WorkloadSummary.from_json,
    Kind.WATERMARK: Watermark.from_json,
    Kind.CONFIG: _config_value,
    Kind.TICK: _tick_value,
}


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return to_jsonable(value)
    if hasattr(value, "to_json"):
        return value.to_json()
    return value


def _envelope_json(envelope: Envelope) -> dict[str, Any]:
    return {
        "k": envelope.kind.value,
        "ts": envelope.ts,
        "seq": None if math.isinf(envelope.seq) else envelope.seq,
        "src": envelope.source,
        "v": _jsonable(envelope.value),
        **({"o": envelope.offset} if envelope.offset >= 0 else {}),
    }


def encode_envelope(envelope: Envelope) -> bytes:
    return orjson.dumps(_envelope_json(envelope))


def encode_envelopes(envelopes: Sequence[Envelope]) -> bytes:
    """Several envelopes as one sequencer record (a JSON array), applied in order. Forwarders send one
    record per batch and shard: Kafka and Faust cost per record, not per byte, at these sizes."""
    return orjson.dumps([_envelope_json(envelope) for envelope in envelopes])


def decode_envelopes(raw: bytes) -> list[Envelope | InvalidInput]:
    """A sequencer record: one envelope or an array of them. An element that does not decode comes back as
    its `InvalidInput` (dead-lettered on its own, the others still apply); a record that is not JSON, or
    neither an object nor an array, raises."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"not JSON: {exc}") from None
    if isinstance(data, dict):
        return [_envelope_from_json(data)]
    if not isinstance(data, list):
        raise InvalidInput("a sequencer record must be an envelope object or an array of them")
    decoded: list[Envelope | InvalidInput] = []
    for i, item in enumerate(data):
        try:
            decoded.append(_envelope_from_json(item))
        except InvalidInput as exc:
            decoded.append(InvalidInput(f"[{i}]: {exc}"))
    return decoded


def decode_envelope(raw: bytes) -> Envelope:
    """Raises `InvalidInput` naming the field; the agent turns that into a dead letter."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"not JSON: {exc}") from None
    return _envelope_from_json(data)


def _envelope_from_json(data: object) -> Envelope:
    if not isinstance(data, dict):
        raise InvalidInput("an envelope must be a JSON object")
    try:
        kind = Kind(str(data.get("k")))
    except ValueError:
        raise InvalidInput(f"unknown kind {data.get('k')!r}", field="k") from None
    ts, seq = data.get("ts"), data.get("seq")
    if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts):
        raise InvalidInput("must be a finite number", field="ts")
    if seq is not None and (not isinstance(seq, int | float) or isinstance(seq, bool)):
        raise InvalidInput("must be a number or null", field="seq")
    source = data.get("src", "")
    if not isinstance(source, str):
        raise InvalidInput("must be a string", field="src")
    offset = data.get("o", -1)
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < -1:
        raise InvalidInput("must be a record offset ≥ 0", field="o")
    value = _VALUE_READERS[kind](data.get("v"))
    return Envelope(kind, float(ts), value, source, math.inf if seq is None else float(seq), offset)


_EXPIRED_KEPT = 64
"""How many sessions ended by a timeout a shard remembers: enough for the stragglers of the latest ones."""


@dataclass(slots=True)
class ReorderBuffer:
    """Holds a replay session's envelopes until every session partition has passed their event time."""

    session: str | None = None
    expected: set[str] = field(default_factory=set)
    marks: dict[str, float] = field(default_factory=dict)
    last_mark_at: float = -math.inf
    """The envelope time of the session's latest watermark: when a forwarder passed it on, by its clock."""
    _held: list[tuple[float, float, int, Envelope]] = field(default_factory=list)
    _arrivals: int = 0
    _expired: dict[str, None] = field(default_factory=dict)
    """The latest sessions ended by a timeout (oldest first). Watermarks of theirs still on the way are
    ignored: a replayer's last records must not open its session again, for nobody would end it but another
    timeout. (After an end marker, none come: it is the last record on every partition.)"""

    def push(self, envelope: Envelope) -> list[Envelope]:
        """Envelopes ready to apply, in the order to apply them."""
        if envelope.kind is Kind.WATERMARK:
            self._mark(envelope.source, envelope.value, envelope.ts)
            return self._release()
        if self.session is None or envelope.source not in self.expected:
            return [envelope]  # live input, or a source the replay does not drive (results, config, ticks)
        self._arrivals += 1
        heapq.heappush(self._held, (envelope.ts, envelope.seq, self._arrivals, envelope))
        return self._release()

    def expire(self, now: float, timeout: float) -> list[Envelope]:
        """End the session as its end marker would, if its latest watermark is `timeout` or more older than
        `now` (a tick's stamp): what it held, in order. Nothing otherwise."""
        if self.session is None or now - self.last_mark_at < timeout:
            return []
        self._expired[self.session] = None
        if len(self._expired) > _EXPIRED_KEPT:
            del self._expired[next(iter(self._expired))]
        self.marks = dict.fromkeys(self.expected, math.inf)
        return self._release()

    def _mark(self, source: str, mark: Watermark, at: float) -> None:
        if mark.session in self._expired:
            return
        if mark.session != self.session:
            if self.session is not None and math.isinf(mark.ts):
                return  # the end of an older session, already superseded
            self.session = mark.session
            self.expected = {f"{t}/{p}" for t, n in mark.partitions.items() for p in range(n)}
            self.marks = {}
            self.last_mark_at = at
        if source in self.expected:
            self.marks[source] = max(self.marks.get(source, -math.inf), mark.ts)
            self.last_mark_at = max(self.last_mark_at, at)

    @property
    def watermark(self) -> float:
        if self.session is None:
            return math.inf
        return min((self.marks.get(source, -math.inf) for source in self.expected), default=math.inf)

    def _release(self) -> list[Envelope]:
        limit = self.watermark
        ready = []
        while self._held and self._held[0][0] <= limit:
            ready.append(heapq.heappop(self._held)[3])
        if math.isinf(limit) and limit > 0:
            self.session, self.expected, self.marks, self.last_mark_at = None, set(), {}, -math.inf
        return ready

    @property
    def held(self) -> int:
        return len(self._held)
