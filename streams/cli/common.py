"""What every ``eyrie`` command shares: the one-line error contract, settings, options, progress bars, and
how the readers print (JSON lines or a table, optionally following their topics)."""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import Callable, Coroutine, Mapping
from contextvars import ContextVar
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import orjson
import typer
from pydantic import BaseModel
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from schemas.codec import encode
from schemas.exceptions import EyrieError, InvalidInput
from streams.settings import Settings, load_settings

if TYPE_CHECKING:
    from rich.table import Table

__all__ = [
    "BootstrapOption",
    "ConfigOption",
    "UntilIdleOption",
    "check_follow",
    "check_output",
    "json_line",
    "kafka_options",
    "one_line_errors",
    "print_table",
    "progress",
    "run",
    "settings_from",
    "stderr",
]

P = ParamSpec("P")
R = TypeVar("R")

stderr = Console(stderr=True)

BootstrapOption = Annotated[
    str | None,
    typer.Option(
        "--bootstrap-servers",
        "-b",
        help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS, "
        "else 127.0.0.1:9092, the local broker)",
    ),
]
ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="Settings file (YAML) (env: EYRIE_CONFIG)")
]
UntilIdleOption = Annotated[
    float | None,
    typer.Option(
        "--until-idle", min=0.0, help="With --follow: stop after this many seconds without a new record"
    ),
]


_PANEL = "Kafka security"
_SECURITY_OPTIONS: dict[str, Any] = {
    "security_protocol": Annotated[
        str | None,
        typer.Option(
            "--security-protocol",
            help="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL "
            "(env: EYRIE_SECURITY_PROTOCOL; default: PLAINTEXT)",
            rich_help_panel=_PANEL,
        ),
    ],
    "sasl_mechanism": Annotated[
        str | None,
        typer.Option(
            "--sasl-mechanism",
            help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (env: EYRIE_SASL_MECHANISM; default: PLAIN)",
            rich_help_panel=_PANEL,
        ),
    ],
    "sasl_username": Annotated[
        str | None,
        typer.Option("--sasl-username", help="SASL user (env: EYRIE_SASL_USERNAME)", rich_help_panel=_PANEL),
    ],
    "sasl_password_file": Annotated[
        Path | None,
        typer.Option(
            "--sasl-password-file",
            help="File holding the SASL password, so it is never on a command line "
            "(env: EYRIE_SASL_PASSWORD_FILE, or the password itself in EYRIE_SASL_PASSWORD)",
            rich_help_panel=_PANEL,
        ),
    ],
    "ssl_cafile": Annotated[
        Path | None,
        typer.Option(
            "--ssl-cafile",
            help="CA certificates (PEM) that signed the brokers' certificates (env: EYRIE_SSL_CAFILE; "
            "default: the system's CAs)",
            rich_help_panel=_PANEL,
        ),
    ],
    "ssl_certfile": Annotated[
        Path | None,
        typer.Option(
            "--ssl-certfile",
            help="Client certificate (PEM), for TLS client authentication (env: EYRIE_SSL_CERTFILE)",
            rich_help_panel=_PANEL,
        ),
    ],
    "ssl_keyfile": Annotated[
        Path | None,
        typer.Option(
            "--ssl-keyfile",
            help="The client certificate's key (PEM) (env: EYRIE_SSL_KEYFILE)",
            rich_help_panel=_PANEL,
        ),
    ],
}
_security_flags: ContextVar[Mapping[str, Any] | None] = ContextVar("eyrie_security_flags", default=None)


def kafka_options(command: Callable[P, R]) -> Callable[..., R]:
    """Give a command that talks to Kafka the security flags (--security-protocol, --sasl-*, --ssl-*).

    One decorator instead of seven parameters on every command: the flags are appended to the command's
    signature for Typer, taken out again before the command runs, and `settings_from` reads them.
    """
    signature = inspect.signature(command, eval_str=True)
    extra = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)
        for name, annotation in _SECURITY_OPTIONS.items()
    ]

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        flags = {name: kwargs.pop(name, None) for name in _SECURITY_OPTIONS}
        token = _security_flags.set(flags)
        try:
            return command(*args, **kwargs)
        finally:
            _security_flags.reset(token)

    parameters = [*signature.parameters.values(), *extra]
    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return wrapper


def one_line_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn every deliberate error into one line on stderr and exit status 2."""

    @wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except EyrieError as exc:
            message = " ".join(str(exc).split())
            typer.echo(f"error: {message}", err=True)
            raise typer.Exit(2) from None

    return wrapper


def run(coroutine: Coroutine[Any, Any, R]) -> R:
    return asyncio.run(coroutine)


def settings_from(bootstrap: str | None, config: Path | None, **flags: Any) -> Settings:
    """Settings with the command's flags on top (`flags`: other settings' flags, None when not given);
    inside a `kafka_options` command, its security flags too."""
    return load_settings(config, bootstrap_servers=bootstrap, **flags, **(_security_flags.get() or {}))


def progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
        disable=not stderr.is_terminal,
    )


# ------------------------------------------------------------------------------------------ output


def check_output(output: str, *, follow: bool = False) -> None:
    """--output is json or table, and a table is refused with --follow: it needs every row first."""
    if output not in ("json", "table"):
        raise InvalidInput(f"--output: expected json or table, got {output!r}")
    if follow and output == "table":
        raise InvalidInput(
            "--output table: only without --follow (a table needs every row; follow prints JSON)"
        )


def check_follow(command: str, *, follow: bool, from_beginning: bool, until_idle: float | None) -> None:
    """--until-idle and --from-beginning only with --follow: without it `command` always reads its topics
    from the beginning to their current end, so they would change nothing, and saying so beats a command
    that quietly does something else."""
    if follow:
        return
    if until_idle is not None:
        raise InvalidInput(f"--until-idle: only with --follow (without it, {command} stops at the end)")
    if from_beginning:
        raise InvalidInput("--from-beginning: only with --follow (without it, every record is read)")


def json_line(document: Any, *, flush: bool = False) -> None:
    """`document` as one line of JSON on stdout, a pydantic model in its wire form. `flush` for a command
    that follows its topics: whoever reads the pipe sees each line as it comes."""
    raw = encode(document) if isinstance(document, BaseModel) else orjson.dumps(document)
    sys.stdout.write(raw.decode() + "\n")
    if flush:
        sys.stdout.flush()


def print_table(table: Table) -> None:
    """`table` on stdout; a pipe gets whole rows (Rich would wrap them at 80 columns)."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=100_000)
    console.print(table, soft_wrap=True, crop=False)
