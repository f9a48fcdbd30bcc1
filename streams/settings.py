"""Runtime settings: defaults, then an optional YAML file, then ``EYRIE_*`` environment variables.

The broker address follows the project-wide precedence: an explicit value (a CLI flag), else
``KAFKA_BOOTSTRAP_SERVERS``, else the local broker's default address (``eyrie broker up``).

Security settings (TLS and SASL) load the same way. The SASL password is a `SecretStr`: it prints as
``**********`` in reprs, dumps and error messages, and it can come from a file (``sasl_password_file``,
``--sasl-password-file``) so that it never sits on a command line or in a settings file.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from schemas.codec import from_validation_error
from schemas.exceptions import ConfigError, InvalidInput
from streams.core.decoders import RECORD_OVERHEAD

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "Settings",
    "load_settings",
]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
SECURITY_PROTOCOLS: tuple[str, ...] = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")

# Read by the loader and never stored: the password read from the file is.
_PASSWORD_FILE = "sasl_password_file"


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str = Field(default=DEFAULT_BOOTSTRAP, min_length=1)
    topic_prefix: str = Field(default="eyrie.", max_length=100, pattern=r"^[A-Za-z0-9._-]*$")
    partitions: int = Field(default=4, ge=1, le=1024)
    """Partitions of the keyed, high-volume topics (metrics, pod requests, bindings, results)."""
    replication_factor: int = Field(default=3, ge=1, le=16)
    """Upper bound; topics get min(this, brokers in the cluster), so one local broker still works."""
    max_message_bytes: int = Field(default=1_048_576, ge=1024, le=100 * 1_048_576)
    """The largest record: producers refuse bigger ones, topics are created with it as
    ``max.message.bytes``, and consumers fetch at least this much per partition."""
    client_id: str = "eyrie"
    linger_ms: int = Field(default=0, ge=0, le=10_000)
    """How long a producer holds a record for more to join its batch. 0: aiokafka keeps one request in
    flight per broker and batches whatever accumulates behind it, so under load batches still form, and
    at low rates no hop adds a wait (a pod crosses four producers: client, forwarder, placement,
    applier)."""
    fetch_max_wait_ms: int = Field(default=200, ge=1, le=10_000)
    """How long the broker may hold a consumer's fetch while none of its partitions has new records. Well
    below Faust's 1,500 ms, because a fetch leaves out the partitions whose records the consumer has not
    taken yet, and nothing reaches the consumer until it returns (`streams.faust_overrides.fetching`); not
    much lower: at 20 ms the metrics agent drained about a fifth slower (a busy worker answers 50 empty
    fetches a second)."""
    batch_window_ms: int = Field(default=15, ge=0, le=10_000)
    """The longest a worker's or applier's agent gathers one batch, from its first record; it hands the batch
    over sooner, at the first turn of the event loop in which no record came
    (`streams.faust_overrides.batching.QUIET_S`), and an idle agent sleeps. Every batch costs its hop a
    produce request and acknowledgements (the forwarder's also a sequencer record), so under a backlog, whose
    records come back to back, batches grow up to this window, and a record that comes alone leaves at once
    (docs/pipeline-performance.md)."""
    request_timeout_ms: int = Field(default=30_000, ge=1000)
    shards: int = Field(default=1, ge=1, le=1024)
    """Partitions of the internal sequencer topic: one placement writer per cluster shard."""
    summary_interval: float = Field(default=10.0, gt=0.0, le=86_400.0)
    """At most one metrics summary per node per this many seconds of event time (or on a > 5 % move)."""
    metrics_state_ttl_s: float = Field(default=86_400.0, ge=0.0, le=365 * 86_400.0)
    """The metrics agent forgets a node's or workload's window and portrait (and deletes it from its state
    tables) once the newest sample it accepted is this many seconds of event time past the key's own newest
    sample: it never hears of deleted pods or nodes, and a pod without a workload is a key of its own, so
    without this its tables and their recovery would grow with history. A key sampled again later starts
    afresh. 0: never forget."""
    tick_interval: float = Field(default=1.0, gt=0.0, le=3600.0)
    """How often a live worker advances placement's clock when no input arrives (Permit and backoff)."""
    replay_session_timeout_s: float = Field(default=60.0, ge=1.0, le=86_400.0)
    """How long placement holds a live replay's input without hearing from the replayer (which resends its
    watermark at least every second, or every quarter of this): past it, the session ends as if its end
    marker had come. A replayer killed without a word would otherwise stop all scheduling for good; an
    outage longer than this (no watermark forwarded) ends a replay that is still running, whose later
    records then apply in arrival order."""
    checkpoint_every_envelopes: int = Field(default=1_000, ge=0, le=10_000_000)
    """A placement shard writes a checkpoint of its state (docs/checkpoints.md) after this many sequencer
    records since its last one (0: never by count): a worker taking the shard over replays at most about
    this many records after the newest checkpoint. A record takes about 0.5 ms to replay on 5,000 nodes,
    and a checkpoint about 0.3 s to write at 20,000 pods, during which the shard places nothing: the
    defaults keep a takeover's replay near half a second at a steady 100 pods/s for a pause every 15 s or
    so. A partition of the applier's tables is checkpointed after this many changelog records too, or
    after as many as it holds entries if that is more."""
    checkpoint_every_s: float = Field(default=15.0, ge=0.0, le=86_400.0)
    """...or once this many seconds passed since its last one with any record applied since (0: never by
    time), so a quiet shard's tail stays short too; the same for the applier's table partitions. Both 0:
    no checkpoints, and recovery reads the sequencer and the changelogs from their start."""
    sequencer_delete_behind_checkpoints: bool = True
    """After each checkpoint, delete the shard's sequencer records older than the older of its two kept
    checkpoints (Kafka's DeleteRecords), so a shard's disk follows its live state, not its history. Off:
    the sequencer is kept whole (``eyrie record --source sequencer`` then sees every record)."""
    store: str = Field(default="memory://", pattern=r"^(memory|rocksdb)://")
    """Faust table store; ``rocksdb://`` (rocksdict) in production, memory in tests."""
    data_dir: str = ".eyrie/faust"
    deleted_retention_s: float = Field(default=3600.0, ge=0.0)
    """How long the applier's ledger remembers a deleted pod, to refuse a binding still in flight for it;
    then it is forgotten, so the ledger does not grow with every pod ever placed. 0: for ever."""
    deleted_settle_s: float = Field(default=60.0, ge=0.0)
    """How long after its deletion, once the applier's consumer has committed it, a deleted pod's entry
    leaves the ledger's tables (a tombstone in their changelog) and is remembered in memory only: the tables,
    and what a restarted applier reads back, then hold the live pods and this much of the deletions."""
    session_timeout_s: float = Field(default=6.0, ge=1.0, le=300.0)
    """The Kafka group session timeout of workers and the applier: a member that sends no heartbeat for
    this long is taken for dead and its partitions move to another (a dead worker's shard is taken over
    about this long after its last heartbeat). Shorter detects sooner, but a member whose event loop stalls
    this long (a GC pause, a rebuild, an overloaded host) is failed over while alive, and its shards are
    rebuilt elsewhere. Brokers refuse values below their ``group.min.session.timeout.ms`` (6 s by
    default)."""
    heartbeat_interval_s: float = Field(default=1.0, gt=0.0, le=100.0)
    """How often a group member heartbeats, and so how soon the survivors hear of a rebalance once the
    session of a dead member ended (below a third of `session_timeout_s`, so that one lost heartbeat is
    not a failover)."""
    rebalance_timeout_s: float = Field(default=10.0, ge=1.0, le=600.0)
    """How long a rebalance waits for every live member to rejoin (its revocation done: offsets
    committed, outputs flushed); one that takes longer is dropped from the group. It does not delay
    noticing a dead member, only a rebalance in which a live one is slow."""
    standby_shards: int = Field(default=0, ge=0, le=1024)
    """Placement shards a worker follows as a hot standby, among those it does not own (0: none; `shards`
    or more: all): it applies their sequencer records as the owner commits them, sending nothing, so taking
    one over costs the group's failure detection plus a short tail instead of a checkpoint's decode and
    replay (docs/checkpoints.md#hot-standby). Each followed shard costs a copy of its memory and the CPU of
    placing its pods once more."""
    stall_timeout_s: float = Field(default=300.0, gt=0.0, le=86_400.0)
    """How long an assigned partition may go without a fetch, or a stream sit still with records waiting,
    before a worker or applier logs it as stalled (Faust's stream-processing and commit-livelock checks)."""
    web_host: str = "127.0.0.1"
    """The address a worker's or applier's web server (``--web-port``: metrics, health) listens on. Loopback
    by default, as the pages have no authentication; ``0.0.0.0`` in a container, whose port only the
    container's network reaches."""
    apply_target: Literal["ledger", "kubernetes"] = "ledger"
    """Where the applier applies a binding its ledger accepts: ``ledger`` (the ledger is all there is) or
    ``kubernetes`` (also POSTed to the pod's binding subresource, with kube-scheduler's events and
    ``PodScheduled`` condition: `streams.kube.binder`)."""
    kubeconfig: str | None = Field(default=None, min_length=1)
    """With ``apply_target: kubernetes``: the kubeconfig naming the API server; else ``KUBECONFIG``, else the
    pod's service account (``/var/run/secrets/kubernetes.io/serviceaccount``)."""

    security_protocol: SecurityProtocol = "PLAINTEXT"
    """How every Kafka client of eyrie connects: TLS (``SSL``, ``SASL_SSL``) and/or SASL."""
    sasl_mechanism: SaslMechanism = "PLAIN"
    sasl_username: str | None = Field(default=None, min_length=1)
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None
    """PEM file of the CA(s) that signed the brokers' certificates (default: the system's CAs)."""
    ssl_certfile: Path | None = None
    """Client certificate (PEM) for brokers that require TLS client authentication."""
    ssl_keyfile: Path | None = None
    ssl_key_password: SecretStr | None = None
    """Only for an encrypted `ssl_keyfile`."""
    ssl_check_hostname: bool = True
    """Off only for brokers whose certificates do not name the address clients use (never in production)."""

    def topic(self, short: str) -> str:
        return f"{self.topic_prefix}{short}"

    @property
    def max_value_bytes(self) -> int:
        """The largest record value eyrie packs: `max_message_bytes` less room for the key, headers and
        batch framing (`streams.core.decoders.RECORD_OVERHEAD`)."""
        return self.max_message_bytes - RECORD_OVERHEAD

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @field_validator("security_protocol", "sasl_mechanism", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        # Environment variables are often typed in lower case (sasl_ssl, scram-sha-512).
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("apply_target", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("web_host")
    @classmethod
    def _host(cls, value: str) -> str:
        value = value.strip()
        try:
            ipaddress.ip_address(value)
        except ValueError:
            if not _HOST_NAME.fullmatch(value):
                raise ValueError(
                    f"{value!r} is neither an IP address nor a host name (0.0.0.0 listens on every interface)"
                ) from None
        return value

    @field_validator("ssl_cafile", "ssl_certfile", "ssl_keyfile")
    @classmethod
    def _readable_file(cls, path: Path | None) -> Path | None:
        if path is None:
            return None
        path = path.expanduser()
        if not path.is_file():
            raise ValueError(f"{path} does not exist or is not a file")
        if not os.access(path, os.R_OK):
            raise ValueError(f"{path} is not readable")
        return path

    @model_validator(mode="after")
    def _consistent_security(self) -> Settings:
        protocol = self.security_protocol
        if self.uses_sasl:
            if self.sasl_username is None:
                raise InvalidInput(f"required when security_protocol is {protocol}", field="sasl_username")
            if self.sasl_password is None or not self.sasl_password.get_secret_value():
                raise InvalidInput(
                    f"required when security_protocol is {protocol} "
                    "(EYRIE_SASL_PASSWORD or --sasl-password-file)",
                    field="sasl_password",
                )
        else:
            # A credential that would silently go unused is almost always a forgotten security_protocol.
            for name in ("sasl_username", "sasl_password"):
                if getattr(self, name) is not None:
                    raise InvalidInput(
                        f"set, but security_protocol {protocol} does not use SASL "
                        "(SASL_SSL or SASL_PLAINTEXT does)",
                        field=name,
                    )
        if not self.uses_tls:
            for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_key_password"):
                if getattr(self, name) is not None:
                    raise InvalidInput(
                        f"set, but security_protocol {protocol} does not use TLS (SSL or SASL_SSL does)",
                        field=name,
                    )
        if self.heartbeat_interval_s * 3 > self.session_timeout_s:
            raise InvalidInput(
                f"must be at most a third of session_timeout_s ({self.session_timeout_s:g} s), or one "
                "late heartbeat fails the member over",
                field="heartbeat_interval_s",
            )
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise InvalidInput("needs ssl_certfile (the certificate of this key)", field="ssl_keyfile")
        return self


_ENV_FIELDS = {f"EYRIE_{name.upper()}": name for name in [*Settings.model_fields, _PASSWORD_FILE]}


def _set(values: dict[str, Any], name: str, value: Any) -> None:
    # The password and the password file are one setting: whichever a later source sets wins.
    if name == _PASSWORD_FILE:
        values.pop("sasl_password", None)
    elif name == "sasl_password":
        values.pop(_PASSWORD_FILE, None)
    values[name] = value


def _read_password(path: Any, source: str) -> str:
    # A flag names itself; a file or a variable also needs the field.
    where = source if source.startswith("--") else f"{source}: {_PASSWORD_FILE}"
    try:
        text = Path(str(path)).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(f"{where}: cannot read {path}: {reason}") from None
    # Editors and `echo` add a final newline that is not part of the password.
    password = text.rstrip("\r\n")
    if not password:
        raise ConfigError(f"{where}: {path} is empty")
    return password


def _yaml_reason(exc: yaml.YAMLError) -> str:
    # str(exc) quotes the offending line, which may be the password's; the position says enough.
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return f"{exc.problem or exc.context or 'invalid YAML'}{where}"
    return "invalid YAML"


def load_settings(
    path: str | Path | None = None, *, env: Mapping[str, str] | None = None, **overrides: Any
) -> Settings:
    """Build settings; every error names the file or variable and the field.

    `overrides` (CLI flags) may include ``sasl_password_file``, as may the file and the environment
    (``EYRIE_SASL_PASSWORD_FILE``); the password is then read from that file.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    source = "settings"
    path = path or env.get("EYRIE_CONFIG") or None
    if path is not None:
        source = str(path)
        try:
            document = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read settings: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: cannot read settings: {_yaml_reason(exc)}") from None
        if not isinstance(document, dict):
            raise ConfigError(f"{path}: expected a mapping of setting names to values")
        for name, value in document.items():
            _set(values, str(name), value)
            sources[str(name)] = source
    for variable, name in _ENV_FIELDS.items():
        if variable in env:
            _set(values, name, env[variable])
            sources[name] = variable
    if env.get("KAFKA_BOOTSTRAP_SERVERS"):
        values["bootstrap_servers"] = env["KAFKA_BOOTSTRAP_SERVERS"]
    for name, value in overrides.items():
        if value is not None:
            _set(values, name, value)
            sources[name] = f"--{name.replace('_', '-')}"
    if _PASSWORD_FILE in values:
        password_file = values.pop(_PASSWORD_FILE)
        values["sasl_password"] = _read_password(password_file, sources.get(_PASSWORD_FILE, source))
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        error = from_validation_error(exc)
        field = (error.field or "").split(".")[0]
        culprit = sources.get(field, source)
        # A flag names itself; repeating the field after it would read "--x: x: ...".
        message = str(error) if not culprit.startswith("--") else str(error).removeprefix(f"{field}: ")
        raise ConfigError(f"{culprit}: {message}") from None
