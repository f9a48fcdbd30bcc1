"""A real Apache Kafka broker for development and tests, and the rule that picks which broker to use.

`LocalBroker` runs Kafka as a single KRaft node (broker and controller in one JVM) straight from the
jars, so the only prerequisites are Java and Maven: Maven fetches the jars once into a cache outside the
repository, and nothing needs Docker or a Kafka download. With `sasl_ssl_port` it also opens a ``SASL_SSL``
listener (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 over TLS) beside the PLAINTEXT one, for testing the
clients' security settings: its key store and CA are made with the JDK's ``keytool`` on first use.

`resolved_broker` picks a broker for tests and the demo, first match wins:

1. ``KAFKA_BOOTSTRAP_SERVERS`` when set, used as is;
2. for the demo only (``reuse_local``), a broker already answering on 127.0.0.1:9092, whoever started it;
3. a testcontainers Kafka when a Docker daemon answers;
4. a `LocalBroker` on a free port in a temporary directory, removed on exit.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import socket
import struct
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from schemas.exceptions import BrokerError, ToolMissing
from streams.local import services
from streams.local.services import HOST, free_port, free_ports

__all__ = [
    "COMPILER_NICE",
    "COMPILER_THREAD_NAMES",
    "DEFAULT_PORT",
    "DEFAULT_SASL_USER",
    "HOST",
    "KAFKA_VERSION",
    "SASL_MECHANISMS",
    "TESTCONTAINERS_IMAGE",
    "BrokerStatus",
    "LocalBroker",
    "PortProbe",
    "default_data_dir",
    "describe_resolution",
    "free_port",
    "free_ports",
    "jar_cache_dir",
    "probe_port",
    "resolve_jars",
    "resolved_broker",
    "wait_until_answering",
]

log = logging.getLogger(__name__)

KAFKA_VERSION = "3.9.1"
DEFAULT_PORT = 9092
# The testcontainers Kafka module drives Confluent's image entry scripts, so an apache/kafka image would
# not boot under it; 7.7.1 ships Kafka 3.7 and supports KRaft.
TESTCONTAINERS_IMAGE = "confluentinc/cp-kafka:7.7.1"

_JVM_OPTIONS = (
    "-Xms256m",
    "-Xmx512m",
    # The throughput collector: no concurrent refinement or marking threads and cheaper write barriers
    # than G1, and a young collection of this small heap is a few milliseconds. With it and the thread
    # counts below, the broker's CPU at 500 pods/s fell from 0.37 to 0.33-0.34 of a core, and the time its
    # threads waited for a CPU from 0.79 to 0.64-0.67 (docs/pipeline-performance.md).
    "-XX:+UseParallelGC",
    # Compile hot code after a tenth of the usual invocations. With the defaults, a broker started for a
    # run was still compiling a minute in: its compiler threads took 2.7-3.5 s of CPU over the 10 s
    # latency phase of `bench.pipeline` (half the broker's CPU, on 2 cores shared with the pipeline),
    # and p99 at 500 pods/s was 112-198 ms against 38-76 on a broker that had served runs before. With
    # 0.1: 0.6-1.4 s and 62-89 ms, for 0.7 s more to start (docs/pipeline-performance.md).
    "-XX:CompileThresholdScaling=0.1",
    # Every compiler thread from the start, so `_yield_to_compiled_code` finds them all.
    "-XX:-UseDynamicNumberOfCompilerThreads",
    # An out-of-memory broker that lingers half-alive is worse than one that dies and shows in status.
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
COMPILER_NICE = 10
"""The nice value of the broker's JIT compiler threads (`_yield_to_compiled_code`)."""
COMPILER_THREAD_NAMES = ("C1 CompilerThre", "C2 CompilerThre")
"""How the JVM's JIT compiler threads start their names in /proc (Linux cuts a thread's name at 15 bytes)."""
_MAVEN_TIMEOUT_S = 600.0
_TOOL_TIMEOUT_S = 120.0
_PROBE_TIMEOUT_S = 1.0
_LOG_PREFIX = re.compile(r"^\[[^\]]*\] ")  # the "[timestamp] " that log4j puts before each line
_ERROR_LINE = re.compile(r"^(ERROR|FATAL) |^[\w.$]+(Exception|Error)\b|^Error:|^Caused by:")
_POLL_S = 0.1

DEFAULT_SASL_USER = "eyrie"
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
"""What the local broker's SASL_SSL listener accepts."""
_SCRAM_ITERATIONS = 4096  # Kafka's minimum for SCRAM-SHA-512
_USER_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# Passwords go into a JAAS line inside a Java properties file (ISO-8859-1, backslash escapes): printable
# ASCII without spaces, quotes or backslashes needs no escaping in either.
_PASSWORD_TEXT = re.compile(r"^[!#-\[\]-~]{1,256}$")
# keytool is a short JVM run: the client compiler alone and a serial GC start it about a third faster.
_KEYTOOL_OPTIONS = ("-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC")
_KEYTOOL_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------------------------- paths


def default_data_dir(port: int = DEFAULT_PORT) -> Path:
    """Where `LocalBroker` keeps logs and metadata unless told otherwise: one directory per port."""
    return services.eyrie_home() / f"broker-{port}"


def jar_cache_dir(version: str = KAFKA_VERSION) -> Path:
    """The per-user jar cache, kept across clones and `make clean`."""
    return services.cache_dir(f"kafka-{version}")


def _packaged(name: str) -> bytes:
    return (resources.files("streams.local") / "kafka" / name).read_bytes()


# --------------------------------------------------------------------------------------------- tools


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(Path(java_home) / "bin" / "java", os.X_OK):
        return str(Path(java_home) / "bin" / "java")
    hint = (
        "install a JDK 17+ (apt-get install openjdk-17-jre-headless, brew install openjdk@17) "
        "or set JAVA_HOME"
    )
    return services.find_tool("java", hint, ToolMissing)


def _keytool(java: str) -> str:
    beside = Path(java).resolve().parent / "keytool"
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("keytool")
    if found is None:
        raise ToolMissing(
            "keytool not found next to java or on PATH: the SASL_SSL listener needs a full JDK/JRE"
        )
    return found


def _mvn() -> str:
    hint = "install Maven 3.6+ (apt-get install maven, brew install maven); it fetches the Kafka jars once"
    return services.find_tool("mvn", hint, ToolMissing)


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
    with services.file_lock(
        cache / ".lock", _MAVEN_TIMEOUT_S, f"resolving Kafka {version} jars", BrokerError, poll=_POLL_S
    ):
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
            done = services.run_captured(command, timeout=_MAVEN_TIMEOUT_S, cwd=cache)
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
        services.write_replacing(marker, digest + "\n")
    return lib


def _maven_reason(output: str) -> str:
    """The first [ERROR] line names the cause; the ones after it are Maven's generic advice."""
    for raw in output.splitlines():
        line = raw.replace("\x1b[0m", "").strip()
        if line.startswith("[ERROR]") and line != "[ERROR]":
            return line.removeprefix("[ERROR]").removesuffix("-> [Help 1]").strip()
    return services.last_lines(output)


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

    def string(self) -> str | None:
        length = self.take(">h")
        if length < 0:
            return None
        if self.pos + length > len(self.data):
            raise _ProtocolError("truncated response")
        text = self.data[self.pos : self.pos + length].decode(errors="replace")
        self.pos += length
        return text


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
    return _metadata(host, port, timeout)[0]


def _metadata(host: str, port: int, timeout: float) -> tuple[int, str | None]:
    """Ask one address for cluster metadata: (brokers it reports, 0 while starting; its cluster id)."""
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
        cluster_id = reply.string() if version >= 2 else None
        return max(brokers, 0), cluster_id


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
    """Block until some address in `bootstrap` answers a Metadata request with at least one broker.

    The probe speaks PLAINTEXT only (no TLS, no SASL): give it a PLAINTEXT listener. `LocalBroker` always
    has one, also when it runs a SASL_SSL listener, and probes only that one.
    """
    addresses = _split_bootstrap(bootstrap)

    def answering() -> bool:
        return any(_answers(host, port, min(_PROBE_TIMEOUT_S, timeout)) for host, port in addresses)

    if not services.poll_until(answering, timeout, _POLL_S):
        raise BrokerError(f"no Kafka broker answered a metadata request at {bootstrap} within {timeout:g} s")


# ------------------------------------------------------------------------------------- port probe


@dataclass(frozen=True, slots=True)
class PortProbe:
    """Who serves a port on 127.0.0.1, whatever started it: `probe_port`'s answer."""

    bootstrap: str
    listening: bool
    """Something accepts connections on the port."""
    answering: bool
    """...and answers a Kafka Metadata request with at least one broker."""
    cluster_id: str | None = None
    pid: int | None = None
    """The listening process, when this machine shows it (Linux, a process this user may inspect)."""
    command: str | None = None
    """Its program's name (``java``, ``docker-proxy``, ...)."""
    data_dir: Path | None = None
    """The data directory of a broker that `eyrie broker up` started, read from its command line."""

    def describe(self) -> str:
        """Who it is: ``cluster C, pid N, data: DIR``, or ``cluster C, pid N (docker-proxy)``."""
        parts = [f"cluster {self.cluster_id}"] if self.cluster_id else []
        if self.pid is not None and self.data_dir is not None:
            parts.append(f"pid {self.pid}, data: {self.data_dir}")
        elif self.pid is not None:
            parts.append(f"pid {self.pid} ({self.command or 'unknown program'})")
        else:
            parts.append("its process is not visible from here")
        return ", ".join(parts)


def probe_port(port: int, timeout: float = _PROBE_TIMEOUT_S) -> PortProbe:
    """Whether a Kafka broker serves `port` on 127.0.0.1, and who it is, without any pid file: a broker
    started from another data directory (another ``EYRIE_HOME``), by Docker or by hand is found too."""
    bootstrap = f"{HOST}:{port}"
    try:
        brokers, cluster_id = _metadata(HOST, port, timeout)
    except OSError:
        # Refused: nothing listens. Timed out or reset: something does, and it is not a working broker.
        listening, answering, cluster_id = services.port_taken(port), False, None
    except _ProtocolError:
        listening, answering, cluster_id = True, False, None
    else:
        listening, answering = True, brokers > 0
    pid, command, data_dir = _listener(port) if listening else (None, None, None)
    return PortProbe(bootstrap, listening, answering, cluster_id, pid, command, data_dir)


def _listener(port: int) -> tuple[int | None, str | None, Path | None]:
    """(pid, program, data directory of a broker that `eyrie broker up` started) of whatever listens on
    `port`, from /proc: the socket's inode in /proc/net/tcp*, then the process holding it."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local_address is HEXIP:HEXPORT; state 0A is LISTEN.
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rpartition(":")[2], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None, None, None
    for process in Path("/proc").glob("[0-9]*"):
        try:
            holds = any(os.readlink(fd) in inodes for fd in (process / "fd").iterdir())
            argv = (process / "cmdline").read_bytes().split(b"\0") if holds else []
        except OSError:
            continue  # gone, or not this user's to inspect
        if holds:
            args = [part.decode(errors="replace") for part in argv if part]
            command = Path(args[0]).name if args else None
            is_local = "kafka.Kafka" in args and args[-1].endswith("server.properties")
            return int(process.name), command, Path(args[-1]).parent if is_local else None
    return None, None, None


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
        self,
        port: int = DEFAULT_PORT,
        data_dir: Path | str | None = None,
        controller_port: int | None = None,
        *,
        sasl_ssl_port: int | None = None,
        sasl_users: Mapping[str, str | None] | None = None,
    ) -> None:
        """`sasl_ssl_port` adds a SASL_SSL listener; `sasl_users` maps user names to passwords, where None
        (and the default, one user ``eyrie``) means a random password kept in `password_file(user)`."""
        self.port = port
        self.controller_port = port + 1 if controller_port is None else controller_port
        if self.controller_port == port:
            raise BrokerError(f"controller port must differ from the broker port {port}")
        if sasl_ssl_port is not None and sasl_ssl_port in (port, self.controller_port):
            raise BrokerError(
                f"SASL_SSL port {sasl_ssl_port} must differ from the broker and controller ports"
            )
        self.sasl_ssl_port = sasl_ssl_port
        users = dict(sasl_users) if sasl_users is not None else {DEFAULT_SASL_USER: None}
        if sasl_ssl_port is not None and not users:
            raise BrokerError("a SASL_SSL listener needs at least one user")
        for name, password in users.items():
            if not _USER_NAME.fullmatch(name):
                raise BrokerError(f"SASL user name {name!r}: use 1-64 letters, digits, '.', '_' or '-'")
            if password is not None and not _PASSWORD_TEXT.fullmatch(password):
                # Never echo the password itself, not even in an error.
                raise BrokerError(
                    f"password of SASL user {name}: use 1-256 printable ASCII characters without spaces, "
                    "quotes or backslashes"
                )
        self._sasl_users = users
        self.data_dir = (
            Path(data_dir if data_dir is not None else default_data_dir(port)).expanduser().resolve()
        )
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    def __repr__(self) -> str:
        secured = f", sasl_ssl={self.sasl_ssl_port}" if self.sasl_ssl_port is not None else ""
        return (
            f"LocalBroker(port={self.port}, data_dir='{self.data_dir}', controller={self.controller_port}"
            f"{secured})"
        )

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def sasl_ssl_bootstrap(self) -> str | None:
        return f"{HOST}:{self.sasl_ssl_port}" if self.sasl_ssl_port is not None else None

    @property
    def security_dir(self) -> Path:
        return self.data_dir / "security"

    @property
    def ca_file(self) -> Path:
        """The PEM certificate of the CA that signed the SASL_SSL listener's certificate (``ssl_cafile``)."""
        return self.security_dir / "ca.pem"

    def password_file(self, user: str) -> Path:
        """Where a user without a given password finds the one generated for it."""
        return self.security_dir / f"{user}.password"

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

    def recorded_port(self) -> int | None:
        """The plain listener's port in this data directory's ``server.properties`` (written by `up`), or
        None before the first start."""
        try:
            lines = self._properties.read_text(encoding="utf-8").splitlines()
        except OSError:
            return None
        for line in lines:
            key, _, value = line.partition("=")
            if key.strip() == "listeners":
                for listener in value.split(","):
                    name, _, address = listener.strip().partition("://")
                    port = address.rpartition(":")[2]
                    if name == "PLAINTEXT" and port.isdigit():
                        return int(port)
        return None

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
        starting = f"starting the broker in {self.data_dir}"
        with services.file_lock(self.data_dir / ".lock", timeout + 30.0, starting, BrokerError, poll=_POLL_S):
            pid = self._running_pid()
            if pid is not None:
                if self.sasl_ssl_port is not None and not self._running_config_matches():
                    raise BrokerError(
                        f"the broker in {self.data_dir} already runs (pid {pid}) without this SASL_SSL "
                        "listener or these users; stop it with `eyrie broker down` first"
                    )
                if _answers(HOST, self.port):
                    return self.bootstrap
                self._wait_ready(pid, timeout, launched=False)
                return self.bootstrap
            ports = [
                (self.port, "port", "--port"),
                (self.controller_port, "controller port", "--controller-port"),
            ]
            if self.sasl_ssl_port is not None:
                ports.append((self.sasl_ssl_port, "SASL_SSL port", "--sasl-ssl-port"))
            services.require_free_ports(ports, BrokerError)
            lib = resolve_jars()
            if self.sasl_ssl_port is not None:
                self._ensure_tls_material(java)
            self._write_config()
            if not (self.data_dir / "logs" / "meta.properties").is_file():
                self._format(java, lib)
            pid = self._launch(java, lib)
            self._wait_ready(pid, timeout, launched=True)
            _yield_to_compiled_code(pid)
            if self.sasl_ssl_port is not None:
                self._ensure_scram_users(java, lib)
            return self.bootstrap

    def down(self, timeout: float = 15.0) -> bool:
        """Stop the broker: SIGTERM, then SIGKILL after `timeout` s. False if nothing was running."""
        pid = self._running_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        services.stop_process(pid, "broker", self._alive, timeout, BrokerError, poll=_POLL_S)
        self.pid_file.unlink(missing_ok=True)
        self._proc = None
        return True

    # ------------------------------------------------------------------------------------ process

    def _alive(self, pid: int) -> bool:
        child = self._proc if self._proc is not None and self._proc.pid == pid else None
        return services.process_alive(pid, child, ("kafka.Kafka", str(self._properties)))

    def _running_pid(self) -> int | None:
        return services.running_pid(self.pid_file, self._alive)

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
        # Private: with a SASL_SSL listener it holds the key store password and the PLAIN users' passwords.
        services.write_private(self._properties, self._config_text())

    def _config_text(self) -> str:
        listeners = f"PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}"
        advertised = f"PLAINTEXT://{HOST}:{self.port}"
        protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        if self.sasl_ssl_port is not None:
            listeners += f",SASL_SSL://{HOST}:{self.sasl_ssl_port}"
            advertised += f",SASL_SSL://{HOST}:{self.sasl_ssl_port}"
            protocols += ",SASL_SSL:SASL_SSL"
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{HOST}:{self.controller_port}",
            "listeners": listeners,
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": protocols,
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
            # Each request crosses from a network thread to an I/O thread and back: on two cores shared
            # with the pipeline, more threads only wait for a CPU and for each other.
            "num.network.threads": "1",
            "num.io.threads": "2",
            "background.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
            # The cleaner's dedupe buffer defaults to 128 MiB, a quarter of this 512 MiB heap.
            "log.cleaner.dedupe.buffer.size": str(32 * 1024 * 1024),
            "log.cleaner.threads": "1",
            # How soon disk follows state. Segments wholly behind a DeleteRecords (the sequencer behind its
            # checkpoints) are freed at the retention check, every 5 minutes by default; the cleaner looks
            # for compactable changelogs every 15 s. Both are cheap with this broker's few partitions, and
            # checked this often a test or a benchmark sees the bytes go within seconds.
            "log.retention.check.interval.ms": "10000",
            "log.cleaner.backoff.ms": "5000",
            # Inter-broker traffic and the start-up probe stay on PLAINTEXT: the secured listener only
            # serves clients, and the rest of the suite sees the same broker with or without it.
            **(self._sasl_ssl_settings() if self.sasl_ssl_port is not None else {}),
        }
        text = "".join(f"{key}={value}\n" for key, value in settings.items())
        return "# Written by streams/local/broker.py on every start; edits are lost.\n" + text

    def _sasl_ssl_settings(self) -> dict[str, str]:
        prefix = "listener.name.sasl_ssl."
        store_password = self._secret_file(self.security_dir / "store.password")
        plain_users = " ".join(f'user_{name}="{password}"' for name, password in self._passwords().items())
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return {
            "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
            f"{prefix}sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
            f"{prefix}plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
            ),
            # SCRAM users live in the cluster metadata (added at format time or by `_ensure_scram_users`).
            f"{prefix}scram-sha-256.sasl.jaas.config": scram,
            f"{prefix}scram-sha-512.sasl.jaas.config": scram,
            f"{prefix}ssl.keystore.type": "PKCS12",
            f"{prefix}ssl.keystore.location": str(self.security_dir / "server.p12"),
            f"{prefix}ssl.keystore.password": store_password,
            f"{prefix}ssl.key.password": store_password,
            f"{prefix}ssl.client.auth": "none",
        }

    # ------------------------------------------------------------------------------------ security

    def _secret_file(self, path: Path) -> str:
        """The secret in `path`, made (random, private) on first use."""
        with contextlib.suppress(FileNotFoundError):
            text = path.read_text(encoding="ascii").strip()
            if text:
                return text
        secret = secrets.token_urlsafe(24)
        services.write_private(path, secret + "\n")
        return secret

    def _passwords(self) -> dict[str, str]:
        return {
            name: password if password is not None else self._secret_file(self.password_file(name))
            for name, password in self._sasl_users.items()
        }

    def _running_config_matches(self) -> bool:
        if not (self.security_dir / "server.p12").is_file():
            return False
        try:
            return self._properties.read_text() == self._config_text()
        except OSError:
            return False

    def _ensure_tls_material(self, java: str) -> None:
        """A CA and a server certificate it signed (for 127.0.0.1 and localhost), made once per data dir.

        A real CA rather than one self-signed server certificate, so clients verify the broker the way they
        would in production (a CA file, hostname checks on).
        """
        store, ca_pem = self.security_dir / "server.p12", self.ca_file
        if store.is_file() and ca_pem.is_file():
            return
        keytool = _keytool(java)
        password = self._secret_file(self.security_dir / "store.password")
        work = Path(tempfile.mkdtemp(prefix="tls-", dir=self.security_dir))
        env = {**os.environ, "EYRIE_STORE_PASSWORD": password}  # -storepass:env keeps it out of `ps`
        common = ["-storetype", "PKCS12", "-storepass:env", "EYRIE_STORE_PASSWORD"]
        key = ["-keyalg", "EC", "-groupname", "secp256r1", "-validity", "3650"]  # EC: keygen in milliseconds
        ca, server = str(work / "ca.p12"), str(work / "server.p12")
        ca_out, csr, crt = (str(work / name) for name in ("ca.pem", "server.csr", "server.pem"))
        dname = ["-dname", "CN=eyrie local CA"]
        signed = ["-validity", "3650", "-ext", f"SAN=ip:{HOST},dns:localhost", "-ext", "EKU=serverAuth"]
        steps = [
            ["-genkeypair", "-alias", "ca", "-ext", "bc:c", *key, *dname, "-keystore", ca],
            ["-exportcert", "-rfc", "-alias", "ca", "-keystore", ca, "-file", ca_out],
            ["-genkeypair", "-alias", "broker", *key, "-dname", "CN=localhost", "-keystore", server],
            ["-certreq", "-alias", "broker", "-keystore", server, "-file", csr],
            ["-gencert", "-rfc", "-alias", "ca", "-keystore", ca, "-infile", csr, "-outfile", crt, *signed],
            ["-importcert", "-noprompt", "-alias", "ca", "-file", ca_out, "-keystore", server],
            ["-importcert", "-noprompt", "-alias", "broker", "-file", crt, "-keystore", server],
        ]
        try:
            for step in steps:
                services.run_tool(
                    [keytool, *_KEYTOOL_OPTIONS, *step, *common],
                    f"keytool {step[0]} (making the SASL_SSL listener's certificates)",
                    BrokerError,
                    env=env,
                    timeout=_KEYTOOL_TIMEOUT_S,
                )
            os.chmod(work / "server.p12", 0o600)
            # The store last: its presence is what says the material is complete.
            (work / "ca.pem").replace(ca_pem)
            (work / "server.p12").replace(store)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _scram_arguments(self, passwords: Mapping[str, str]) -> tuple[list[str], dict[str, dict[str, str]]]:
        """`--add-scram` values with salted passwords only (never the password itself on a command line),
        and what `_scram_file` records of them."""
        arguments, record = [], {}
        for name, password in passwords.items():
            salt = secrets.token_bytes(32)
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                salted = _salted_password(mechanism, password, salt)
                arguments.append(
                    f"{mechanism}=[name={name},iterations={_SCRAM_ITERATIONS},"
                    f'salt="{_b64(salt)}",saltedpassword="{_b64(salted)}"]'
                )
            record[name] = {
                "salt": _b64(salt),
                "sha512": _b64(_salted_password("SCRAM-SHA-512", password, salt)),
            }
        return arguments, record

    @property
    def _scram_file(self) -> Path:
        return self.security_dir / "scram.json"

    def _scram_users_outdated(self) -> dict[str, str]:
        """Users whose SCRAM credentials the cluster lacks or holds with another password."""
        try:
            known = json.loads(self._scram_file.read_text())
        except (OSError, ValueError):
            known = {}
        outdated = {}
        for name, password in self._passwords().items():
            entry = known.get(name) if isinstance(known, dict) else None
            try:
                same = (
                    entry is not None
                    and _b64(_salted_password("SCRAM-SHA-512", password, base64.b64decode(entry["salt"])))
                    == entry["sha512"]
                )
            except (KeyError, TypeError, ValueError):
                same = False
            if not same:
                outdated[name] = password
        return outdated

    def _record_scram(self, record: Mapping[str, Mapping[str, str]]) -> None:
        try:
            known = json.loads(self._scram_file.read_text())
        except (OSError, ValueError):
            known = {}
        services.write_private(
            self._scram_file, json.dumps({**known, **record}, indent=1, sort_keys=True) + "\n"
        )

    def _ensure_scram_users(self, java: str, lib: Path) -> None:
        """Add or update SCRAM users through the running broker (a data dir formatted without them, or a
        changed password), with Kafka's ConfigCommand over the PLAINTEXT listener."""
        for name, password in self._scram_users_outdated().items():
            request = self.security_dir / f".scram-{name}.properties"
            # One run per mechanism: given both in one file, ConfigCommand sends the user twice in one
            # request and the broker refuses it (DuplicateResourceException).
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                # The file keeps the password off the command line; ConfigCommand salts it itself.
                services.write_private(
                    request, f"{mechanism}=iterations={_SCRAM_ITERATIONS},password={password}\n"
                )
                command = [
                    java,
                    *self._classpath_options(lib),
                    "kafka.admin.ConfigCommand",
                    *("--bootstrap-server", self.bootstrap, "--alter", "--entity-type", "users"),
                    *("--entity-name", name, "--add-config-file", str(request)),
                ]
                try:
                    adding = f"adding {mechanism} user {name} to the broker on {self.bootstrap}"
                    services.run_tool(command, adding, BrokerError, timeout=_TOOL_TIMEOUT_S)
                finally:
                    request.unlink(missing_ok=True)
            # Only for `_scram_users_outdated` to recognise the password later; the broker has its own salt.
            salt = secrets.token_bytes(32)
            sha512 = _salted_password("SCRAM-SHA-512", password, salt)
            self._record_scram({name: {"salt": _b64(salt), "sha512": _b64(sha512)}})

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
        record: dict[str, dict[str, str]] = {}
        if self.sasl_ssl_port is not None:
            # SCRAM credentials are cluster metadata in KRaft: written into the bootstrap snapshot here, they
            # exist before the first client connects.
            arguments, record = self._scram_arguments(self._passwords())
            for argument in arguments:
                command += ["--add-scram", argument]
        formatting = f"formatting Kafka storage in {self.data_dir / 'logs'}"
        services.run_tool(command, formatting, BrokerError, timeout=_TOOL_TIMEOUT_S)
        if record:
            self._record_scram(record)

    def _launch(self, java: str, lib: Path) -> int:
        command = [java, *_JVM_OPTIONS, *self._classpath_options(lib), "kafka.Kafka", str(self._properties)]
        self._log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        with self._stdout_file.open("wb") as out:
            # A process group of its own keeps Ctrl-C in the launching terminal away from the broker. Not a
            # session of its own: Linux's autogroup scheduling gives each session an equal share, so the
            # broker alone weighed as much as the worker, applier and benchmark together, and lowering its
            # compilers' priority (`_yield_to_compiled_code`) only shifted CPU among its own threads.
            self._proc = services.launch(command, out, self.pid_file, process_group=0)
        log.info("started Kafka %s broker pid %d on %s", KAFKA_VERSION, self._proc.pid, self.bootstrap)
        return self._proc.pid

    def _wait_ready(self, pid: int, timeout: float, *, launched: bool) -> None:
        def answering() -> bool:
            if not self._alive(pid):
                code = self._proc.returncode if self._proc is not None and self._proc.pid == pid else None
                self.pid_file.unlink(missing_ok=True)
                exited = f"exited with code {code}" if code is not None else "exited"
                raise BrokerError(
                    f"broker {exited} before answering on {self.bootstrap}: {self._failure_summary()} "
                    f"(full log: {self.log_file})"
                )
            return _answers(HOST, self.port)

        if services.poll_until(answering, timeout, _POLL_S):
            return
        if launched:
            self.down()
        raise BrokerError(
            f"broker on {self.bootstrap} did not answer within {timeout:g} s"
            f"{'; stopped it' if launched else ''} (log: {self.log_file})"
        )

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


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _salted_password(mechanism: str, password: str, salt: bytes) -> bytes:
    """SCRAM's SaltedPassword, Hi(password, salt, i) of RFC 5802: PBKDF2 with the mechanism's hash."""
    algorithm = "sha512" if mechanism == "SCRAM-SHA-512" else "sha256"
    return hashlib.pbkdf2_hmac(algorithm, password.encode("utf-8"), salt, _SCRAM_ITERATIONS)


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


def _yield_to_compiled_code(pid: int) -> None:
    """Lowers the priority of the broker's JIT compiler threads (Linux; elsewhere nothing happens). Even
    with hot code compiled early (`-XX:CompileThresholdScaling`), C2 compiled in bursts of 100-300 ms that
    took most of a core a minute into a run, and on 2 cores shared with the pipeline each burst starved the
    worker: `bench.pipeline`'s late pods came in half-second stretches that matched the bursts. At nice 10,
    in the scheduling group of the processes that started the broker (`_launch`), the compilers get what
    the machine leaves idle and little of what the pipeline uses (docs/pipeline-performance.md)."""
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            if (task / "comm").read_text().startswith(COMPILER_THREAD_NAMES):
                os.setpriority(os.PRIO_PROCESS, int(task.name), COMPILER_NICE)


@contextlib.contextmanager
def resolved_broker(timeout: float = 60.0, *, reuse_local: bool = False) -> Iterator[str]:
    """Yield a bootstrap address for a working broker; stop whatever was started here on exit.

    `reuse_local`: a broker that already answers on the default port (`eyrie broker up`, `docker compose
    up kafka`) is used rather than another one started beside it. Tests leave it off, so a session never
    writes to a developer's own broker unless KAFKA_BOOTSTRAP_SERVERS names it."""
    if bootstrap := os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        with _describing(f"KAFKA_BOOTSTRAP_SERVERS={bootstrap}"):
            yield bootstrap
        return
    if reuse_local and (found := probe_port(DEFAULT_PORT)).answering:
        with _describing(f"the broker already running on {found.bootstrap} ({found.describe()})"):
            yield found.bootstrap
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
        port, controller_port = free_ports(2)
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
