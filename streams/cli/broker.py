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
from streams.cli.common import one_line_errors
from streams.local.broker import DEFAULT_PORT, DEFAULT_SASL_USER, KAFKA_VERSION, LocalBroker, probe_port

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


@broker_app.command()
@one_line_errors
def up(
    port: PortOption = DEFAULT_PORT,
    data_dir: DataDirOption = None,
    controller_port: Annotated[
        int | None, typer.Option("--controller-port", help="KRaft controller port (default: PORT+1).")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the broker to answer.")] = 30.0,
    sasl_ssl_port: Annotated[
        int | None,
        typer.Option(
            "--sasl-ssl-port",
            min=1,
            max=65535,
            help="Also listen with SASL_SSL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 over TLS) on this port; "
            "its CA certificate is DATA/security/ca.pem.",
        ),
    ] = None,
    sasl_username: Annotated[
        str, typer.Option("--sasl-username", help="The SASL_SSL listener's user.")
    ] = DEFAULT_SASL_USER,
    sasl_password_file: Annotated[
        Path | None,
        typer.Option(
            "--sasl-password-file",
            help="A file holding that user's password (default: a random one, DATA/security/USER.password).",
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Start the broker in the background and return once it answers; no-op if it already runs."""
    started = time.monotonic()
    password = _read_password(sasl_password_file) if sasl_password_file is not None else None
    broker = LocalBroker(
        port, data_dir, controller_port, sasl_ssl_port=sasl_ssl_port, sasl_users={sasl_username: password}
    )
    before = broker.status()
    bootstrap = broker.up(timeout=timeout)
    pid = broker.status().pid
    elapsed = time.monotonic() - started
    verb = "already up" if before.answering else "up"
    secured = ""
    if broker.sasl_ssl_bootstrap is not None:
        where = sasl_password_file or broker.password_file(sasl_username)
        secured = (
            f"; SASL_SSL: {broker.sasl_ssl_bootstrap} (user {sasl_username}, password file {where}, "
            f"CA file {broker.ca_file})"
        )
    typer.echo(f"broker {verb}: {bootstrap} (data: {broker.data_dir}, pid {pid}) in {elapsed:.1f} s{secured}")


def _read_password(path: Path) -> str:
    try:
        password = path.read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise EyrieError(f"--sasl-password-file: cannot read {path}: {reason}") from None
    if not password:
        raise EyrieError(f"--sasl-password-file: {path} is empty")
    return password


def _of_data_dir(port: int, data_dir: Path | None) -> LocalBroker:
    """The broker of the data directory at the port it was started with: the pid file is the directory's,
    so `--port` only matters before a first `up` (a broker started with ``-p 19092`` and stopped without
    ``-p`` was reported as 127.0.0.1:9092, and its status checked the wrong port)."""
    broker = LocalBroker(port, data_dir)
    recorded = broker.recorded_port()
    return broker if recorded is None or recorded == port else LocalBroker(recorded, broker.data_dir)


@broker_app.command()
@one_line_errors
def down(
    port: PortOption = DEFAULT_PORT,
    data_dir: DataDirOption = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait after SIGTERM before SIGKILL.")] = 15.0,
) -> None:
    """Stop the broker (SIGTERM, then SIGKILL after --timeout). Not running is not an error."""
    broker = _of_data_dir(port, data_dir)
    pid = broker.status().pid
    stopped = broker.down(timeout=timeout)
    if stopped:
        typer.echo(f"broker down: {broker.bootstrap} (pid {pid} stopped, data kept in {broker.data_dir})")
    else:
        typer.echo(f"broker was not running: {broker.bootstrap} (data: {broker.data_dir})")


@broker_app.command()
@one_line_errors
def status(port: PortOption = DEFAULT_PORT, data_dir: DataDirOption = None) -> None:
    """Print whether a broker serves the port and who it is; exit 1 unless one answers.

    The data directory's own broker first; otherwise whatever answers Kafka metadata requests on the port,
    whichever data directory (EYRIE_HOME), container or person started it."""
    broker = _of_data_dir(port, data_dir)
    state = broker.status()
    where = f"{state.bootstrap} (data: {broker.data_dir}"
    if state.answering:
        typer.echo(f"broker up: {where}, pid {state.pid})")
        return
    if state.running:
        typer.echo(f"broker not answering: {where}, pid {state.pid}; still starting? see {broker.log_file})")
        raise typer.Exit(1)
    found = probe_port(broker.port)
    if found.answering:
        if found.data_dir == broker.data_dir:  # its pid file is gone, the broker is not
            typer.echo(f"broker up: {where}, pid {found.pid}; its pid file is missing)")
        else:
            # `eyrie broker down` with this data directory would not stop it: say whose it is.
            typer.echo(
                f"broker up: {found.bootstrap} ({found.describe()}; not started from {broker.data_dir})"
            )
        return
    if found.listening:
        typer.echo(
            f"broker down: {where}); port {broker.port} is taken by something that does not answer Kafka "
            f"metadata requests ({found.describe()})"
        )
    else:
        typer.echo(f"broker down: {where})")
    raise typer.Exit(1)
