"""Runtime settings: defaults, then an optional YAML file, then ``EYRIE_*`` environment variables.

The broker address follows the project-wide precedence: an explicit value (a CLI flag), else
``KAFKA_BOOTSTRAP_SERVERS``, else the local broker's default address (``eyrie broker up``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.codec import from_validation_error
from schemas.exceptions import ConfigError

__all__ = ["DEFAULT_BOOTSTRAP", "Settings", "load_settings"]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str = Field(default=DEFAULT_BOOTSTRAP, min_length=1)
    topic_prefix: str = Field(default="eyrie.", max_length=100, pattern=r"^[A-Za-z0-9._-]*$")
    partitions: int = Field(default=4, ge=1, le=1024)
    """Partitions of the keyed, high-volume topics (metrics, pod requests, bindings, results)."""
    replication_factor: int = Field(default=3, ge=1, le=16)
    """Upper bound; topics get min(this, brokers in the cluster), so one local broker still works."""
    max_message_bytes: int = Field(default=1_048_576, ge=1024, le=100 * 1_048_576)
    client_id: str = "eyrie"
    linger_ms: int = Field(default=5, ge=0, le=10_000)
    request_timeout_ms: int = Field(default=30_000, ge=1000)
    shards: int = Field(default=1, ge=1, le=1024)
    """Partitions of the internal sequencer topic: one placement writer per cluster shard."""
    summary_interval: float = Field(default=10.0, gt=0.0, le=86_400.0)
    """At most one metrics summary per node per this many seconds of event time (or on a > 5 % move)."""
    tick_interval: float = Field(default=1.0, gt=0.0, le=3600.0)
    """How often a live worker advances placement's clock when no input arrives (Permit and backoff)."""
    store: str = Field(default="memory://", pattern=r"^(memory|rocksdb)://")
    """Faust table store; ``rocksdb://`` (rocksdict) in production, memory in tests."""
    data_dir: str = ".eyrie/faust"
    session_timeout_s: float = Field(default=10.0, ge=1.0, le=300.0)
    """How soon a killed worker's partitions move to a standby (the Kafka group session timeout)."""

    def topic(self, short: str) -> str:
        return f"{self.topic_prefix}{short}"


_ENV_FIELDS = {f"EYRIE_{name.upper()}": name for name in Settings.model_fields}


def load_settings(
    path: str | Path | None = None, *, env: Mapping[str, str] | None = None, **overrides: Any
) -> Settings:
    """Build settings; every error names the file or variable and the field."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    source = "settings"
    path = path or env.get("EYRIE_CONFIG") or None
    if path is not None:
        source = str(path)
        try:
            document = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: cannot read settings: {exc}".replace("\n", " ")) from None
        if not isinstance(document, dict):
            raise ConfigError(f"{path}: expected a mapping of setting names to values")
        values.update(document)
    for variable, name in _ENV_FIELDS.items():
        if variable in env:
            values[name] = env[variable]
    if env.get("KAFKA_BOOTSTRAP_SERVERS"):
        values["bootstrap_servers"] = env["KAFKA_BOOTSTRAP_SERVERS"]
    values.update({key: value for key, value in overrides.items() if value is not None})
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        error = from_validation_error(exc)
        culprit = next((v for v, n in _ENV_FIELDS.items() if n == error.field and v in env), source)
        raise ConfigError(f"{culprit}: {error}") from None
