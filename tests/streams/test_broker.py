"""The local Kafka broker: lifecycle through the CLI, one-line failures, and broker resolution.

JVM starts are the expensive part on a two-core runner, so this file starts exactly two real brokers
(the CLI lifecycle test and the session broker behind `kafka_bootstrap`) plus one that dies at once.
Every other test fails before Java would run.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

import streams.local.broker
from schemas.exceptions import BrokerError
from streams.local.broker import (
    COMPILER_NICE,
    COMPILER_THREAD_NAMES,
    KAFKA_VERSION,
    BrokerStatus,
    LocalBroker,
    describe_resolution,
    free_port,
    free_ports,
    resolved_broker,
    wait_until_answering,
)
from tests.commands import REPO, run_module

pytestmark = pytest.mark.kafka

POM = REPO / "streams" / "local" / "kafka" / "pom.xml"


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 90.0
) -> subprocess.CompletedProcess[str]:
    return run_module("streams.cli", "broker", *args, env=env, timeout=timeout)


def one_line(text: str) -> str:
    lines = text.splitlines()
    assert len(lines) == 1, f"expected exactly one line, got {lines!r}"
    return lines[0]


def process_gone(pid: int) -> bool:
    # The CLI that launched the broker has exited, so init reaps it at its own pace: a zombie counts as gone.
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True, check=False)
    return state.stdout.strip() in ("", "Z") or state.stdout.strip().startswith("Z")


@pytest.fixture
def listening_socket() -> Iterator[socket.socket]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


# ------------------------------------------------------------------------------------ real brokers


def test_broker_up_returns_once_metadata_answers_and_down_stops_it(tmp_path: Path) -> None:
    port, controller = (str(p) for p in free_ports(2))
    data = str(tmp_path / "broker")

    started = run_cli("up", "-p", port, "--controller-port", controller, "-d", data)
    assert started.returncode == 0, started.stderr
    line = one_line(started.stdout)
    match = re.fullmatch(
        rf"broker up: 127\.0\.0\.1:{port} \(data: {re.escape(data)}, pid (\d+)\) in ([\d.]+) s", line
    )
    assert match, line
    pid, seconds = int(match[1]), float(match[2])
    assert seconds < 30.0
    print(f"time to ready (format + start + metadata answer): {seconds} s")

    try:
        # Out of the terminal's process group (Ctrl-C), in the session that started it (Linux schedules
        # each session as a group), and its JIT compilers below the pipeline's priority.
        assert os.getpgid(pid) == pid
        assert os.getsid(pid) == os.getsid(0)
        if Path("/proc").is_dir():
            compilers = [
                int((task / "stat").read_text().rsplit(")", 1)[1].split()[16])  # the nice value
                for task in Path(f"/proc/{pid}/task").glob("*")
                if (task / "comm").read_text().startswith(COMPILER_THREAD_NAMES)
            ]
            assert compilers and set(compilers) == {COMPILER_NICE}, compilers

        status = run_cli("status", "-p", port, "-d", data)
        assert (status.returncode, one_line(status.stdout)) == (
            0,
            f"broker up: 127.0.0.1:{port} (data: {data}, pid {pid})",
        )

        again = run_cli("up", "-p", port, "-d", data)
        assert again.returncode == 0, again.stderr
        assert one_line(again.stdout).startswith(
            f"broker already up: 127.0.0.1:{port} (data: {data}, pid {pid})"
        )
        wait_until_answering(f"127.0.0.1:{port}", timeout=1.0)

        # Without -p, status (and down, below) find the port the data directory's broker was started with.
        without_port = run_cli("status", "-d", data)
        assert (without_port.returncode, one_line(without_port.stdout)) == (
            0,
            f"broker up: 127.0.0.1:{port} (data: {data}, pid {pid})",
        )
    finally:
        stopped = run_cli("down", "-d", data)

    assert stopped.returncode == 0, stopped.stderr
    assert one_line(stopped.stdout).startswith(f"broker down: 127.0.0.1:{port} (pid {pid} stopped")
    assert not (tmp_path / "broker" / "broker.pid").exists()
    assert process_gone(pid)

    after = run_cli("status", "-p", port, "-d", data)
    assert (after.returncode, one_line(after.stdout)) == (1, f"broker down: 127.0.0.1:{port} (data: {data})")
    twice = run_cli("down", "-p", port, "-d", data)
    assert (twice.returncode, one_line(twice.stdout)) == (
        0,
        f"broker was not running: 127.0.0.1:{port} (data: {data})",
    )
    # Broker output belongs in its log file, not on the terminal of whoever ran `up`.
    assert (tmp_path / "broker" / "broker.log").stat().st_size > 0
    assert (tmp_path / "broker" / "broker.out").read_text() == ""


async def test_session_broker_serves_a_client_round_trip_and_names_its_resolution(
    kafka_bootstrap: str,
) -> None:
    from aiokafka import AIOKafkaConsumer

    from tests.topics import topic_with

    description = describe_resolution()
    assert kafka_bootstrap in description or description.startswith("KAFKA_BOOTSTRAP_SERVERS=")

    # Topics are never auto-created, so this also proves the admin path the pipeline relies on works.
    topic = f"test-broker-{uuid.uuid4().hex[:8]}"
    await topic_with(kafka_bootstrap, topic, [b"hello eyrie"])

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), timeout=20)
    finally:
        await consumer.stop()
    assert record.value == b"hello eyrie"


def test_a_broker_that_dies_while_starting_raises_one_line_quoting_its_log(tmp_path: Path) -> None:
    # Storage that claims another node id makes Kafka exit within a second of starting.
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "meta.properties").write_text(
        "version=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\nnode.id=7\n"
    )
    port, controller = free_ports(2)
    broker = LocalBroker(port=port, data_dir=tmp_path, controller_port=controller)

    with pytest.raises(BrokerError) as raised:
        broker.up(timeout=30.0)

    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"broker exited with code 1 before answering on {broker.bootstrap}: ")
    assert "Stored node id 7 doesn't match" in message
    assert broker.status().running is False
    assert not broker.pid_file.exists()


# ----------------------------------------------------------------------- failures before any JVM


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        pytest.param({}, r"java not found on PATH: install a JDK 17\+ .*", id="java-missing"),
        pytest.param(
            {"java": "exit 99"}, r"mvn not found on PATH: install Maven 3\.6\+ .*", id="mvn-missing"
        ),
        pytest.param(
            {
                "java": "exit 99",
                "mvn": "echo '[ERROR] Failed to execute goal: no artifact kafka -> [Help 1]'; exit 1",
            },
            rf"maven could not resolve Kafka {re.escape(KAFKA_VERSION)} jars \(exit 1\): "
            r"Failed to execute goal: no artifact kafka",
            id="maven-fails",
        ),
    ],
)
def test_up_without_a_working_java_or_maven_exits_2_with_one_line_naming_the_tool(
    tmp_path: Path, tools: dict[str, str], expected: str
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / name).chmod(0o755)
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    # An empty jar cache forces the Maven step, so a machine that already resolved the jars still checks it.
    env |= {"PATH": str(bin_dir), "XDG_CACHE_HOME": str(tmp_path / "cache")}

    # Both ports chosen free: the controller's default (PORT+1) may be taken, and that check comes first.
    port, controller = free_ports(2)
    ports = ["-p", str(port), "--controller-port", str(controller)]
    result = run_cli("up", *ports, "-d", str(tmp_path / "broker"), env=env)

    assert result.returncode == 2, result.stdout + result.stderr
    assert re.fullmatch(rf"error: {expected}", one_line(result.stderr))
    assert result.stdout == ""
    # No marker means the next `up` resolves again instead of trusting a half-filled cache.
    assert not (tmp_path / "cache" / "eyrie" / f"kafka-{KAFKA_VERSION}" / ".resolved").exists()


@pytest.mark.parametrize("taken", ["port", "controller port"], ids=["port", "controller-port"])
def test_up_on_a_taken_port_exits_2_with_one_line_naming_the_port(
    tmp_path: Path, listening_socket: socket.socket, taken: str
) -> None:
    busy = listening_socket.getsockname()[1]
    other = free_port()
    port, controller = (busy, other) if taken == "port" else (other, busy)
    option = "--port" if taken == "port" else "--controller-port"

    result = run_cli("up", "-p", str(port), "--controller-port", str(controller), "-d", str(tmp_path))

    assert result.returncode == 2, result.stdout + result.stderr
    assert one_line(result.stderr) == (
        f"error: {taken} {busy} on 127.0.0.1 is in use by another process; pass {option}"
    )
    assert not (tmp_path / "broker.pid").exists()


@pytest.mark.parametrize(
    "pid_file",
    [
        pytest.param(None, id="no-pid-file"),
        pytest.param("not a pid\n", id="garbage-pid-file"),
        # A live process that is not this broker, as after a reboot that recycled the pid.
        pytest.param(f"{os.getpid()}\n", id="pid-of-another-process"),
    ],
)
def test_a_data_dir_without_a_live_broker_reads_as_down_and_down_returns_false(
    tmp_path: Path, pid_file: str | None
) -> None:
    if pid_file is not None:
        (tmp_path / "broker.pid").write_text(pid_file)
    broker = LocalBroker(port=free_port(), data_dir=tmp_path)

    assert broker.status() == BrokerStatus(
        running=False, pid=None, bootstrap=broker.bootstrap, answering=False
    )
    assert broker.down() is False
    assert not broker.pid_file.exists()


@pytest.mark.parametrize("listener", ["nothing-listening", "silent-listener"])
def test_wait_until_answering_gives_up_with_a_broker_error_after_its_timeout(
    listening_socket: socket.socket, listener: str
) -> None:
    port = listening_socket.getsockname()[1] if listener == "silent-listener" else free_port()
    started = time.monotonic()

    with pytest.raises(
        BrokerError, match=rf"no Kafka broker answered a metadata request at 127\.0\.0\.1:{port}"
    ):
        wait_until_answering(f"127.0.0.1:{port}", timeout=0.5)

    assert time.monotonic() - started < 3.0


def test_kafka_bootstrap_servers_is_used_as_is_without_starting_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "kafka.example:9092")

    with resolved_broker() as bootstrap:
        assert bootstrap == "kafka.example:9092"
        assert describe_resolution() == "KAFKA_BOOTSTRAP_SERVERS=kafka.example:9092"


def test_describe_resolution_without_the_env_var_returns_quickly_even_with_no_docker_daemon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    # The session's broker is live inside resolved_broker, and describe_resolution names a live one first.
    monkeypatch.setattr(streams.local.broker, "_active", [])
    started = time.monotonic()

    description = describe_resolution()

    assert description.startswith(("testcontainers", "local broker"))
    assert time.monotonic() - started < 5.0


def test_the_pom_pins_the_same_kafka_version_as_the_code() -> None:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    assert ET.parse(POM).getroot().findtext("m:properties/m:kafka.version", namespaces=ns) == KAFKA_VERSION
