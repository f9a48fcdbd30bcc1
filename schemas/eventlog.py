"""Recorded event logs (SPEC 1.4): JSON Lines ``{"ts", "topic", "key", "value"}``, ordered by ``ts``.

Reading streams line by line (constant memory, gzip when the name ends in ``.gz``, ``-`` for stdin) and
validates every value with the topic's model, so a bad line is reported with its number before anything
downstream sees it.
"""

from __future__ import annotations

import contextlib
import gzip
import math
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, cast

import orjson
from pydantic import BaseModel

from schemas.codec import TOPIC_MODELS, decode_json, to_jsonable
from schemas.exceptions import EventLogError, InvalidInput

__all__ = ["EventLogWriter", "LogEvent", "open_text", "read_events", "replacing_text"]


@dataclass(frozen=True, slots=True)
class LogEvent:
    ts: float
    topic: str
    key: str | None
    value: Any  # the topic's model (PodRequest, MetricSample, ...) or a profile document for "config"
    line: int = 0


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
    ts, topic, key = record["ts"], record["topic"], record.get("key")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts) or ts < 0:
        raise EventLogError(f"ts must be a non-negative number, got {ts!r}", line=number, field="ts")
    if topic not in TOPIC_MODELS:
        raise EventLogError(
            f"unknown topic {topic!r} (expected one of {', '.join(TOPIC_MODELS)})", line=number, field="topic"
        )
    if key is not None and not isinstance(key, str):
        raise EventLogError("key must be a string or null", line=number, field="key")
    try:
        value = TOPIC_MODELS[topic](record["value"], prefix="value")
    except InvalidInput as exc:
        raise EventLogError(str(exc).removeprefix(f"{exc.field}: "), line=number, field=exc.field) from None
    return LogEvent(float(ts), topic, key, value, number)


def read_events(
    path: str | Path, *, strict_order: bool = True, field: str | None = None
) -> Iterator[LogEvent]:
    """Yield events one at a time. Blank lines are skipped; a ``ts`` going backwards is an error when
    `strict_order` (replay relies on the order). `field` names the path's option in an error."""
    stream = open_text(path, field=field)
    last_ts = -math.inf
    number = 0
    try:
        for number, text in enumerate(stream, start=1):
            if not text.strip():
                continue
            event = _parse_line(text, number)
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


class EventLogWriter:
    """Appends events as JSON Lines; use as a context manager."""

    def __init__(self, path: str | Path, *, field: str | None = None) -> None:
        self._stream = open_text(path, "w", field=field)
        self.count = 0

    def write(self, ts: float, topic: str, key: str | None, value: BaseModel | dict[str, Any]) -> None:
        payload = to_jsonable(value) if isinstance(value, BaseModel) else value
        line = orjson.dumps({"ts": ts, "topic": topic, "key": key, "value": payload})
        self._stream.write(line.decode())
        self._stream.write("\n")
        self.count += 1

    def close(self) -> None:
        if self._stream is sys.stdout:
            self._stream.flush()
        else:
            self._stream.close()

    def __enter__(self) -> EventLogWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
