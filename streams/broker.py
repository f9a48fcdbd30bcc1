"""A real Apache Kafka broker for development and tests, and the rule that picks which broker to use.

`LocalBroker` runs Kafka as a single KRaft node (broker and controller in one JVM) straight from the
jars, so the only prerequisites are Java and Maven: Maven fetches the jars once into a cache outside the
repository, and nothing needs Docker or a Kafka download.

`resolved_broker` picks a broker for tests and the demo, first match wins:

1. ``KAFKA_BOOTSTRAP_SERVERS`` when set, used as is;
2. a testcontainers Kafka when a Docker daemon answers;
3. a `LocalBroker` on a free port in a temporary directory, removed on exit.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from schemas.exceptions import BrokerError, ToolMissing

__all__ = [
    "DEFAULT_PORT",
    "HOST",
    "KAFKA_VERSION",
    "TESTCONTAINERS_IMAGE",
    "BrokerStatus",
    "LocalBroker",
    "default_data_dir",
    "describe_resolution",
    "free_port",
    "jar_cache_dir",
    "resolve_jars",
    "resolved_broker",
    "wait_until_answering",
]

log = logging.getLogger(__name__)

KAFKA_VERSION = "3.9.1"
DEFAULT_PORT = 9092
HOST = "127.0.0.1"
# The testcontainers Kafka module drives Confluent's image entry scripts, so an apache/kafka image would
# not boot under it; 7.7.1 ships Kafka 3.7 and supports KRaft.
TESTCONTAINERS_IMAGE = "confluentinc/cp-kafka:7.7.1"

_JVM_OPTIONS = (
    "-Xms256m",
    "-Xmx512m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    # An out-of-memory broker that lingers half-alive is worse than one that dies and shows in status.
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
_MAVEN_TIMEOUT_S = 600.0
_STOP_GRACE_AFTER_KILL_S = 5.0
_PROBE_TIMEOUT_S = 1.0
_LOG_PREFIX = re.compile(r"^\[[^\]]*\] ")  # the "[timestamp] " that log4j puts before each line
_ERROR_LINE = re.compile(r"^(ERROR|FATAL) |^[\w.$]+(Exception|Error)\b|^Error:|^Caused by:")
_POLL_S = 0.1


# --------------------------------------------------------------------------------------------- paths


def _eyrie_home() -> Path:
    return Path(os.environ.get("EYRIE_HOME") or Path.home() / ".local" / "share" / "eyrie").expanduser()


def default_data_dir(port: int = DEFAULT_PORT) -> Path:
    """Where `LocalBroker` keeps logs and metadata unless told otherwise: one directory per port."""
    return _eyrie_home() / f"broker-{port}"


def jar_cache_dir(version: str = KAFKA_VERSION) -> Path:
    """The per-user jar cache; outside the repository so a clean clone or `make clean` keeps it."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return cache / "eyrie" / f"kafka-{version}"


def _packaged(name: str) -> bytes:
    return (resources.files("streams") / "kafka" / name).read_bytes()


# --------------------------------------------------------------------------------------------- tools


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(Path(java_home) / "bin" / "java", os.X_OK):
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise ToolMissing(
            "java not found on PATH: install a JDK 17+ "
            "(apt-get install openjdk-17-jre-headless, brew install openjdk@17) or set JAVA_HOME"
        )
    return found


def _mvn() -> str:
    found = shutil.which("mvn")
    if found is None:
        raise ToolMissing(
            "mvn not found on PATH: install Maven 3.6+ (apt-get install maven, brew install maven); "
            "it fetches the Kafka jars once"
        )
    return found


@contextlib.contextmanager
def _file_lock(path: Path, timeout: float, what: str) -> Iterator[None]:
    """An exclusive advisory lock; polled rather than blocking so a stuck holder cannot hang us forever."""
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with path.open("a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise BrokerError(
                        f"{what}: another process has held {path} for {timeout:g} s; is it stuck?"
                    ) from None
                time.sleep(_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ---------------------------------------------------------------------------------------------- jars


def resolve_jars() -> Path:
    """Return the directory holding the broker's runtime jars, running Maven the first time only.

    The marker records a digest of the pom, written only after Maven succeeded, so an interrupted
    download or an edited pom is resolved again. The lock keeps two processes from running Maven into
    the same directory at once; the loser finds the marker and returns.
    """
    version = KAFKA_VERSION  # the pom pins the same version; a test keeps the two equal
    pom = _packaged("pom.xml")
    digest = hashlib.sha256(pom).hexdigest()
    cache = jar_cache_dir(version)
    lib, marker = cache / "lib", cache / ".resolved"

    def resolved() -> bool:
        return marker.is_file() and marker.read_text().strip() == digest

    if resolved():
        return lib
    with _file_lock(cache / ".lock", _MAVEN_TIMEOUT_S, f"resolving Kafka {version} jars"):
        if resolved():
            return lib
        mvn = _mvn()
        marker.unlink(missing_ok=True)
        shutil.rmtree(lib, ignore_errors=True)
        (cache / "pom.xml").write_bytes(pom)
        log.info("resolving Kafka %s jars with Maven into %s (first use only)", version, lib)
        command = [
            mvn,
            "-q",
            "-B",
            "-Dstyle.color=never",
            "-f",
            str(cache / "pom.xml"),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={lib}",
            "-DincludeScope=runtime",
        ]
        try:
            done = subprocess.run(
                command,
                cwd=cache,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=_MAVEN_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BrokerError(
                f"maven did not resolve Kafka {version} jars within {_MAVEN_TIMEOUT_S:g} s"
            ) from None
        if done.returncode != 0:
            raise BrokerError(
                f"maven could not resolve Kafka {version} jars (exit {done.returncode}): "
                f"{_maven_reason(done.stdout + done.stderr)}"
            )
        if not any(lib.glob(f"kafka_2.13-{version}.jar")):
            raise BrokerError(f"maven succeeded but {lib} has no kafka_2.13-{version}.jar")
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(digest + "\n")
        tmp.replace(marker)
    return lib


def _maven_reason(output: str) -> str:
    """The first [ERROR] line names the cause; the ones after it are Maven's generic advice."""
    for raw in output.splitlines():
        line = raw.replace("\x1b[0m", "").strip()
        if line.startswith("[ERROR]") and line != "[ERROR]":
            return line.removeprefix("[ERROR]").removesuffix("-> [Help 1]").strip()
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


# ----------------------------------------------------------------------------------- wire protocol
#
# A raw Metadata request instead of a client library: it is synchronous, has no logging of its own, and
# a non-empty broker list is the exact signal that the broker finished starting (before that the port
# accepts connections but nothing answers).

_API_METADATA = 3
_API_VERSIONS = 18
_CLIENT_ID = b"eyrie-probe"
_METADATA_MIN, _METADATA_MAX = 1, 8  # v1..v8 share one non-flexible layout that the parser below reads


class _ProtocolError(Exception):
    pass


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise _ProtocolError("truncated response")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def skip_string(self) -> None:
        length = self.take(">h")
        self.pos += max(length, 0)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise _ProtocolError("connection closed mid-response")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _request(sock: socket.socket, api_key: int, version: int, correlation: int, body: bytes) -> _Reader:
    header = struct.pack(">hhih", api_key, version, correlation, len(_CLIENT_ID)) + _CLIENT_ID
    sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
    reader = _Reader(_recv_exactly(sock, size))
    if reader.take(">i") != correlation:
        raise _ProtocolError("correlation id mismatch")
    return reader


def _metadata_broker_count(host: str, port: int, timeout: float) -> int:
    """Ask one address for cluster metadata; the number of brokers it reports (0 while starting)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        # ApiVersions v0 is answered by every broker ever released; it tells us which Metadata to send.
        versions = _request(sock, _API_VERSIONS, 0, 1, b"")
        if (error := versions.take(">h")) != 0:
            raise _ProtocolError(f"ApiVersions error {error}")
        metadata_range = None
        for _ in range(versions.take(">i")):
            key, low, high = versions.take(">h"), versions.take(">h"), versions.take(">h")
            if key == _API_METADATA:
                metadata_range = (low, high)
        if metadata_range is None:
            raise _ProtocolError("broker does not offer Metadata")
        version = min(metadata_range[1], _METADATA_MAX)
        if version < max(metadata_range[0], _METADATA_MIN):
            raise _ProtocolError(f"no common Metadata version in {metadata_range}")
        body = struct.pack(">i", 0)  # an empty topic list: brokers only, no topic metadata
        if version >= 4:
            body += b"\x00"  # allow_auto_topic_creation
        if version >= 8:
            body += b"\x00\x00"  # include cluster / topic authorized operations
        reply = _request(sock, _API_METADATA, version, 2, body)
        if version >= 3:
            reply.take(">i")  # throttle_time_ms
        brokers = reply.take(">i")
        for _ in range(brokers):
            reply.take(">i")  # node id
            reply.skip_string()  # host
            reply.take(">i")  # port
            reply.skip_string()  # rack
        return max(brokers, 0)


def _answers(host: str, port: int, timeout: float = _PROBE_TIMEOUT_S) -> bool:
    try:
        return _metadata_broker_count(host, port, timeout) > 0
    except (OSError, _ProtocolError):
        return False


def _split_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    addresses = []
    for raw in bootstrap.split(","):
        address = raw.strip().split("://", 1)[-1]
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise BrokerError(f"bad bootstrap address {raw.strip()!r} in {bootstrap!r}: expected HOST:PORT")
        addresses.append((host.strip("[]"), int(port)))
    return addresses


def wait_until_answering(bootstrap: str, timeout: float) -> None:
    """Block until some address in `bootstrap` answers a Metadata request with at least one broker."""
    addresses = _split_bootstrap(bootstrap)
    deadline = time.monotonic() + timeout
    while True:
        if any(_answers(host, port, min(_PROBE_TIMEOUT_S, timeout)) for host, port in addresses):
            return
        if time.monotonic() >= deadline:
            raise BrokerError(
                f"no Kafka broker answered a metadata request at {bootstrap} within {timeout:g} s"
            )
        time.sleep(_POLL_S)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing was bound to a moment ago."""
    return _free_ports(1)[0]


def _free_ports(count: int) -> list[int]:
    # All sockets stay open until every port is picked, so the kernel cannot hand out one port twice.
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((HOST, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def _port_taken(port: int) -> bool:
    # SO_REUSEADDR mirrors what the JVM sets, so sockets left in TIME_WAIT by a broker that just stopped
    # do not count as taken, while a live listener or bound socket does.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
        return False


# -------------------------------------------------------------------------------------- local broker


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """What `LocalBroker.status` found. `answering` is only ever true for a running broker."""

    running: bool
    pid: int | None
    bootstrap: str
    answering: bool


class LocalBroker:
    """One Kafka node (KRaft broker + controller) whose state lives in `data_dir`.

    The pid file in the data directory is the only link between `up` in one process and `down` or
    `status` in another; a pid is trusted only while its command line still names this data directory,
    so a stale file after a reboot or pid reuse reads as "not running".
    """

    def __init__(
        self, port: int = DEFAULT_PORT, data_dir: Path | str | None = None, controller_port: int | None = None
    ) -> None:
        self.port = port
        self.controller_port = port + 1 if controller_port is None else controller_port
        if self.controller_port == port:
            raise BrokerError(f"controller port must differ from the broker port {port}")
        self.data_dir = (
            Path(data_dir if data_dir is not None else default_data_dir(port)).expanduser().resolve()
        )
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    def __repr__(self) -> str:
        return f"LocalBroker(port={self.port}, data_dir='{self.data_dir}', controller={self.controller_port})"

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "broker.log"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "broker.pid"

    @property
    def _properties(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def _stdout_file(self) -> Path:
        # JVM-level failures (bad flags, missing classes) never reach log4j; they land here.
        return self.data_dir / "broker.out"

    # ------------------------------------------------------------------------------------- public

    def status(self) -> BrokerStatus:
        pid = self._running_pid()
        answering = pid is not None and _answers(HOST, self.port)
        return BrokerStatus(running=pid is not None, pid=pid, bootstrap=self.bootstrap, answering=answering)

    def up(self, timeout: float = 30.0) -> str:
        """Start the broker unless it already runs; return its bootstrap address once it answers.

        `timeout` bounds the wait for readiness after launch; resolving the jars on first use (Maven) and
        formatting storage are not counted. A broker this call launched that then fails to answer in time
        is stopped again, so a failed `up` leaves nothing behind.
        """
        java = _java()
        with _file_lock(self.data_dir / ".lock", timeout + 30.0, f"starting the broker in {self.data_dir}"):
            pid = self._running_pid()
            if pid is not None:
                if _answers(HOST, self.port):
                    return self.bootstrap
                self._wait_ready(pid, timeout, launched=False)
                return self.bootstrap
            for port, what in ((self.port, "port"), (self.controller_port, "controller port")):
                if _port_taken(port):
                    option = "--port" if what == "port" else "--controller-port"
                    raise BrokerError(f"{what} {port} on {HOST} is in use by another process; pass {option}")
            lib = resolve_jars()
            self._write_config()
            if not (self.data_dir / "logs" / "meta.properties").is_file():
                self._format(java, lib)
            pid = self._launch(java, lib)
            self._wait_ready(pid, timeout, launched=True)
            return self.bootstrap

    def down(self, timeout: float = 15.0) -> bool:
        """Stop the broker: SIGTERM, then SIGKILL after `timeout` s. False if nothing was running."""
        pid = self._running_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not self._wait_gone(pid, timeout):
            log.warning("broker pid %d ignored SIGTERM for %g s; killing it", pid, timeout)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if not self._wait_gone(pid, _STOP_GRACE_AFTER_KILL_S):
                raise BrokerError(f"broker pid {pid} survived SIGKILL; check it with ps")
        self.pid_file.unlink(missing_ok=True)
        self._proc = None
        return True

    # ------------------------------------------------------------------------------------ process

    def _alive(self, pid: int) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            # Reaps our own child; otherwise it would linger as a zombie that still "exists".
            return self._proc.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return self._is_ours(pid)

    def _is_ours(self, pid: int) -> bool:
        if Path("/proc/self/cmdline").exists():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                return False
            # A zombie has an empty command line, so it reads as gone, which is what it is.
            command = " ".join(part.decode(errors="replace") for part in argv)
        else:
            # No /proc (macOS): ps prints the same command line.
            done = subprocess.run(
                ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, check=False
            )
            command = done.stdout
        return "kafka.Kafka" in command and str(self._properties) in command

    def _running_pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if self._alive(pid) else None

    def _wait_gone(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self._alive(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)
        return True

    def _classpath_options(self, lib: Path) -> list[str]:
        return [
            f"-Dlog4j.configuration={(self.data_dir / 'log4j.properties').as_uri()}",
            f"-Dkafka.logs.dir={self.data_dir}",
            "-cp",
            f"{lib}/*",
        ]

    def _write_config(self) -> None:
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "log4j.properties").write_bytes(_packaged("log4j.properties"))
        # Rewritten on every start so a changed port or setting here takes effect on the next `up`.
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{HOST}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # No other consumer will join a test group, so waiting for one only slows every test down.
            "group.initial.rebalance.delay.ms": "0",
            # Topics are created on purpose by the pipeline; a typo must fail, not make a new topic.
            "auto.create.topics.enable": "false",
            # Sized for a two-core laptop or CI runner rather than a production host.
            "num.network.threads": "2",
            "num.io.threads": "4",
            "background.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
            # The cleaner's dedupe buffer defaults to 128 MiB, a quarter of this 512 MiB heap.
            "log.cleaner.dedupe.buffer.size": str(32 * 1024 * 1024),
            "log.cleaner.threads": "1",
        }
        text = "".join(f"{key}={value}\n" for key, value in settings.items())
        self._properties.write_text("# Written by streams/broker.py on every start; edits are lost.\n" + text)

    def _format(self, java: str, lib: Path) -> None:
        command = [
            java,
            *self._classpath_options(lib),
            "kafka.tools.StorageTool",
            "format",
            "--ignore-formatted",
            "-t",
            _new_cluster_id(),
            "-c",
            str(self._properties),
        ]
        done = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
            raise BrokerError(
                f"formatting Kafka storage in {self.data_dir / 'logs'} failed (exit {done.returncode}): "
                f"{lines[-1] if lines else 'no output'}"
            )

    def _launch(self, java: str, lib: Path) -> int:
        command = [java, *_JVM_OPTIONS, *self._classpath_options(lib), "kafka.Kafka", str(self._properties)]
        self._log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        with self._stdout_file.open("wb") as out:
            # A new session keeps Ctrl-C in the launching terminal (and its exit) away from the broker.
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        tmp = self.pid_file.with_suffix(".tmp")
        tmp.write_text(f"{self._proc.pid}\n")
        tmp.replace(self.pid_file)
        log.info("started Kafka %s broker pid %d on %s", KAFKA_VERSION, self._proc.pid, self.bootstrap)
        return self._proc.pid

    def _wait_ready(self, pid: int, timeout: float, *, launched: bool) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not self._alive(pid):
                code = self._proc.returncode if self._proc is not None and self._proc.pid == pid else None
                self.pid_file.unlink(missing_ok=True)
                exited = f"exited with code {code}" if code is not None else "exited"
                raise BrokerError(
                    f"broker {exited} before answering on {self.bootstrap}: {self._failure_summary()} "
                    f"(full log: {self.log_file})"
                )
            if _answers(HOST, self.port):
                return
            if time.monotonic() >= deadline:
                if launched:
                    self.down()
                raise BrokerError(
                    f"broker on {self.bootstrap} did not answer within {timeout:g} s"
                    f"{'; stopped it' if launched else ''} (log: {self.log_file})"
                )
            time.sleep(_POLL_S)

    def _failure_summary(self, keep: int = 3) -> str:
        """The last error lines this launch logged, on one line so the CLI can print it as is.

        Reading starts at the offset noted at launch because broker.log is appended to across runs, and
        an old run's errors would send the reader after the wrong problem.
        """
        lines: list[str] = []
        for path, offset in ((self.log_file, self._log_offset), (self._stdout_file, 0)):
            with contextlib.suppress(OSError), path.open("rb") as handle:
                handle.seek(offset if offset <= path.stat().st_size else 0)
                lines += handle.read().decode(errors="replace").splitlines()
        lines = [_LOG_PREFIX.sub("", line).strip() for line in lines]
        lines = [line for line in lines if line and not line.startswith("at ")]
        # Exception messages follow their ERROR line without a log prefix; those carry the real cause.
        errors = [line for line in lines if _ERROR_LINE.search(line)]
        chosen = (errors or lines)[-keep:]
        return " | ".join(_shorten(line) for line in chosen) or "no log output"


def _shorten(line: str, limit: int = 300) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _new_cluster_id() -> str:
    """A Kafka cluster id: a random UUID in unpadded URL-safe base64, as `StorageTool random-uuid` prints.

    Made here to save a JVM start; a leading '-' is avoided because the id is passed as an argument.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


# ---------------------------------------------------------------------------------------- resolution

_active: list[str] = []


def _docker_answers(timeout: float = 2.0) -> bool:
    try:
        import docker

        client = docker.from_env(timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        # No SDK, no socket, a daemon that refuses us: all mean "no Docker" here, never an error.
        return False


def describe_resolution() -> str:
    """Which broker `resolved_broker` uses: the live one if inside it, else the one it would pick."""
    if _active:
        return _active[-1]
    if bootstrap := os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        return f"KAFKA_BOOTSTRAP_SERVERS={bootstrap}"
    if _docker_answers():
        return f"testcontainers ({TESTCONTAINERS_IMAGE})"
    return f"local broker (Kafka {KAFKA_VERSION}, free port picked at start)"


@contextlib.contextmanager
def resolved_broker(timeout: float = 60.0) -> Iterator[str]:
    """Yield a bootstrap address for a working broker; stop whatever was started here on exit."""
    if bootstrap := os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        with _describing(f"KAFKA_BOOTSTRAP_SERVERS={bootstrap}"):
            yield bootstrap
        return
    if _docker_answers():
        from testcontainers.community.kafka import KafkaContainer

        container = KafkaContainer(TESTCONTAINERS_IMAGE).with_kraft()
        container.start(timeout=int(timeout))
        try:
            bootstrap = str(container.get_bootstrap_server())
            with _describing(f"testcontainers {TESTCONTAINERS_IMAGE} on {bootstrap}"):
                yield bootstrap
        finally:
            container.stop()
        return
    with tempfile.TemporaryDirectory(prefix="eyrie-broker-") as tmp:
        port, controller_port = _free_ports(2)
        broker = LocalBroker(port=port, data_dir=tmp, controller_port=controller_port)
        try:
            bootstrap = broker.up(timeout=timeout)
            with _describing(f"local broker on {bootstrap}"):
                yield bootstrap
        finally:
            broker.down()


@contextlib.contextmanager
def _describing(description: str) -> Iterator[None]:
    log.info("Kafka broker: %s", description)
    _active.append(description)
    try:
        yield
    finally:
        _active.remove(description)
