"""Every error eyrie raises on purpose, in one tree.

::

    EyrieError
    ├── InvalidInput (ValueError)          bad data from a user, a file or a record; `field` names the culprit
    │   ├── QuantityError                  a quantity that is negative, NaN, inf, too large or badly suffixed
    │   ├── ManifestError                  a Kubernetes manifest that cannot become a PodRequest
    │   └── EventLogError                  a bad line in a recorded event log; `line` is its 1-based number
    ├── ConfigError (ValueError)           a bad setting, profile or plugin argument
    ├── BrokerError (RuntimeError)         the Kafka broker cannot be resolved, started, reached or stopped
    │   └── ToolMissing                    Java or Maven is not installed
    ├── ControlPlaneError (RuntimeError)   the Kubernetes control plane cannot be built, started or reached
    └── KubeApiError (RuntimeError)        a Kubernetes API server refused a request or answered unreadably;
                                           `status` and `reason` are its reply's

Callers at the edge (the CLI, the stream decoders) catch `EyrieError` and turn it into one line or a
dead-letter record; nothing below the edge prints.
"""

from __future__ import annotations

__all__ = [
    "BrokerError",
    "ConfigError",
    "ControlPlaneError",
    "EventLogError",
    "EyrieError",
    "InvalidInput",
    "KubeApiError",
    "ManifestError",
    "QuantityError",
    "ToolMissing",
]


class EyrieError(Exception):
    """Root of every deliberate eyrie error."""


class InvalidInput(EyrieError, ValueError):
    """Input that does not validate. `field` is a dotted path such as ``containers.0.requests.cpu``."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class QuantityError(InvalidInput):
    """A resource quantity that Kubernetes would reject, or that eyrie cannot represent."""


class ManifestError(InvalidInput):
    """A Kubernetes object that is not a v1 Pod, or a Pod eyrie cannot place."""


class EventLogError(InvalidInput):
    """A recorded event log line that is not a valid event."""

    def __init__(self, message: str, *, line: int, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.line = line
        self.args = (f"line {line}: {self.args[0]}",)


class ConfigError(EyrieError, ValueError):
    """A setting, profile or plugin argument that fails validation."""


class BrokerError(EyrieError, RuntimeError):
    """The broker could not be resolved, started, reached or stopped."""


class ToolMissing(BrokerError):
    """Java or Maven, needed to run the local broker, is not on PATH."""


class ControlPlaneError(EyrieError, RuntimeError):
    """The control plane could not be built, started, reached or stopped, or a tool it needs is missing."""


class KubeApiError(EyrieError, RuntimeError):
    """A Kubernetes API server's reply that its caller cannot use: an HTTP status it does not expect, or a
    body that is not the JSON it should be. `status` is the HTTP status (0 when there was no reply) and
    `reason` the ``reason`` of the server's ``Status`` object (``Forbidden``, ``Invalid``), if any."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        self.status = status
        self.reason = reason
        super().__init__(message)
