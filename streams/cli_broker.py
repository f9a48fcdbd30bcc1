"""`eyrie broker up|down|status`: run the local Kafka broker that tests and the demo default to.

Every command prints one line. Failures print one ``error: ...`` line to stderr and exit 2, so scripts
can tell "the broker is down" (status, exit 1) from "something is wrong" (exit 2).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from schemas.exceptions import EyrieError
from streams.broker import DEFAULT_PORT, KAFKA_VERSION, LocalBroker

__all__ = ["broker_app"]

broker_app = typer.Typer(
    help=f"Run a local Apache Kafka {KAFKA_VERSION} broker (single KRaft node; needs Java and Maven).",
    no_args_is_help=True,
    add_completion=False,
)

PortOption = Annotated[int, typer.Option("--port", "-p", help="Client port on 127.0.0.1.", min=1, max=65535)]
DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        "-d",
        help="Broker state and logs (default: $EYRIE_HOME/broker-PORT; EYRIE_HOME: ~/.local/share/eyrie).",
        file_okay=False,
    ),
]


def _fail(error: EyrieError) -> typer.Exit:
    typer.echo(f"error: {error}", err=True)
    return typer.Exit(2)


@broker_app.command()
def up(
    port: PortOption = DEFAULT_PORT,
    data_dir: DataDirOption = None,
    controller_port: Annotated[
        int | None, typer.Option("--controller-port", help="KRaft controller port (default: PORT+1).")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the broker to answer.")] = 30.0,
) -> None:
    """Start the broker in the background and return once it answers; no-op if it already runs."""
    started = time.monotonic()
    try:
        broker = LocalBroker(port, data_dir, controller_port)
        before = broker.status()
        bootstrap = broker.up(timeout=timeout)
        pid = broker.status().pid
    except EyrieError as error:
        raise _fail(error) from None
    elapsed = time.monotonic() - started
    verb = "already up" if before.answering else "up"
    typer.echo(f"broker {verb}: {bootstrap} (data: {broker.data_dir}, pid {pid}) in {elapsed:.1f} s")


@broker_app.command()
def down(
    port: PortOption = DEFAULT_PORT,
    data_dir: DataDirOption = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait after SIGTERM before SIGKILL.")] = 15.0,
) -> None:
    """Stop the broker (SIGTERM, then SIGKILL after --timeout). Not running is not an error."""
    try:
        broker = LocalBroker(port, data_dir)
        pid = broker.status().pid
        stopped = broker.down(timeout=timeout)
    except EyrieError as error:
        raise _fail(error) from None
    if stopped:
        typer.echo(f"broker down: {broker.bootstrap} (pid {pid} stopped, data kept in {broker.data_dir})")
    else:
        typer.echo(f"broker was not running: {broker.bootstrap} (data: {broker.data_dir})")


@broker_app.command()
def status(port: PortOption = DEFAULT_PORT, data_dir: DataDirOption = None) -> None:
    """Print whether the broker runs and answers; exit 1 unless it answers."""
    try:
        broker = LocalBroker(port, data_dir)
        state = broker.status()
    except EyrieError as error:
        raise _fail(error) from None
    where = f"{state.bootstrap} (data: {broker.data_dir}"
    if state.answering:
        typer.echo(f"broker up: {where}, pid {state.pid})")
        return
    if state.running:
        typer.echo(f"broker not answering: {where}, pid {state.pid}; still starting? see {broker.log_file})")
    else:
        typer.echo(f"broker down: {where})")
    raise typer.Exit(1)


if __name__ == "__main__":
    broker_app()
