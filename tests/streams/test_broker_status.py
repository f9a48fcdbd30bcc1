"""`eyrie broker status` asks the port, not only its data directory's pid file: a broker that another
EYRIE_HOME (or data directory, or Docker) started is reported up, with who serves it; and `make demo`'s
program uses a broker already answering on the default port instead of starting another."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from streams.local import broker as broker_module
from streams.local.broker import DEFAULT_PORT, free_port, probe_port, resolved_broker
from tests.commands import run_module

# ------------------------------------------------------------------------------------------- builders


def status(port: int, home: Path, *args: str) -> tuple[int, list[str]]:
    """`eyrie broker status --port PORT` as a user with EYRIE_HOME=home runs it: (exit code, stdout lines)."""
    env = {**os.environ, "EYRIE_HOME": str(home)}
    done = run_module("streams.cli", "broker", "status", "--port", port, *args, env=env, timeout=60.0)
    assert done.stderr == "", done.stderr
    return done.returncode, done.stdout.splitlines()


def local_port(bootstrap: str) -> int:
    host, _, port = bootstrap.split(",", maxsplit=1)[0].rpartition(":")
    if host not in ("127.0.0.1", "localhost"):
        pytest.skip(f"the session's broker ({bootstrap}) is not on 127.0.0.1, which status probes")
    return int(port)


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A port on which something accepts connections and never answers (not Kafka)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def default_port_answers() -> bool:
    return probe_port(DEFAULT_PORT).answering


# ---------------------------------------------------------------------------------------------- cases


@pytest.mark.kafka
def test_status_reports_a_broker_started_from_another_eyrie_home_as_up_and_names_it(
    kafka_bootstrap, tmp_path
):
    port = local_port(kafka_bootstrap)
    code, lines = status(port, tmp_path / "elsewhere")
    assert code == 0 and len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"broker up: 127.0.0.1:{port} (cluster "), line
    assert line.endswith(f"; not started from {tmp_path / 'elsewhere' / f'broker-{port}'})"), line
    # Who serves it: its pid, and its data directory when `eyrie broker up` started it.
    assert re.search(r"pid \d+", line), line


@pytest.mark.parametrize("how", ["with --port alone", "with --data-dir too"])
def test_status_reports_a_free_port_down_with_exit_1(how, tmp_path):
    port = free_port()
    args = ("--data-dir", str(tmp_path / "data")) if how == "with --data-dir too" else ()
    code, lines = status(port, tmp_path, *args)
    data = tmp_path / "data" if args else tmp_path / f"broker-{port}"
    assert (code, lines) == (1, [f"broker down: 127.0.0.1:{port} (data: {data})"]), how


def test_status_reports_a_port_held_by_something_that_is_not_kafka_down_and_says_who_holds_it(
    silent_listener, tmp_path
):
    code, lines = status(silent_listener, tmp_path)
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(
        f"broker down: 127.0.0.1:{silent_listener} (data: {tmp_path / f'broker-{silent_listener}'}); "
        f"port {silent_listener} is taken by something that does not answer Kafka metadata requests ("
    ), lines
    if Path("/proc/net/tcp").exists():
        assert f"pid {os.getpid()} (" in lines[0], lines  # this test's process holds the port


@pytest.mark.kafka
def test_the_demo_broker_resolution_reuses_the_broker_answering_on_the_default_port(
    kafka_bootstrap, monkeypatch
):
    # The session's broker stands in for one on the default port, so this runs wherever the suite does.
    port = local_port(kafka_bootstrap)
    monkeypatch.setattr(broker_module, "DEFAULT_PORT", port)
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    with resolved_broker(reuse_local=True) as bootstrap:
        assert bootstrap == f"127.0.0.1:{port}"


@pytest.mark.kafka
@pytest.mark.skipif(not default_port_answers(), reason="no broker answers on 127.0.0.1:9092")
def test_the_demo_uses_the_broker_already_running_on_the_default_port_without_starting_one(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "KAFKA_BOOTSTRAP_SERVERS"}
    done = run_module(
        "streams.demo", "--pods", "8", "--nodes", "3", "--out", tmp_path / "out", env=env, timeout=240.0
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"broker 127.0.0.1:{DEFAULT_PORT};" in done.stdout, done.stdout[-2000:]
    assert orjson.loads(done.stdout.strip().splitlines()[-1])["pods"] == 8
