"""How every Kafka client of eyrie connects: TLS, SASL and message size limits, from `Settings`, in one place.

- `client_security`: keyword arguments for aiokafka's producer, consumer and admin client.
- `faust_broker`: the ``broker`` and ``broker_credentials`` settings of a Faust app.
- `producer_limits`, `consumer_limits`: ``max_message_bytes`` as the producers' and consumers' size limits
  (and the consumers' fetch wait).
- `kafka_errors`: aiokafka logs why a connection failed and then raises a bare "Unable to bootstrap";
  this puts the logged reason (wrong password, unknown CA, TLS expected) into one `BrokerError` line.

The SASL password leaves its `SecretStr` only here, as the argument the Kafka client needs; nothing here
logs it, and error messages are scrubbed of it in case a library ever echoes it.
"""

from __future__ import annotations

import contextlib
import logging
import re
import ssl
from collections.abc import Iterator
from typing import Any

from aiokafka.errors import KafkaError
from aiokafka.helpers import create_ssl_context

from schemas.exceptions import BrokerError, ConfigError
from streams.settings import Settings

__all__ = [
    "client_security",
    "consumer_limits",
    "faust_broker",
    "kafka_errors",
    "producer_limits",
    "ssl_context",
]

# What aiokafka logs for each bootstrap address it gave up on, before its bare "Unable to bootstrap".
_CONNECT_FAILED = re.compile(r'^Unable connect to "[^"]*": ')
_METADATA_FAILED = re.compile(r'^Unable to request metadata from "[^"]*": ')


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context of `settings` (None without TLS); a file that does not load is a `ConfigError`."""
    if not settings.uses_tls:
        return None
    cafile = str(settings.ssl_cafile) if settings.ssl_cafile is not None else None
    try:
        # Without a CA file the system's CAs verify the broker, as for any TLS server.
        context: ssl.SSLContext = create_ssl_context(cafile=cafile)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"ssl_cafile: cannot load {cafile}: {_ssl_reason(exc)}") from None
    if settings.ssl_certfile is not None:
        key_password = settings.ssl_key_password

        def password() -> str:
            if key_password is None:
                # Without a callback OpenSSL would prompt on the terminal, hanging a service.
                raise ConfigError(
                    f"ssl_keyfile: {settings.ssl_keyfile or settings.ssl_certfile} is encrypted; "
                    "set ssl_key_password (EYRIE_SSL_KEY_PASSWORD)"
                )
            return key_password.get_secret_value()

        try:
            context.load_cert_chain(
                str(settings.ssl_certfile),
                str(settings.ssl_keyfile) if settings.ssl_keyfile is not None else None,
                password,
            )
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"ssl_certfile: cannot load {settings.ssl_certfile}"
                f"{f' with {settings.ssl_keyfile}' if settings.ssl_keyfile else ''}: {_ssl_reason(exc)}"
            ) from None
    context.check_hostname = settings.ssl_check_hostname
    return context


def client_security(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for `AIOKafkaProducer`, `AIOKafkaConsumer` and `AIOKafkaAdminClient`."""
    options: dict[str, Any] = {"security_protocol": settings.security_protocol}
    if settings.uses_tls:
        options["ssl_context"] = ssl_context(settings)
    if settings.uses_sasl:
        assert settings.sasl_password is not None  # the settings validator guarantees it
        options["sasl_mechanism"] = settings.sasl_mechanism
        # aiokafka names them "plain" but uses the same two for SCRAM.
        options["sasl_plain_username"] = settings.sasl_username
        options["sasl_plain_password"] = settings.sasl_password.get_secret_value()
    return options


def faust_broker(settings: Settings) -> dict[str, Any]:
    """``broker`` and ``broker_credentials`` for `faust.App`: Faust picks the protocol from the credentials,
    so the URLs keep the ``kafka://`` scheme whatever the protocol is."""
    import faust

    credentials: Any = None
    context = ssl_context(settings)
    if settings.uses_sasl:
        assert settings.sasl_password is not None
        # With a context Faust speaks SASL_SSL, without one SASL_PLAINTEXT.
        credentials = faust.SASLCredentials(
            username=settings.sasl_username,
            password=settings.sasl_password.get_secret_value(),
            mechanism=settings.sasl_mechanism,
            ssl_context=context,
        )
    elif context is not None:
        credentials = faust.SSLCredentials(context)
    return {
        "broker": [f"kafka://{server.strip()}" for server in settings.bootstrap_servers.split(",")],
        "broker_credentials": credentials,
    }


def producer_limits(settings: Settings, max_batch_size: int = 256 * 1024) -> dict[str, int]:
    """A producer refuses records over ``max_message_bytes``, and never batches past it either: a batch is
    what the topic's ``max.message.bytes`` limits, so several small records must not add up to more."""
    limit = settings.max_message_bytes
    return {"max_request_size": limit, "max_batch_size": min(max_batch_size, limit)}


def consumer_limits(
    settings: Settings,
    fetch_max_bytes: int = 16 * 1024 * 1024,
    max_partition_fetch_bytes: int = 4 * 1024 * 1024,
) -> dict[str, int]:
    """Fetch sizes that hold at least one record of ``max_message_bytes``, and the fetch wait."""
    limit = settings.max_message_bytes
    return {
        "fetch_max_bytes": max(fetch_max_bytes, limit),
        "max_partition_fetch_bytes": max(max_partition_fetch_bytes, limit),
        "fetch_max_wait_ms": settings.fetch_max_wait_ms,
    }


class _Reasons(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            message = record.getMessage()
            if _CONNECT_FAILED.match(message) or _METADATA_FAILED.match(message):
                self.messages.append(message)


@contextlib.contextmanager
def kafka_errors(settings: Settings, action: str = "reach") -> Iterator[None]:
    """Raise aiokafka's errors inside the block as one `BrokerError` line: ``cannot ACTION Kafka at ...``."""
    reasons = _Reasons()
    logger = logging.getLogger("aiokafka")
    logger.addHandler(reasons)
    try:
        yield
    except KafkaError as exc:
        raise BrokerError(describe_failure(settings, exc, reasons.messages, action)) from None
    finally:
        logger.removeHandler(reasons)


def describe_failure(
    settings: Settings, error: BaseException, logged: list[str], action: str = "reach"
) -> str:
    """One line: where, how (protocol, mechanism, user; never the password), why, and what to check."""
    how: str = settings.security_protocol
    if settings.uses_sasl:
        how += f", {settings.sasl_mechanism} as {settings.sasl_username}"
    last = logged[-1] if logged else ""
    reason = _METADATA_FAILED.sub("", _CONNECT_FAILED.sub("", last)) or str(error) or type(error).__name__
    hint = ""
    if "SaslAuthenticationFailed" in reason or "Authentication failed" in reason:
        hint = "; check the user name and password"
    elif "UnsupportedSaslMechanism" in reason:
        hint = f"; the broker does not accept {settings.sasl_mechanism} on this listener"
    elif "CERTIFICATE_VERIFY_FAILED" in reason:
        hint = "; set ssl_cafile to the CA that signed the broker's certificate"
    elif "closed" in reason and not settings.uses_tls:
        hint = "; does this listener expect TLS (security_protocol SSL or SASL_SSL)?"
    elif _METADATA_FAILED.match(last) and not settings.uses_sasl:
        # Connected (and TLS, if any, agreed), then the broker ignored the request: it waits for SASL.
        hint = "; does this listener expect SASL (security_protocol SASL_SSL or SASL_PLAINTEXT)?"
    message = f"cannot {action} Kafka at {settings.bootstrap_servers} ({how}): {reason}{hint}"
    message = " ".join(message.split())
    if settings.sasl_password is not None and (secret := settings.sasl_password.get_secret_value()):
        message = message.replace(secret, "**********")
    return message


def _ssl_reason(error: BaseException) -> str:
    if isinstance(error, ssl.SSLError) and error.reason:
        return str(error.reason)
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__
