"""What a worker or an applier logs: one line when ready, lost, back and stopped; no error an idle process
did not have; repeats collapsed; `--log-level`, `--log-format json` and `-v` on the `eyrie` command.

The Kafka tests run `eyrie worker` and `eyrie applier` as real processes. The broker-loss test stops and
restarts a broker of its own (never the session's, which other tests share).
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from schemas.exceptions import InvalidInput
from streams.local.broker import LocalBroker, free_ports
from streams.runtime.lifecycle import BrokerWatch
from streams.runtime.logs import (
    JsonFormatter,
    LevelFilter,
    RepeatFilter,
    TextFormatter,
    configure_logging,
    parse_format,
    parse_level,
)
from tests.commands import REPO, run_module

# ------------------------------------------------------------------------------------------- builders


def record(
    message: str = "broker %s gone",
    *args: Any,
    name: str = "aiokafka",
    level: int = logging.WARNING,
    fields: dict[str, Any] | None = None,
    exc_info: Any = None,
) -> logging.LogRecord:
    made = logging.LogRecord(name, level, __file__, 1, message, args or None, exc_info)
    if fields is not None:
        made.fields = fields
    return made


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Process:
    """A worker or an applier started with `--log-format json`, its stderr and stdout in `log`."""

    popen: subprocess.Popen[bytes]
    log: Path

    def lines(self) -> list[dict[str, Any]]:
        text = self.log.read_text(errors="replace")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def events(self, event: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line.get("event") == event]

    def wait_for(self, event: str, count: int = 1, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.events(event)) < count:
            if self.popen.poll() is not None:
                raise AssertionError(
                    f"exited {self.popen.returncode} before {event!r}:\n{self.log.read_text()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {event!r} line in {timeout:.0f} s:\n{self.log.read_text()}")
            time.sleep(0.3)

    def stop(self, timeout: float = 60.0) -> int:
        self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            raise


def start(
    role: str,
    bootstrap: str,
    workdir: Path,
    *options: str,
    stall_s: float | None = None,
    web_port: int | None = None,
) -> Process:
    """`eyrie [OPTIONS] --log-format json ROLE [--web-port P]` on its own topics; `stall_s` shortens Faust's
    check that every partition is fetched and moving (5 minutes by default), so that what it would
    report shows within seconds."""
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "EYRIE_TOPIC_PREFIX": f"lg{uuid.uuid4().hex[:8]}.",
        "EYRIE_PARTITIONS": "2",
        "EYRIE_DATA_DIR": str(workdir / "faust"),
        "EYRIE_SESSION_TIMEOUT_S": "6",
    }
    if stall_s is not None:
        env["EYRIE_STALL_TIMEOUT_S"] = str(stall_s)
    log = workdir / f"{role}.log"
    with open(log, "wb") as out:
        popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streams.cli",
                *options,
                "--log-format",
                "json",
                role,
                *(["--web-port", str(web_port)] if web_port is not None else []),
            ],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Process(popen, log)


# ------------------------------------------------------------------------------------- unit: options


LEVEL_NAMES = [
    ("debug", logging.DEBUG),
    ("info", logging.INFO),
    ("WARNING", logging.WARNING),
    (" error ", logging.ERROR),
]


@pytest.mark.parametrize(
    ("text", "level"), LEVEL_NAMES, ids=[f"{t.strip()!r} is a level" for t, _ in LEVEL_NAMES]
)
def test_level_names_parse_in_any_case(text: str, level: int) -> None:
    assert parse_level(text) == level


@pytest.mark.parametrize(
    ("parse", "text", "field"),
    [
        pytest.param(
            parse_level, "loud", "--log-level", id="An unknown level names the option and the levels."
        ),
        pytest.param(parse_level, "", "--log-level", id="An empty level is refused."),
        pytest.param(
            parse_format, "xml", "--log-format", id="An unknown format names the option and the formats."
        ),
    ],
)
def test_bad_option_values_are_refused_naming_the_option(parse: Any, text: str, field: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse(text)
    assert str(raised.value).startswith(f"{field}: unknown")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(
            ("--log-level", "loud"),
            "error: --log-level: unknown level 'loud' (one of debug, info, warning, error)",
            id="A bad --log-level exits 2 with one line.",
        ),
        pytest.param(
            ("--log-format", "xml"),
            "error: --log-format: unknown format 'xml' (one of text, json)",
            id="A bad --log-format exits 2 with one line.",
        ),
    ],
)
def test_the_eyrie_command_refuses_a_bad_logging_option_in_one_line(
    tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    result = run_module("streams.cli", *args, "schema", "export", tmp_path / "schemas")
    assert (result.returncode, result.stderr.splitlines(), result.stdout) == (2, [expected], "")


# ----------------------------------------------------------------------------------- unit: formatters


def test_the_json_formatter_writes_one_object_with_time_level_logger_message_and_fields() -> None:
    line = JsonFormatter().format(
        record(
            "ready: %s owns %s",
            "worker",
            "sequencer [0]",
            name="eyrie.worker",
            level=logging.INFO,
            fields={"event": "ready", "role": "worker", "assigned": {"sequencer": [0]}, "message": "clash"},
        )
    )
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed.pop("time").endswith("+00:00")
    assert parsed == {
        "level": "info",
        "logger": "eyrie.worker",
        "message": "ready: worker owns sequencer [0]",  # a field never overwrites the record's own keys
        "event": "ready",
        "role": "worker",
        "assigned": {"sequencer": [0]},
    }


def test_the_json_formatter_keeps_a_traceback_inside_its_one_line() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        line = JsonFormatter().format(
            record("failed", name="eyrie.worker", level=logging.ERROR, exc_info=sys.exc_info())
        )
    assert len(line.splitlines()) == 1
    parsed = json.loads(line)
    assert parsed["exception"].startswith("Traceback") and "ValueError: bad\nvalue" in parsed["exception"]


def test_both_formatters_report_collapsed_repeats_on_the_summary_line() -> None:
    summary = record("Unable connect to node with id %s", 1)
    summary.repeats = (41, 12.34)
    assert (
        TextFormatter()
        .format(summary)
        .endswith("WARNING aiokafka: Unable connect to node with id 1 [41 more like it over 12 s]")
    )
    parsed = json.loads(JsonFormatter().format(summary))
    assert (parsed["message"], parsed["repeats"], parsed["repeats_s"]) == (
        "Unable connect to node with id 1",
        41,
        12.3,
    )


# ---------------------------------------------------------------------------------- unit: level filter

INFO, WARNING, ERROR = logging.INFO, logging.WARNING, logging.ERROR
LEVEL_CASES = [
    ("eyrie's own info passes a service's default", "eyrie.worker", INFO, "ready", INFO, WARNING, INFO),
    (
        "a module of streams is eyrie's own",
        "streams.runtime.agents.placement",
        INFO,
        "shard rebuilt",
        INFO,
        WARNING,
        INFO,
    ),
    ("a library's info is held back by default", "faust.worker", INFO, "Ready", INFO, WARNING, None),
    (
        "a library's warning passes",
        "faust.assignor",
        WARNING,
        "Ignoring missing topic",
        INFO,
        WARNING,
        WARNING,
    ),
    (
        "aiokafka's retried connection error is a warning",
        "aiokafka",
        ERROR,
        "Unable connect to node with id %s: %s",
        INFO,
        WARNING,
        WARNING,
    ),
    (
        "a retried error stays held back when only errors are shown",
        "aiokafka",
        ERROR,
        "Unable connect to node with id %s: %s",
        ERROR,
        ERROR,
        None,
    ),
    (
        "aiokafka's other errors stay errors",
        "aiokafka.consumer",
        ERROR,
        "OffsetCommit failed",
        INFO,
        WARNING,
        ERROR,
    ),
    (
        "eyrie's info is held back at --log-level warning",
        "eyrie.worker",
        INFO,
        "ready",
        WARNING,
        WARNING,
        None,
    ),
]


@pytest.mark.parametrize(
    ("case", "name", "level", "message", "own", "library", "shown_as"),
    LEVEL_CASES,
    ids=[c[0] for c in LEVEL_CASES],
)
def test_the_level_filter_applies_eyries_threshold_and_the_libraries_own(
    case: str, name: str, level: int, message: str, own: int, library: int, shown_as: int | None
) -> None:
    made = record(message, name=name, level=level)
    passed = LevelFilter(own, library).filter(made)
    assert (made.levelno if passed else None) == shown_as


def test_verbose_shows_the_libraries_info_and_the_default_does_not(root_logger: logging.Logger) -> None:
    shown = {}
    for verbose in (False, True):
        stream = io.StringIO()
        configure_logging(level=INFO, verbose=verbose, stream=stream)
        logging.getLogger("faust.worker").info("Ready")
        logging.getLogger("eyrie.worker").info("ready: worker")
        shown[verbose] = [line.split(" ", 2)[2] for line in stream.getvalue().splitlines()]
    assert shown == {
        False: ["eyrie.worker: ready: worker"],
        True: ["faust.worker: Ready", "eyrie.worker: ready: worker"],
    }


def test_a_one_shot_command_logs_nothing_but_kafka_errors_still_reach_their_explainer(
    root_logger: logging.Logger,
) -> None:
    stream = io.StringIO()
    configure_logging(quiet=True, stream=stream)
    caught: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            caught.append(record.getMessage())

    catch = Catch(logging.WARNING)
    logging.getLogger("aiokafka").addHandler(catch)  # as streams.runtime.security.kafka_errors does
    try:
        logging.getLogger("aiokafka").error("Unable connect to node with id %s: %s", 1, "refused")
        logging.getLogger("eyrie.worker").error("failed")
    finally:
        logging.getLogger("aiokafka").removeHandler(catch)
    assert (stream.getvalue(), caught) == ("", ["Unable connect to node with id 1: refused"])


# --------------------------------------------------------------------------------- unit: repeat filter


def test_repeats_of_one_message_are_collapsed_into_one_line_and_one_summary_per_window() -> None:
    clock = Clock()
    repeats = RepeatFilter(60.0, clock=clock)
    shown: list[tuple[int, str]] = []
    for second in range(120):  # two a second for two minutes, with changing arguments
        clock.now = 1000.0 + second
        shown += [(second, f"{s.repeats[0]} more over {s.repeats[1]:.0f} s") for s in repeats.expired()]
        for node in (1, 2):
            if repeats.filter(record("Unable connect to node with id %s", node)):
                shown.append((second, f"node {node}"))
    shown += [(120, f"{s.repeats[0]} more over {s.repeats[1]:.0f} s") for s in repeats.expired(every=True)]
    assert shown == [
        (0, "node 1"),
        (60, "119 more over 59 s"),
        (60, "node 1"),
        (120, "119 more over 59 s"),
    ]


def test_a_message_reopening_a_window_carries_repeats_not_yet_reported() -> None:
    clock = Clock()
    repeats = RepeatFilter(10.0, clock=clock)
    assert repeats.filter(record("lag on %s", "p0", name="faust.consumer"))
    clock.now += 1
    assert not repeats.filter(record("lag on %s", "p1", name="faust.consumer"))
    clock.now += 20
    reopening = record("lag on %s", "p2", name="faust.consumer")
    assert repeats.filter(reopening)
    assert reopening.repeats == (1, 1.0)
    assert repeats.expired() == []


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(
            record("lost", name="eyrie.worker", fields={"event": "broker_lost"}),
            record("lost", name="eyrie.worker", fields={"event": "broker_lost"}),
            id="Lifecycle lines always pass.",
        ),
        pytest.param(record("one %s", 1), record("two %s", 1), id="Different messages are not repeats."),
        pytest.param(
            record("x", level=logging.WARNING), record("x", level=logging.ERROR), id="Levels differ."
        ),
        pytest.param(record("x", name="faust.a"), record("x", name="faust.b"), id="Loggers differ."),
    ],
)
def test_records_that_are_not_repeats_pass(first: logging.LogRecord, second: logging.LogRecord) -> None:
    repeats = RepeatFilter(60.0, clock=Clock())
    assert repeats.filter(first) and repeats.filter(second)


def test_when_the_process_stops_every_pending_repeat_is_reported() -> None:
    clock = Clock()
    repeats = RepeatFilter(60.0, clock=clock)
    for _ in range(5):
        repeats.filter(record("Unable to update metadata from %s", [1]))
        clock.now += 1
    assert repeats.expired() == []
    [summary] = repeats.expired(every=True)
    assert summary.repeats == (4, 4.0)


def test_the_number_of_kinds_remembered_is_bounded() -> None:
    repeats = RepeatFilter(60.0, clock=Clock(), max_kinds=10)
    for n in range(1000):
        repeats.filter(record(f"message {n}"))
    assert len(repeats._seen) <= 10


# ------------------------------------------------------------------------------------------ with Kafka

ROLES = [
    pytest.param(
        "worker",
        (),
        True,
        id="An idle worker says once that it is ready and what it owns, then nothing until it stops.",
    ),
    pytest.param(
        "applier",
        ("-v",),
        False,
        id="An idle applier with -v also shows the libraries' info lines, no error.",
    ),
]


@pytest.mark.kafka
@pytest.mark.parametrize(("role", "options", "web"), ROLES)
def test_an_idle_process_logs_ready_once_no_errors_and_stopped_once(
    kafka_bootstrap: str, tmp_path: Path, role: str, options: tuple[str, ...], web: bool
) -> None:
    port = free_ports(1)[0] if web else None
    process = start(role, kafka_bootstrap, tmp_path, *options, stall_s=1.0, web_port=port)
    try:
        process.wait_for("ready")
        # Faust checks every 2.5 s that each partition is fetched and moving; with the check's timeout at
        # 1 s, every changelog partition of the process's own tables was reported at ERROR each time.
        time.sleep(8.0)
    finally:
        code = process.stop()
    lines = process.lines()
    assert code == 0, lines
    assert [line.get("event") for line in lines if line.get("event")] == ["ready", "stopped"]
    [ready] = process.events("ready")
    assert (ready["level"], ready["role"], ready["broker"], ready["web_port"]) == (
        "info",
        role,
        kafka_bootstrap,
        port,
    )
    owned = {"worker": ["sequencer", "pod-requests", "metrics"], "applier": ["bindings"]}[role]
    assert all(ready["assigned"].get(topic) for topic in owned), ready
    assert ready["shards"] == ([0] if role == "worker" else [])
    assert f"ready: {role} on Kafka {kafka_bootstrap}" in ready["message"]
    assert ready["message"].endswith(f"web port {port}" if web else "no web server")
    assert [line for line in lines if line["level"] in ("error", "critical")] == []
    libraries_info = [
        line for line in lines if line["level"] == "info" and not line["logger"].startswith("eyrie.")
    ]
    assert bool(libraries_info) == ("-v" in options), libraries_info[:5]
    [stopped] = process.events("stopped")
    assert (stopped["level"], stopped["reason"], stopped["exit_code"]) == ("info", "SIGTERM", 0)


@pytest.fixture
def private_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker this test alone stops and starts again."""
    if shutil.which("java") is None:
        pytest.skip("the broker-loss test starts a Kafka broker of its own, which needs java")
    port, controller = free_ports(2)
    broker = LocalBroker(port, tmp_path_factory.mktemp("lost-broker"), controller)
    broker.up(timeout=120.0)
    yield broker
    broker.down()


@pytest.mark.parametrize(
    ("case", "probes", "now", "settled"),
    [
        ("a broker answering since the start is settled", [(1.0, True)], 2.0, True),
        ("a lost broker is not", [(1.0, False)], 100.0, False),
        ("a broker back for less than the wait is not yet", [(1.0, False), (10.0, True)], 11.0, False),
        ("a broker back for the wait is again", [(1.0, False), (10.0, True)], 12.0, True),
        ("an unknown probe changes nothing", [(1.0, False), (10.0, None)], 100.0, False),
    ],
)
def test_a_broker_is_settled_once_it_has_answered_for_the_stall_checks_wait(
    case: str, probes: list[tuple[float, bool | None]], now: float, settled: bool
) -> None:
    """Faust's check for a partition never fetched blames the process; while the broker is lost, or just
    back, the outage is why, and the lifecycle's lost and back lines have said so."""
    watch = BrokerWatch()
    for at, reachable in probes:
        watch.observe(reachable, at)
    assert watch.settled(now, 2.0) is settled


@pytest.mark.kafka
def test_a_broker_outage_gives_one_lost_line_one_back_line_and_a_few_lines_between(
    private_broker: LocalBroker, tmp_path: Path
) -> None:
    process = start("worker", private_broker.bootstrap, tmp_path, stall_s=2.0)
    try:
        process.wait_for("ready")
        private_broker.down()
        process.wait_for("broker_lost", timeout=30.0)
        time.sleep(10.0)
        private_broker.up(timeout=120.0)
        process.wait_for("broker_back", timeout=90.0)
    finally:
        code = process.stop()
    lines = process.lines()
    assert code == 0, lines
    events = [line.get("event") for line in lines if line.get("event")]
    assert events == ["ready", "broker_lost", "broker_back", "stopped"], events
    [lost] = process.events("broker_lost")
    [back] = process.events("broker_back")
    assert (lost["level"], back["level"]) == ("warning", "info")
    assert back["lost_s"] >= 10.0
    between = lines[lines.index(lost) + 1 : lines.index(back)]
    # Before: 2,377 ERROR lines for a 20 s outage, most of them the Kafka client's retries.
    assert len(between) < 20, between
    assert [line for line in lines if line["level"] == "error"] == []
