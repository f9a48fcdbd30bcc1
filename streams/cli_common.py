"""What every ``eyrie`` command shares: the one-line error contract, settings, options, progress bars."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from schemas.exceptions import EyrieError
from streams.settings import Settings, load_settings

__all__ = [
    "BootstrapOption",
    "ConfigOption",
    "one_line_errors",
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
        help="Kafka bootstrap servers [default: $KAFKA_BOOTSTRAP_SERVERS, "
        "else 127.0.0.1:9092, the local broker]",
    ),
]
ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="Settings file (YAML) [env: EYRIE_CONFIG]")
]


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


def settings_from(bootstrap: str | None, config: Path | None) -> Settings:
    return load_settings(config, bootstrap_servers=bootstrap)


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
