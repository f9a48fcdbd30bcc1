"""What an ``eyrie`` process logs, and how: levels, text or JSON lines on stderr, repeats collapsed.

eyrie's own loggers (``eyrie.*`` and the modules of ``streams``, ``policies``, ``portraits``, ``schemas``)
and the libraries' (Faust, mode, aiokafka, ...) get separate thresholds, because the libraries are chatty
at INFO and log retried, transient conditions as errors:

- a worker or an applier shows eyrie's lines from ``--log-level`` (default ``info``: ready, broker lost and
  back, assignments, stopped) and the libraries' from WARNING;
- every other command is a one-shot whose failure is one ``error: ...`` line, so it shows no log lines
  unless ``--log-level`` or ``-v`` asks for them;
- ``-v`` adds the libraries' INFO lines; ``--log-level debug`` shows everything at DEBUG.

One handler, on the root logger, writes every line. Faust's worker is told not to install its own
(`streams.runtime.app.run_app`), so ``--log-format json`` holds for every line the process writes. The same
message from the same place (logger, level, format string) is written once per `REPEAT_WINDOW_S`; the
repeats in between are counted and reported in one line at the end of the window (`RepeatFilter`).
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, TextIO

import orjson

from schemas.exceptions import InvalidInput

__all__ = [
    "FORMATS",
    "LEVELS",
    "OFF",
    "OWN_LOGGERS",
    "REPEAT_WINDOW_S",
    "EyrieHandler",
    "JsonFormatter",
    "LevelFilter",
    "RepeatFilter",
    "TextFormatter",
    "configure_logging",
    "flush_repeats",
    "log_as_service",
    "parse_format",
    "parse_level",
]

LEVELS: Final[Mapping[str, int]] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
FORMATS: Final = ("text", "json")
OFF: Final = logging.CRITICAL + 10
"""A threshold no record reaches."""

OWN_LOGGERS: Final = frozenset({"eyrie", "streams", "policies", "portraits", "schemas", "bench"})
"""First components of the logger names that are eyrie's own; every other logger is a library's."""

LIBRARY_LOGGERS: Final = ("faust", "mode", "aiokafka", "kafka", "aiohttp", "asyncio")
"""Libraries whose loggers are set to let WARNING through even when nothing is shown:
`streams.runtime.security` reads aiokafka's connection errors from its logger to explain a failure in the one
error line."""

REPEAT_WINDOW_S: Final = 60.0

DOWNGRADED: Final = (
    "Unable connect to",
    "Unable to update metadata",
    "Group Coordinator Request failed",
    "Failed fetch messages from",
    "Error sending %s to node %s [%s] -- marking coordinator dead",
    "Heartbeat send request failed",
    "Heartbeat session expired",
    "Topic %s not found in cluster metadata",
)
"""Starts of aiokafka's ERROR messages about conditions it retries by itself (a broker that is down,
restarting or electing a coordinator, a topic being created): warnings, not errors, for the operator.
While the broker is away the process says so in one line of its own (`streams.runtime.lifecycle`)."""

_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def parse_level(text: str, option: str = "--log-level") -> int:
    """A level name (any case) → its number; anything else is bad input naming `option`."""
    level = LEVELS.get(text.strip().lower())
    if level is None:
        raise InvalidInput(f"unknown level {text!r} (one of {', '.join(LEVELS)})", field=option)
    return level


def parse_format(text: str, option: str = "--log-format") -> str:
    name = text.strip().lower()
    if name not in FORMATS:
        raise InvalidInput(f"unknown format {text!r} (one of {', '.join(FORMATS)})", field=option)
    return name


def is_own(name: str) -> bool:
    return name.split(".", 1)[0] in OWN_LOGGERS


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    """What a call passed as ``extra={"fields": {...}}``: the structured part of a lifecycle line."""
    fields = getattr(record, "fields", None)
    return dict(fields) if isinstance(fields, Mapping) else {}


def _repeats_text(record: logging.LogRecord) -> str:
    repeats = getattr(record, "repeats", None)
    if not repeats:
        return ""
    count, seconds = repeats
    return f" [{count} more like it over {seconds:.0f} s]"


class LevelFilter(logging.Filter):
    """Lets a record through from `own` (eyrie's loggers) or from `library` (everyone else's) up; also
    lowers aiokafka's retried errors (`DOWNGRADED`) to warnings."""

    def __init__(self, own: int, library: int) -> None:
        super().__init__()
        self.own = own
        self.library = library

    def filter(self, record: logging.LogRecord) -> bool:
        if is_own(record.name):
            return record.levelno >= self.own
        if record.levelno == logging.ERROR and record.name.startswith("aiokafka"):
            message = record.msg if isinstance(record.msg, str) else ""
            if message.startswith(DOWNGRADED):
                record.levelno, record.levelname = logging.WARNING, "WARNING"
        return record.levelno >= self.library


class RepeatFilter(logging.Filter):
    """Passes the first record of each kind (logger, level, format string) per `window` seconds and counts
    the rest; `expired` hands back, once a window is over, one summary record per kind that had repeats:
    the last of them, with ``repeats`` = (how many, over how many seconds). A record that opens a new
    window while its kind still has repeats unreported carries them itself. ``repeats`` counts the records
    held back, and its seconds run from the window's first record to the last one held back. Lifecycle
    lines (records with an ``event`` field) always pass."""

    def __init__(
        self,
        window: float = REPEAT_WINDOW_S,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_kinds: int = 1024,
    ) -> None:
        super().__init__()
        self.window = window
        self.clock = clock
        self.max_kinds = max_kinds
        # kind → [window start, records held back, the last of them, when it came]
        self._seen: dict[tuple[str, int, str], list[Any]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if "event" in _fields(record):
            return True
        kind = (record.name, record.levelno, str(record.msg))
        now = self.clock()
        with self._lock:
            seen = self._seen.get(kind)
            if seen is not None and now - seen[0] < self.window:
                seen[1] += 1
                seen[2], seen[3] = record, now
                return False
            if seen is not None and seen[1]:
                record.repeats = (seen[1], seen[3] - seen[0])
            self._seen.pop(kind, None)  # re-inserted last: the dict stays in order of window start
            self._seen[kind] = [now, 0, None, now]
            # Beyond `max_kinds` the oldest kinds are forgotten; one with repeats still to report stays until
            # the next `expired` reports it.
            while len(self._seen) > self.max_kinds:
                oldest = next(iter(self._seen))
                if self._seen[oldest][1]:
                    break
                del self._seen[oldest]
        return True

    def expired(self, *, every: bool = False) -> list[logging.LogRecord]:
        """Summary records of the windows that are over (`every`: of all, as the process stops), each kind's
        last repeat with its count."""
        now = self.clock()
        summaries = []
        with self._lock:
            for kind, (started, count, last, last_at) in list(self._seen.items()):
                if not every and now - started < self.window and len(self._seen) <= self.max_kinds:
                    continue
                del self._seen[kind]
                if count:
                    last.repeats = (count, last_at - started)
                    summaries.append(last)
        return summaries


class TextFormatter(logging.Formatter):
    """``2026-01-31T12:00:00.123+00:00 INFO eyrie.worker: ready: ...``, in UTC."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _timestamp(record)

    def formatMessage(self, record: logging.LogRecord) -> str:
        return super().formatMessage(record) + _repeats_text(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, the record's
    ``fields`` (lifecycle lines: ``event``, ``role``, ...), ``repeats`` and ``repeats_s`` on a summary of
    collapsed repeats, and ``exception`` (the traceback, one string) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _fields(record).items():
            if key not in line:
                line[key] = value
        repeats = getattr(record, "repeats", None)
        if repeats:
            line["repeats"], line["repeats_s"] = repeats[0], round(repeats[1], 1)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line, default=str).decode()


def _timestamp(record: logging.LogRecord) -> str:
    return dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds")


class EyrieHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The process's one handler: thresholds, then repeats collapsed, then the format."""

    def __init__(self, stream: TextIO, *, own: int, library: int, fmt: str, window: float) -> None:
        super().__init__(stream)
        self.levels = LevelFilter(own, library)
        self.repeats = RepeatFilter(window)
        # Thresholds first: a record dropped for its level must not open a window.
        self.addFilter(self.levels)
        self.addFilter(self.repeats)
        self.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())

    def flush_repeats(self, *, every: bool = False) -> None:
        for record in self.repeats.expired(every=every):
            self.acquire()
            try:
                self.emit(record)
            finally:
                self.release()


def configure_logging(
    *,
    level: int = logging.INFO,
    fmt: str = "text",
    verbose: bool = False,
    quiet: bool = False,
    stream: TextIO | None = None,
    window: float = REPEAT_WINDOW_S,
) -> EyrieHandler:
    """Replace the root logger's handlers with one `EyrieHandler` on `stream` (stderr).

    `quiet`: a one-shot command without `--log-level` or `-v`: nothing is shown. Otherwise eyrie's own
    records from `level` up, the libraries' from WARNING (or `level` if higher; INFO with `verbose`;
    everything at DEBUG when `level` is DEBUG).
    """
    if quiet:
        own = library = OFF
    else:
        own = level
        if level <= logging.DEBUG:
            library = logging.DEBUG
        elif verbose:
            library = min(level, logging.INFO)
        else:
            library = max(level, logging.WARNING)
    handler = EyrieHandler(stream or sys.stderr, own=own, library=library, fmt=fmt, window=window)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    # Loggers' own levels decide which records are built at all: a DEBUG record Faust builds per table
    # write costs even when no handler shows it. Library loggers stay at WARNING or below (see
    # `LIBRARY_LOGGERS`); the handler's thresholds decide what is shown.
    root.setLevel(min(own, library, logging.WARNING))
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(min(library, logging.WARNING))
    return handler


def log_as_service() -> None:
    """A command that runs until stopped (worker, applier, bridge) logs as a service: its lifecycle lines at
    least, even where the command line asked for no level (a one-shot command is quiet then). The format
    and stream the command line chose are kept."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, EyrieHandler) and handler.levels.own >= OFF:
            fmt = "json" if isinstance(handler.formatter, JsonFormatter) else "text"
            configure_logging(level=logging.INFO, fmt=fmt, stream=handler.stream)
            return


def flush_repeats(*, every: bool = False) -> None:
    """Write the summaries of collapsed repeats whose windows are over (called about once a second by a
    running worker or applier), or of every window (`every`, when it stops)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, EyrieHandler):
            handler.flush_repeats(every=every)
