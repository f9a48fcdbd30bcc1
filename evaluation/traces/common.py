"""Shared machinery of the trace converters: bad-row bookkeeping, progress, line reading with byte offsets,
time ordering of unsorted CSV files, and writing the event log.

Every converter is a generator of `TraceEvent` tuples ``(ts, topic, key, model)`` in non-decreasing ``ts``;
`write_log` turns one into a recorded event log (docs/event-log.md). Generators keep memory constant: they
hold one row per open input file, plus whatever small index a converter documents.
"""

from __future__ import annotations

import heapq
import math
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from schemas.eventlog import EventLogWriter
from schemas.exceptions import InvalidInput

__all__ = [
    "BAD_ROWS_KEPT",
    "MAX_MERGE_RUNS",
    "MAX_TIMESTAMP",
    "BadRow",
    "ConversionSummary",
    "ProgressFn",
    "Report",
    "RowError",
    "RunScan",
    "TraceEvent",
    "csv_rows",
    "iter_lines",
    "non_negative",
    "ordered_rows",
    "require_file",
    "scan_runs",
    "split_csv",
    "timestamp",
    "write_log",
]

MAX_TIMESTAMP = 4_102_444_800.0
"""2100-01-01 in Unix seconds. A later time is a unit mistake (milliseconds, microseconds), not a time."""

BAD_ROWS_KEPT = 100
"""Bad rows kept with their reason; the rest are only counted, so a broken file cannot exhaust memory."""

MAX_MERGE_RUNS = 64
"""Above this many sorted runs, ordering sorts (time, offset) pairs instead of merging one reader per run:
each run holds an open file, and a file shuffled row by row would have as many runs as rows."""

_PROGRESS_EVERY = 1 << 20  # bytes between two progress callbacks: a Rich refresh per row would dominate

TraceEvent = tuple[float, str, str, BaseModel]
"""``(ts seconds, short topic name, key, model)``, ready for `EventLogWriter.write`."""

ProgressFn = Callable[[str, int, int], None]
"""``(phase, bytes done, bytes total)``; a converter may go through several phases (scan, convert)."""


class RowError(ValueError):
    """One input row that cannot be converted; the message is the reason reported with its line."""


@dataclass(frozen=True, slots=True)
class BadRow:
    file: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


class Report:
    """What a conversion noticed: bad rows (the first `keep` kept, all counted), notes (counted oddities
    that are not errors, e.g. a deletion time not after the creation time) and progress over input bytes."""

    def __init__(self, progress: ProgressFn | None = None, *, keep: int = BAD_ROWS_KEPT) -> None:
        self._progress = progress
        self._keep = keep
        self.bad_rows: list[BadRow] = []
        self.bad_row_count = 0
        self.notes: Counter[str] = Counter()
        self.rows = 0
        self._phase = ""
        self._done = 0
        self._total = 0
        self._reported = 0

    def bad(self, file: str | Path, line: int, reason: str) -> None:
        self.bad_row_count += 1
        if len(self.bad_rows) < self._keep:
            self.bad_rows.append(BadRow(Path(file).name, line, reason))

    def note(self, what: str, count: int = 1) -> None:
        self.notes[what] += count

    def phase(self, name: str, total: int) -> None:
        self._phase, self._done, self._total, self._reported = name, 0, total, 0
        if self._progress is not None:
            self._progress(name, 0, total)

    def advance(self, nbytes: int) -> None:
        self._done += nbytes
        if self._progress is not None and self._done - self._reported >= _PROGRESS_EVERY:
            self._reported = self._done
            self._progress(self._phase, self._done, self._total)

    def finish_phase(self) -> None:
        if self._progress is not None:
            self._progress(self._phase, self._total, self._total)


@dataclass(frozen=True, slots=True)
class ConversionSummary:
    """The outcome of one conversion. `rows` counts input data rows read while converting (not scanning)."""

    kind: str
    source: str
    out: str
    events: dict[str, int]
    rows: int
    bad_rows: tuple[BadRow, ...]
    bad_row_count: int
    notes: dict[str, int] = field(default_factory=dict)
    truncated: bool = False
    elapsed_s: float = 0.0

    @property
    def total_events(self) -> int:
        return sum(self.events.values())

    def one_line(self) -> str:
        per_topic = ", ".join(f"{topic} {count}" for topic, count in sorted(self.events.items())) or "none"
        line = (
            f"{self.kind}: {self.total_events} events ({per_topic}) from {self.rows} rows in "
            f"{self.elapsed_s:.1f} s → {self.out}; {self.bad_row_count} bad rows"
        )
        if self.notes:
            line += "; " + ", ".join(f"{what}: {count}" for what, count in sorted(self.notes.items()))
        if self.truncated:
            line += " (stopped at --limit)"
        return line


def require_file(path: Path, what: str, *, field: str = "src") -> Path:
    if not path.is_file():
        raise InvalidInput(f"{what} not found: {path}", field=field)
    return path


def write_log(
    events: Iterable[TraceEvent],
    out: str | Path,
    report: Report,
    *,
    kind: str,
    source: str | Path,
    limit: int | None = None,
) -> ConversionSummary:
    """Write `events` to `out` (``-`` for stdout, ``.gz`` compressed), stopping after `limit` events."""
    if limit is not None and limit < 0:
        raise InvalidInput(f"must be at least 0, got {limit}", field="limit")
    started = time.perf_counter()
    counts: Counter[str] = Counter()
    truncated = False
    iterator = iter(events)
    try:
        with EventLogWriter(out, field="out") as writer:
            for ts, topic, key, value in iterator:
                if limit is not None and writer.count >= limit:
                    truncated = True
                    break
                writer.write(ts, topic, key, value)
                counts[topic] += 1
    except OSError as exc:
        # Input and output errors both land here; the file name in the error tells which side failed.
        where = exc.filename if exc.filename is not None else out
        side = "out" if str(where) == str(out) else "src"
        raise InvalidInput(f"{where}: {exc.strerror or exc}", field=side) from None
    finally:
        # Closing the generator now closes the input files it holds open, rather than at garbage collection.
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
    if not truncated:
        report.finish_phase()
    return ConversionSummary(
        kind=kind,
        source=str(source),
        out=str(out),
        events=dict(counts),
        rows=report.rows,
        bad_rows=tuple(report.bad_rows),
        bad_row_count=report.bad_row_count,
        notes=dict(report.notes),
        truncated=truncated,
        elapsed_s=time.perf_counter() - started,
    )


# --- parsing -------------------------------------------------------------------------------------------


def non_negative(text: str, what: str) -> float:
    """A finite number ≥ 0, or `RowError` naming the column."""
    try:
        value = float(text)
    except ValueError:
        raise RowError(f"{what}: not a number: {text.strip()[:40]!r}") from None
    if not math.isfinite(value):
        raise RowError(f"{what}: not finite: {text.strip()!r}")
    if value < 0:
        raise RowError(f"{what}: negative: {text.strip()!r}")
    return value


def timestamp(text: str, what: str = "timestamp") -> float:
    value = non_negative(text, what)
    if value > MAX_TIMESTAMP:
        raise RowError(f"{what}: out of range (after 2100 in Unix seconds): {text.strip()!r}")
    return value


def split_csv(text: str) -> list[str]:
    # The Alibaba traces never quote a field (ids, numbers, '|'-separated GPU models), so a plain split is
    # exact and several times faster than csv.reader per line; a quoted comma would show up as a wrong
    # column count, i.e. a reported bad row, never as silently shifted columns.
    return text.rstrip("\r\n").split(",")


def iter_lines(
    path: Path,
    report: Report | None = None,
    *,
    start: int = 0,
    end: int | None = None,
    first_line: int = 1,
) -> Iterator[tuple[int, int, str]]:
    """Yield ``(line number, byte offset, text)`` for the lines in ``[start, end)`` bytes of `path`.

    Binary reading keeps byte offsets exact (text mode offsets are opaque cookies), so a later pass can
    seek back to a row. Undecodable bytes become U+FFFD and then fail number parsing as a bad row.
    """
    with path.open("rb") as stream:
        if start:
            stream.seek(start)
        offset, number = start, first_line
        for raw in stream:
            if end is not None and offset >= end:
                break
            if report is not None:
                report.advance(len(raw))
            yield number, offset, raw.decode("utf-8", errors="replace")
            offset += len(raw)
            number += 1


def csv_rows(
    path: Path, report: Report, phase: str, *, header_lines: int = 0
) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of each non-blank row of `path` after its header, read as the report's
    phase ``"<phase> <file name>"``."""
    report.phase(f"{phase} {path.name}", path.stat().st_size)
    for number, _, text in iter_lines(path, report):
        if number > header_lines and text.strip():
            yield number, split_csv(text)


# --- time ordering -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunScan:
    """How many maximal time-sorted runs a file has, and where they start (``(byte offset, line number)``;
    only the first ``max_runs + 1`` starts are kept, as more than that are never merged)."""

    path: Path
    runs: int
    starts: list[tuple[int, int]]
    size: int
    header_lines: int


def scan_runs(
    path: Path,
    time_column: int,
    report: Report,
    *,
    header_lines: int = 0,
    observe: Callable[[list[str]], None] | None = None,
    max_runs: int = MAX_MERGE_RUNS,
) -> RunScan:
    """First pass: find where time goes backwards. Rows whose time does not parse are passed over here;
    the converting pass reports them, so each bad row is reported once. `observe` sees every row whose time
    parses (converters collect small indexes with it, e.g. the set of machine ids)."""
    size = path.stat().st_size
    report.phase(f"scanning {path.name}", size)
    starts: list[tuple[int, int]] = []
    runs = 0
    last = -math.inf
    for number, offset, text in iter_lines(path, report):
        if number <= header_lines:
            continue
        fields = split_csv(text)
        try:
            ts = timestamp(fields[time_column])
        except (RowError, IndexError):
            continue
        if runs == 0 or ts < last:
            runs += 1
            if runs <= max_runs + 1:
                starts.append((offset, number))
        last = ts
        if observe is not None:
            observe(fields)
    return RunScan(path, runs, starts, size, header_lines)


def _run_rows(
    scan: RunScan, index: int, time_column: int, report: Report
) -> Iterator[tuple[float, int, list[str]]]:
    start, first_line = scan.starts[index]
    end = scan.starts[index + 1][0] if index + 1 < len(scan.starts) else None
    for number, _, text in iter_lines(scan.path, report, start=start, end=end, first_line=first_line):
        row = _timed_row(scan.path, number, text, time_column, report)
        if row is not None:
            yield row


def _timed_row(
    path: Path, number: int, text: str, time_column: int, report: Report
) -> tuple[float, int, list[str]] | None:
    if not text.strip():
        return None
    fields = split_csv(text)
    if len(fields) <= time_column:
        report.bad(path, number, f"expected more than {time_column} columns, got {len(fields)}")
        return None
    try:
        return timestamp(fields[time_column]), number, fields
    except RowError as exc:
        report.bad(path, number, str(exc))
        return None


def ordered_rows(
    scan: RunScan, time_column: int, report: Report, *, max_runs: int = MAX_MERGE_RUNS
) -> Iterator[tuple[float, int, list[str]]]:
    """Second pass: yield ``(ts, line number, fields)`` in time order, ties in file order.

    A file made of few sorted runs (Alibaba 2018's machine_usage: one sorted block per machine) is merged
    with one reader per run: constant memory, sequential reads. A file with more runs than `max_runs`
    (shuffled rows) gets an in-memory sort of ``(time, byte offset, line number)`` triples, 24 bytes a
    row and never the rows themselves, and then each row is read back by seeking to it. Rows whose time is
    missing or invalid are reported here as bad rows and skipped.
    """
    report.phase(f"converting {scan.path.name}", scan.size)
    if scan.runs <= max_runs and scan.runs == len(scan.starts):
        # (ts, line) is unique per row, so heapq never compares the field lists.
        yield from heapq.merge(*(_run_rows(scan, index, time_column, report) for index in range(scan.runs)))
        return
    times = array("d")
    offsets = array("q")
    lines = array("q")
    for number, offset, text in iter_lines(scan.path, None):
        if number <= scan.header_lines:
            continue
        row = _timed_row(scan.path, number, text, time_column, report)
        if row is not None:
            times.append(row[0])
            offsets.append(offset)
            lines.append(number)
    # A stable sort of times alone keeps ties in file order, since the pairs were collected in file order.
    order = np.argsort(np.frombuffer(times, dtype=np.float64), kind="stable")
    with scan.path.open("rb") as stream:
        # Converted to Python ints a slice at a time: a whole-array tolist() would cost 36 bytes a row.
        for begin in range(0, len(order), 65_536):
            for index in order[begin : begin + 65_536].tolist():
                stream.seek(offsets[index])
                raw = stream.readline()
                report.advance(len(raw))
                yield times[index], lines[index], split_csv(raw.decode("utf-8", errors="replace"))
