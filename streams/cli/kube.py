"""`eyrie kube up|down|status`: the local Kubernetes control plane (etcd and kube-apiserver) that tests and
demos default to, or the existing cluster that ``--kubeconfig`` / ``KUBECONFIG`` names. `eyrie kube bridge`:
the process that watches a cluster's Nodes and Pods and feeds eyrie's topics (`streams.runtime.kube_bridge`).

`up` prints the kubeconfig's path as its last line of stdout, so ``export KUBECONFIG=$(eyrie kube up |
tail -1)`` works for both; progress goes to stderr. `status` exits 1 unless the cluster is ready, so
scripts can tell "down" from "something is wrong" (one ``error: ...`` line, exit 2).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated

import typer
from pydantic import TypeAdapter, ValidationError

from schemas.base import Name
from schemas.exceptions import ConfigError
from streams.cli.common import BootstrapOption, ConfigOption, kafka_options, one_line_errors, settings_from
from streams.kube.api import KubeConfig
from streams.local import services
from streams.local.controlplane import (
    DEFAULT_PORT,
    KUBERNETES_VERSION,
    ControlPlaneError,
    LocalControlPlane,
    external_answers,
    read_access,
    resolved_kubeconfig,
)

__all__ = ["bridge", "kube_app"]

kube_app = typer.Typer(
    help=f"Run a local Kubernetes {KUBERNETES_VERSION} control plane (etcd + kube-apiserver; needs Go and "
    "OpenSSL; the first `up` builds it), and bridge a cluster into eyrie's topics (`bridge`).",
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
        if not services.poll_until(lambda: external_answers(existing), timeout, 0.5):
            server = read_access(existing).server
            raise ControlPlaneError(f"kubeconfig {existing}: {server} did not answer within {timeout:g} s")
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
@one_line_errors
def status(data_dir: DataDirOption = None, kubeconfig: KubeconfigOption = None) -> None:
    """Print whether the cluster is ready; exit 1 unless it is."""
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


# ---------------------------------------------------------------------------------------------- bridge

_NAME: TypeAdapter[str] = TypeAdapter(Name)


def _name(value: str, option: str) -> str:
    """`value` as an eyrie name (a cluster's or a profile's), or a one-line error naming `option`."""
    try:
        return _NAME.validate_python(value.strip())
    except ValidationError:
        raise ConfigError(f"{option}: {value!r} is not a name (1 to 253 characters)") from None


def _profiles(schedulers: list[str], pairs: list[str]) -> dict[str, str]:
    """Scheduler name → eyrie profile: `DEFAULT_PROFILES` (``eyrie`` → ``default``; any other name its own
    profile), then each ``--profile-for SCHEDULER=PROFILE``."""
    from streams.kube.bridge import profile_of

    mapping = {name: profile_of(name) for name in schedulers}
    for pair in pairs:
        scheduler, equals, profile = (part.strip() for part in pair.partition("="))
        if not equals or not scheduler or not profile:
            raise ConfigError(f"--profile-for: expected SCHEDULER=PROFILE, got {pair!r}")
        if scheduler not in mapping:
            raise ConfigError(
                f"--profile-for: {scheduler!r} is not a --scheduler-name (these are: {', '.join(schedulers)})"
            )
        mapping[scheduler] = _name(profile, "--profile-for")
    return mapping


def _bridge_cluster(kubeconfig: str | None) -> tuple[KubeConfig, str]:
    """The API server to watch, and how it was found: ``--kubeconfig``, else ``KUBECONFIG``, else the local
    control plane's kubeconfig (`eyrie kube up`), else the pod's service account."""
    chosen = resolved_kubeconfig(kubeconfig)
    if chosen is not None:
        return KubeConfig.from_kubeconfig(
            chosen
        ), f"{'--kubeconfig' if kubeconfig else 'KUBECONFIG'} {chosen}"
    local = LocalControlPlane()
    if local.kubeconfig.is_file():
        return KubeConfig.from_kubeconfig(local.kubeconfig), f"local control plane {local.kubeconfig}"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return KubeConfig.in_cluster(), "service account"
    raise ControlPlaneError(
        "no cluster to watch: give --kubeconfig, set KUBECONFIG, start the local control plane (`eyrie kube "
        "up`), or run in a pod with a service account"
    )


@kube_app.command()
@kafka_options
@one_line_errors
def bridge(
    scheduler_name: Annotated[
        list[str] | None,
        typer.Option(
            "--scheduler-name",
            help="Place the pending pods whose spec.schedulerName is this; repeatable (default: eyrie)",
        ),
    ] = None,
    profile_for: Annotated[
        list[str] | None,
        typer.Option(
            "--profile-for",
            metavar="SCHEDULER=PROFILE",
            help="The eyrie profile that places a scheduler name's pods; repeatable (default: eyrie=default, "
            "and any other --scheduler-name the profile of its own name)",
        ),
    ] = None,
    cluster: Annotated[
        str, typer.Option("--cluster", help="The eyrie cluster the Nodes are published in")
    ] = "default",
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            "--kubeconfig",
            help="The cluster to watch (default: $KUBECONFIG, else the local control plane of `eyrie kube "
            "up`, else the pod's service account)",
        ),
    ] = None,
    label_selector: Annotated[
        str | None,
        typer.Option(
            "--label-selector",
            "-l",
            help="Only Nodes and Pods with these labels (kubectl's -l syntax). Pods outside it are not "
            "counted on their nodes: for a cluster whose eyrie nodes and all pods on them carry the labels, "
            "and for tests",
        ),
    ] = None,
    web_port: Annotated[
        int | None,
        typer.Option("--web-port", min=1, max=65535, help="Serve /health and /metrics on this port"),
    ] = None,
    web_host: Annotated[
        str | None,
        typer.Option(
            "--web-host",
            help="With --web-port: the address to listen on (env: EYRIE_WEB_HOST; default: 127.0.0.1; "
            "0.0.0.0 in a container)",
        ),
    ] = None,
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
) -> None:
    """Watch a Kubernetes cluster's Nodes and Pods and feed eyrie's topics, until Ctrl-C or SIGTERM.

    Nodes become node events; pending pods of --scheduler-name become pod requests, bound pods (whoever
    bound them) PodBound records, deleted or finished pods deletions. A pod eyrie cannot place (an
    unreadable quantity, a volume it cannot honour) becomes a dead letter naming the field and a
    FailedScheduling Warning event on the pod. A restarted bridge reads the topics first and publishes only
    what changed while it was down.
    """
    import asyncio

    from schemas.exceptions import EyrieError
    from streams.runtime.kube_bridge import BridgeService
    from streams.runtime.lifecycle import run_until_signal
    from streams.runtime.logs import log_as_service

    schedulers = list(dict.fromkeys(name.strip() for name in scheduler_name or ["eyrie"]))
    if not all(schedulers):
        raise ConfigError("--scheduler-name: must not be empty")
    profiles = _profiles(schedulers, profile_for or [])
    cluster_name = _name(cluster, "--cluster")
    if web_host is not None and web_port is None:
        raise ConfigError("--web-host: only with --web-port (without it no web server runs)")
    settings = settings_from(bootstrap, config, web_host=web_host)
    kube, where = _bridge_cluster(kubeconfig)
    log_as_service()
    service = BridgeService(
        settings,
        kube,
        where,
        schedulers=schedulers,
        profiles=profiles,
        cluster=cluster_name,
        label_selector=label_selector or None,
        web_port=web_port,
    )
    try:
        signalled = asyncio.run(run_until_signal(service.run()))
        reason = signalled.name if signalled is not None else "ended"
    except KeyboardInterrupt:
        reason = "SIGINT"  # a Ctrl-C before the loop took the signals over
    except EyrieError as exc:
        service.lifecycle.stopped(2, f"error: {' '.join(str(exc).split())}")
        raise
    except Exception as exc:
        service.lifecycle.stopped(1, f"crashed: {exc!r}")
        raise
    service.lifecycle.stopped(0, reason)
