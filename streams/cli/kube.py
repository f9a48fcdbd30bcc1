"""`eyrie kube up|down|status`: the local Kubernetes control plane (etcd and kube-apiserver) that tests and
demos default to, or the existing cluster that ``--kubeconfig`` / ``KUBECONFIG`` names.

`up` prints the kubeconfig's path as its last line of stdout, so ``export KUBECONFIG=$(eyrie kube up |
tail -1)`` works for both; progress goes to stderr. `status` exits 1 unless the cluster is ready, so
scripts can tell "down" from "something is wrong" (one ``error: ...`` line, exit 2).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from schemas.exceptions import EyrieError
from streams.cli.common import one_line_errors
from streams.local.controlplane import (
    DEFAULT_PORT,
    KUBERNETES_VERSION,
    ControlPlaneError,
    LocalControlPlane,
    external_answers,
    read_access,
    resolved_kubeconfig,
)

__all__ = ["kube_app"]

kube_app = typer.Typer(
    help=f"Run a local Kubernetes {KUBERNETES_VERSION} control plane (etcd + kube-apiserver; needs Go and "
    "OpenSSL; the first `up` builds it).",
    no_args_is_help=True,
    add_completion=False,
)

DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        "-d",
        help="etcd data, keys, logs and the kubeconfig (default: $EYRIE_HOME/kube; "
        "EYRIE_HOME: ~/.local/share/eyrie).",
        file_okay=False,
    ),
]
KubeconfigOption = Annotated[
    str | None,
    typer.Option(
        "--kubeconfig",
        help="Use the existing cluster this kubeconfig names and start or stop nothing (default: "
        "$KUBECONFIG when set, else the local control plane).",
    ),
]


def _progress(message: str) -> None:
    typer.echo(message, err=True)


def _existing_cluster(kubeconfig: str | None, data_dir: Path | None, port: int | None = None) -> str | None:
    """The kubeconfig of an existing cluster to use instead of the local control plane, or None.

    ``KUBECONFIG`` naming the local plane's own kubeconfig (as after ``export KUBECONFIG=$(eyrie kube up |
    tail -1)``) means the local plane: `status` and `down` must still reach it.
    """
    chosen = resolved_kubeconfig(kubeconfig)
    if chosen is None:
        return None
    local = LocalControlPlane(data_dir).kubeconfig
    if Path(chosen).expanduser().resolve() == local:
        return None
    source = "--kubeconfig" if kubeconfig else "KUBECONFIG"
    for option, value in (("--data-dir", data_dir), ("--port", port)):
        if value is not None:
            raise ControlPlaneError(
                f"{option}: {source} names an existing cluster ({chosen}), to which the local control "
                f"plane's options do not apply; unset {source} to use the local one"
            )
    return chosen


@kube_app.command()
@one_line_errors
def up(
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            "-p",
            min=1,
            max=65535,
            help=f"The API server's port on 127.0.0.1 (default: the last one used, else {DEFAULT_PORT}).",
        ),
    ] = None,
    data_dir: DataDirOption = None,
    kubeconfig: KubeconfigOption = None,
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for /readyz after launch (the first build is not counted).")
    ] = 120.0,
) -> None:
    """Start the control plane in the background (building it on first use) and return once /readyz says
    ok; no-op if it already runs. The last stdout line is the kubeconfig's path."""
    started = time.monotonic()
    if (existing := _existing_cluster(kubeconfig, data_dir, port)) is not None:
        deadline = time.monotonic() + timeout
        while not external_answers(existing):
            if time.monotonic() >= deadline:
                server = read_access(existing).server
                raise ControlPlaneError(
                    f"kubeconfig {existing}: {server} did not answer within {timeout:g} s"
                )
            time.sleep(0.5)
        typer.echo(f"existing cluster answers: {read_access(existing).server} (nothing started)")
        typer.echo(existing)
        return
    plane = LocalControlPlane(data_dir, port)
    before = plane.status()
    path = plane.up(timeout=timeout, progress=_progress)
    state = plane.status()
    verb = "already up" if before.ready else "up"
    typer.echo(
        f"control plane {verb}: {plane.server} (Kubernetes {KUBERNETES_VERSION}; data: {plane.data_dir}; "
        f"etcd pid {state.etcd_pid}, kube-apiserver pid {state.apiserver_pid}) in "
        f"{time.monotonic() - started:.1f} s"
    )
    typer.echo(str(path))


@kube_app.command()
@one_line_errors
def down(
    data_dir: DataDirOption = None,
    kubeconfig: KubeconfigOption = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait after SIGTERM before SIGKILL.")] = 15.0,
) -> None:
    """Stop the local control plane (data kept). Not running is not an error."""
    if (existing := _existing_cluster(kubeconfig, data_dir)) is not None:
        typer.echo(f"nothing stopped: {existing} names an existing cluster; eyrie stops only its own")
        return
    plane = LocalControlPlane(data_dir)
    if plane.down(timeout=timeout):
        typer.echo(f"control plane down: {plane.server} (data kept in {plane.data_dir})")
    else:
        typer.echo(f"control plane was not running: {plane.server} (data: {plane.data_dir})")


@kube_app.command()
def status(data_dir: DataDirOption = None, kubeconfig: KubeconfigOption = None) -> None:
    """Print whether the cluster is ready; exit 1 unless it is."""
    try:
        existing = _existing_cluster(kubeconfig, data_dir)
        if existing is not None:
            server = read_access(existing).server
            if external_answers(existing):
                typer.echo(f"existing cluster answers: {server} (kubeconfig {existing})")
                return
            typer.echo(f"existing cluster not answering: {server} (kubeconfig {existing})")
            raise typer.Exit(1)
        plane = LocalControlPlane(data_dir)
        state = plane.status()
    except EyrieError as error:
        typer.echo(f"error: {' '.join(str(error).split())}", err=True)
        raise typer.Exit(2) from None
    where = f"{plane.server} (data: {plane.data_dir}"
    if state.ready:
        typer.echo(f"control plane up: {where}; kubeconfig {plane.kubeconfig})")
        return
    if state.running:
        typer.echo(f"control plane not ready: {where}; see {plane.log_file('kube-apiserver')})")
    elif state.partly_running:
        alive = "etcd" if state.etcd_pid is not None else "kube-apiserver"
        typer.echo(f"control plane half running: {where}; only {alive} runs; `eyrie kube up` restarts it)")
    else:
        typer.echo(f"control plane down: {where})")
    raise typer.Exit(1)


if __name__ == "__main__":
    kube_app()
