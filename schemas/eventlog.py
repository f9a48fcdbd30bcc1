"""Recorded event logs: JSON Lines ``{"ts", "topic", "key", "value"}``, ordered by ``ts``.

Reading streams line by line (constant memory, gzip when the name ends in ``.gz``, ``-`` for stdin) and
validates every value with the topic's model, so a bad line is reported with its number before anything
downstream sees it.

Placement records (what ``eyrie record`` takes from the sequencer) are lines with one more field,
``"shard"``: the sequencer partition (cluster shard) that applied them. They come in the order that shard
applied them, and ``ts`` is the time it applied them at, so ``ts`` need not grow from line to line (the
shards' clocks are their own, and a shard's clock goes back when a live replay session starts on an older
log's clock). Inputs keep their topics (``pod-requests``, ``node-events``, ``config``, whose value is null
for a deleted profile); what only placement sees has its own: ``placement.summary`` and
``placement.workload`` (the metrics agent's summaries), ``placement.result`` (the applier's results) and
``placement.tick`` (the worker's clock ticks, value null). Readers that do not ask for them
(``read_events(placement=False)``, e.g. a live replay, which can publish only inputs) skip those lines.
"""

from __future__ import annotations

import contextlib
import gzip
import math
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, cast

import orjson
from pydantic import BaseModel

from schemas.codec import TOPIC_MODELS, decode_json, to_jsonable
from schemas.exceptions import EventLogError, InvalidInput

__all__ = [
    "PLACEMENT_TOPICS",
    "EventLogWriter",
    "LogEvent",
    "open_text",
    "placement_only",
    "read_events",
    "replacing_text",
]


@dataclass(frozen=True, slots=True)
class LogEvent:
    ts: float
    topic: str
    key: str | None
    value: Any  # the topic's model (PodRequest, MetricSample, ...) or a profile document for "config"
    line: int = 0
    shard: int | None = None
    """The sequencer partition that applied it, on a placement record; None on a topic record."""


def _json_object(data: object, *, prefix: str | None = None) -> dict[str, Any]:
    # Summaries are the metrics core's (streams), which this layer does not import: the replay that feeds
    # them checks the rest, and names the line too.
    if not isinstance(data, dict):
        raise InvalidInput(f"expected a JSON object, got {type(data).__name__}", field=prefix)
    return data


def _null(data: object, *, prefix: str | None = None) -> None:
    if data is not None:
        raise InvalidInput("must be null", field=prefix)


PLACEMENT_TOPICS: dict[str, Callable[..., Any]] = {
    "placement.summary": _json_object,
    "placement.workload": _json_object,
    "placement.result": TOPIC_MODELS["binding-results"],
    "placement.tick": _null,
}
"""The lines of placement records that are not inputs of a topic, and how their values are checked."""


def open_text(path: str | Path, mode: str = "r", *, field: str | None = None) -> IO[str]:
    """`path` as text (gzip by its name, ``-`` for stdin or stdout). A path that cannot be opened is an
    `InvalidInput` naming it (and `field`, the option or argument it came from), not an `OSError`."""
    if str(path) == "-":
        return sys.stdin if "r" in mode else sys.stdout
    try:
        if str(path).endswith(".gz"):
            return cast(IO[str], gzip.open(path, mode.replace("t", "") + "t", encoding="utf-8"))
        return open(path, mode, encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"{path}: {_reason(exc, Path(path), reading='r' in mode)}", field=field) from None


@contextlib.contextmanager
def replacing_text(path: str | Path, *, field: str | None = None) -> Iterator[IO[str]]:
    """`path` for writing (`open_text`'s rules), where the file appears, or replaces an older one, only when
    the block ends without an error: it is written beside it under a hidden name first. So a failed run
    leaves no empty or half-written output, and an earlier output stays. A path that cannot be written is
    an `InvalidInput` at once, before the block runs."""
    if str(path) == "-":
        yield sys.stdout
        return
    target = Path(path)
    if target.is_dir():
        raise InvalidInput(f"{path}: is a directory", field=field)
    # Same directory (os.replace stays within one file system), same suffix (gzip is chosen by the name).
    partial = target.with_name(f".{os.getpid()}.partial.{target.name}")
    try:
        stream = open_text(partial, "w")
    except InvalidInput as exc:
        raise InvalidInput(str(exc).replace(str(partial), str(path), 1), field=field) from None
    try:
        with stream:
            yield stream
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _reason(exc: OSError, path: Path, *, reading: bool) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file" if reading else f"no such directory: {path.parent}"
    if isinstance(exc, IsADirectoryError):
        return "is a directory"
    return f"cannot {'read' if reading else 'write'}: {exc.strerror or exc}"


def _parse_line(text: str, number: int) -> LogEvent:
    try:
        record = decode_json(text)
    except InvalidInput as exc:
        raise EventLogError(str(exc), line=number) from None
    if not isinstance(record, dict):
        raise EventLogError("expected a JSON object", line=number)
    missing = [name for name in ("ts", "topic", "value") if name not in record]
    if missing:
        raise EventLogError("field required", line=number, field=missing[0])
    ts, topic, key, shard = record["ts"], record["topic"], record.get("key"), record.get("shard")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts) or ts < 0:
        raise EventLogError(f"ts must be a non-negative number, got {ts!r}", line=number, field="ts")
    if shard is not None and (isinstance(shard, bool) or not isinstance(shard, int) or shard < 0):
        raise EventLogError(
            f"shard must be a partition number ≥ 0, got {shard!r}", line=number, field="shard"
        )
    parsers = TOPIC_MODELS if shard is None else {**TOPIC_MODELS, **PLACEMENT_TOPICS}
    if topic not in parsers:
        expected = ", ".join(TOPIC_MODELS)
        if topic in PLACEMENT_TOPICS:
            error = f"topic {topic!r} is only for placement records (lines with a shard)"
        else:
            error = f"unknown topic {topic!r} (expected one of {expected}, or placement topics with a shard)"
        raise EventLogError(error, line=number, field="topic")
    if key is not None and not isinstance(key, str):
        raise EventLogError("key must be a string or null", line=number, field="key")
    if topic == "config" and shard is not None and record["value"] is None:
        return LogEvent(float(ts), topic, key, None, number, shard)  # a deleted profile, as placement saw it
    try:
        value = parsers[topic](record["value"], prefix="value")
    except InvalidInput as exc:
        raise EventLogError(str(exc).removeprefix(f"{exc.field}: "), line=number, field=exc.field) from None
    return LogEvent(float(ts), topic, key, value, number, shard)


def placement_only(event: LogEvent) -> bool:
    """Whether only placement can use the line: a summary, result or tick, or a deleted profile (which is
    not a document anyone could publish)."""
    return event.topic in PLACEMENT_TOPICS or (event.topic == "config" and event.value is None)


def read_events(
    path: str | Path, *, strict_order: bool = True, field: str | None = None, placement: bool = False
) -> Iterator[LogEvent]:
    """Yield events one at a time. Blank lines are skipped; a ``ts`` going backwards is an error when
    `strict_order` (replay relies on the order), except on placement records, which are in the order
    placement applied them. `placement`: also yield the lines only placement can use (`placement_only`);
    without it they are checked and left out. `field` names the path's option in an error."""
    stream = open_text(path, field=field)
    last_ts = -math.inf
    number = 0
    try:
        for number, text in enumerate(stream, start=1):
            if not text.strip():
                continue
            event = _parse_line(text, number)
            if event.shard is not None:
                if placement or not placement_only(event):
                    yield event
                continue
            if strict_order and event.ts < last_ts:
                raise EventLogError(f"ts {event.ts} goes back from {last_ts}", line=number, field="ts")
            last_ts = max(last_ts, event.ts)
            yield event
    # Text is decoded (and a .gz inflated) a block at a time, ahead of the lines parsed: the place is "after
    # the last good line", not a line number.
    except UnicodeDecodeError:
        raise InvalidInput(f"{path}: not UTF-8 text{_after(number)}", field=field) from None
    except (OSError, EOFError) as exc:  # a corrupt or truncated .gz
        raise InvalidInput(f"{path}: cannot read{_after(number)}: {exc}", field=field) from None
    finally:
        if stream is not sys.stdin:
            stream.close()


def _after(line: int) -> str:
    return f" after line {line}" if line else ""


_WRITE_BYTES = 64 * 1024
"""Lines a writer collects before it hands them to the file (whole lines only; `flush` hands them sooner)."""


def _open_binary(path: str | Path, field: str | None) -> IO[bytes]:
    if str(path) == "-":
        sys.stdout.flush()  # whatever was printed as text goes first
        return sys.stdout.buffer
    try:
        if str(path).endswith(".gz"):
            return cast(IO[bytes], gzip.open(path, "wb"))
        # Unbuffered: every write is one system call of whole lines, so the file never ends inside a line.
        return open(path, "wb", buffering=0)
    except OSError as exc:
        raise InvalidInput(f"{path}: {_reason(exc, Path(path), reading=False)}", field=field) from None


class EventLogWriter:
    """Appends events as JSON Lines; use as a context manager.

    Lines reach the file whole, when `_WRITE_BYTES` of them are waiting and at every `flush`, so a reader
    of a growing log, or one left by a killed process, sees complete lines up to the last flush (a .gz
    up to its last flush, after which its last line may be cut; `close` finishes the gzip stream)."""

    def __init__(self, path: str | Path, *, field: str | None = None) -> None:
        self._stream = _open_binary(path, field)
        self._waiting: list[bytes] = []
        self._waiting_bytes = 0
        self.count = 0

    def write(
        self,
        ts: float,
        topic: str,
        key: str | None,
        value: BaseModel | dict[str, Any] | None,
        *,
        shard: int | None = None,
    ) -> None:
        """One line; `shard` makes it a placement record (see the module's docstring)."""
        payload = to_jsonable(value) if isinstance(value, BaseModel) else value
        record = {"ts": ts, "topic": topic, "key": key, "value": payload}
        if shard is not None:
            record["shard"] = shard
        line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
        self._waiting.append(line)
        self._waiting_bytes += len(line)
        self.count += 1
        if self._waiting_bytes >= _WRITE_BYTES:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._waiting:
            self._stream.write(b"".join(self._waiting))
            self._waiting, self._waiting_bytes = [], 0

    def flush(self) -> None:
        """Every line written so far into the file (a gzip stream is sync-flushed: readable up to here)."""
        self._hand_over()
        self._stream.flush()

    def close(self) -> None:
        try:
            self._hand_over()
        finally:
            if self._stream is getattr(sys.stdout, "buffer", None):
                self._stream.flush()
            else:
                self._stream.close()

    def __enter__(self) -> EventLogWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
