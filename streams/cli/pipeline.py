"""`eyrie worker`, `eyrie applier`, `eyrie replay` and `eyrie record`: running and feeding the pipeline."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from schemas.eventlog import EventLogWriter, read_events, replacing_text
from schemas.exceptions import ConfigError, KubeApiError
from streams.cli.common import (
    BootstrapOption,
    ConfigOption,
    kafka_options,
    one_line_errors,
    progress,
    settings_from,
)
from streams.settings import Settings

__all__ = ["applier", "record", "replay", "worker"]

_REFUSED_SHOWN = 20  # the rest are counted: a log of garbage must not flood the terminal

_KUBE_PROBE_S = 10.0
"""How long `eyrie applier --target kubernetes` waits for each of its start-up questions to the API server."""

RECORDABLE = ("metrics", "node-events", "pod-requests", "config")

WebPort = Annotated[int | None, typer.Option("--web-port", help="Serve /metrics and /health on this port")]
WebHost = Annotated[
    str | None,
    typer.Option(
        "--web-host",
        help="With --web-port: the address to listen on (env: EYRIE_WEB_HOST; default: 127.0.0.1; "
        "0.0.0.0 in a container)",
    ),
]


def _check_port_free(host: str, port: int) -> None:
    """Fail now, in one line, if the web server could not listen: Faust would find out only once it has
    joined the group, and print a traceback."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise ConfigError(
            f"--web-port: cannot resolve the web host {host!r}: {exc.strerror or exc}"
        ) from None
    family, kind, proto, _, address = addresses[0]
    with socket.socket(family, kind, proto) as probe:
        # As the web server will: a port left in TIME_WAIT by an earlier run is free to listen on.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            reason = "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise ConfigError(f"--web-port: cannot listen on {host}:{port}: {reason}") from None


def _check_kubernetes(settings: Settings) -> None:
    """Fail now, in one line naming the kubeconfig, if the applier could not bind through the API server:
    not found, unreachable, or an account without the RBAC the applier needs."""
    from streams.kube.api import KubeApi
    from streams.kube.binder import check_access, resolve_kube_config

    kube, source = resolve_kube_config(settings.kubeconfig)

    async def missing_permissions() -> list[str]:
        async with KubeApi(kube, request_timeout=_KUBE_PROBE_S) as api:
            return await check_access(api)

    try:
        missing = asyncio.run(missing_permissions())
    except KubeApiError as exc:
        raise ConfigError(
            f"--target kubernetes: {source}: API server {kube.server} unusable: {exc}"
        ) from None
    if missing:
        raise ConfigError(
            f"--target kubernetes: {source}: the account may not {', '.join(missing)} "
            "(the applier's RBAC is in docs/deployment.md)"
        )


def _run_role(
    role: str,
    bootstrap: str | None,
    config: Path | None,
    web_port: int | None,
    web_host: str | None,
    **flags: Any,
) -> None:
    from streams.runtime.app import create_app, run_app
    from streams.runtime.logs import log_as_service
    from streams.runtime.topics import ensure_topics

    log_as_service()

    if web_port is not None and not 1 <= web_port <= 65535:
        raise ConfigError(f"--web-port: {web_port} is not a TCP port (1-65535)")
    if web_host is not None and web_port is None:
        raise ConfigError("--web-host: only with --web-port (without it no web server runs)")
    settings = settings_from(bootstrap, config, web_host=web_host, **flags)
    if flags.get("kubeconfig") is not None and settings.apply_target != "kubernetes":
        raise ConfigError("--kubeconfig: only with --target kubernetes (the ledger target binds nothing)")
    if role == "applier" and settings.apply_target == "kubernetes":
        _check_kubernetes(settings)
    if web_port is not None:
        _check_port_free(settings.web_host, web_port)
    # The app first: a worker's app starts warming its placement code on a thread (`placement._warm`),
    # which then overlaps the topics' check and the group's join.
    app = create_app(settings, role, web_port=web_port)
    asyncio.run(ensure_topics(settings))  # a Faust agent on a missing topic subscribes to nothing
    run_app(app)


@kafka_options
@one_line_errors
def worker(
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
    web_port: WebPort = None,
    web_host: WebHost = None,
) -> None:
    """Run a worker: forwarders, metrics agent and placement (stops on Ctrl-C or SIGTERM)."""
    _run_role("worker", bootstrap, config, web_port, web_host)


@kafka_options
@one_line_errors
def applier(
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
    web_port: WebPort = None,
    web_host: WebHost = None,
    apply_target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="ledger: commit bindings to the ledger only; kubernetes: also bind the pods through the "
            "API server, with kube-scheduler's events and conditions (env: EYRIE_APPLY_TARGET; default: "
            "ledger)",
        ),
    ] = None,
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            "--kubeconfig",
            help="With --target kubernetes: the cluster's kubeconfig (env: EYRIE_KUBECONFIG; default: "
            "$KUBECONFIG, else the pod's service account)",
        ),
    ] = None,
) -> None:
    """Run the applier: commits bindings against its ledger (and, with --target kubernetes, binds the pods)
    and reports results."""
    if apply_target is not None and apply_target.strip().lower() not in ("ledger", "kubernetes"):
        raise ConfigError(f"--target: expected ledger or kubernetes, got {apply_target!r}")
    _run_role(
        "applier", bootstrap, config, web_port, web_host, apply_target=apply_target, kubeconfig=kubeconfig
    )


@kafka_options
@one_line_errors
def replay(
    log: Annotated[Path, typer.Argument(help="Event log (JSON Lines, optionally .gz)")],
    speed: Annotated[
        float | None, typer.Option("--speed", help="Log seconds per wall second (default: flat out)")
    ] = None,
    rate: Annotated[float | None, typer.Option("--rate", help="At most N events per second")] = None,
    offline: Annotated[
        bool, typer.Option("--offline", help="Run the pipeline's cores in process, without Kafka")
    ] = False,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="With --offline: write the decisions here")
    ] = None,
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
) -> None:
    """Replay a recorded event log, live through Kafka or --offline in process (same decisions)."""
    from streams.recording.replay import ReplayStats, replay_live, replay_offline, write_decisions
    from streams.runtime.lifecycle import run_until_signal

    if out is not None and not offline:
        raise ConfigError("--out: only with --offline (live decisions come from `eyrie decisions`)")
    if offline:
        for flag, given in (("--speed", speed), ("--rate", rate)):
            if given is not None:
                raise ConfigError(f"{flag}: only without --offline (an offline replay runs flat out)")
    for name, value in (("--speed", speed), ("--rate", rate)):
        if value is not None and not value > 0:
            raise ConfigError(f"{name}: must be greater than 0")
    settings = settings_from(bootstrap, config)
    # Counting the events also validates the whole log before anything is sent.
    try:
        total = sum(1 for _ in read_events(log, field="LOG"))
    except KeyboardInterrupt:
        typer.echo("interrupted by SIGINT while reading the log: nothing was published", err=True)
        raise typer.Exit(128 + signal.SIGINT) from None
    stats, signalled = ReplayStats(), None
    # Opened before the replay, so a path that cannot be written fails now, not after a long offline run;
    # the file appears only once every decision is written (an earlier one stays if the replay fails).
    with (
        replacing_text(out, field="--out") if out is not None else contextlib.nullcontext(sys.stdout) as sink
    ):
        with progress() as bar:
            task = bar.add_task("replaying", total=total)
            if offline:
                result = replay_offline(log, settings, on_event=lambda: bar.advance(task))
            else:
                live = replay_live(
                    log, settings, speed=speed, rate=rate, on_event=lambda: bar.advance(task), stats=stats
                )
                signalled = asyncio.run(run_until_signal(live))
        if offline:
            write_decisions(result.decisions, sink)
    if signalled is not None:
        # Say how far it got, and whether placement still holds live input for it (see `replay_live`).
        if stats.ended:
            ended = ", then ended its session"
        elif stats.watermarks == 0:
            ended = "; its session had not begun"
        else:
            after = f"{settings.replay_session_timeout_s:g} s"
            ended = f", but could not end its session (placement ends it {after} after its last watermark)"
        typer.echo(
            f"interrupted by {signalled.name}: published {stats.events} of {total} events{ended}", err=True
        )
        raise typer.Exit(128 + signalled)
    if not offline:
        typer.echo(
            f"published {stats.events} events ({stats.watermarks} watermarks) in {stats.seconds:.1f} s "
            f"to {settings.bootstrap_servers}",
            err=True,
        )
        return
    counts: dict[str, int] = {}
    for decision in result.decisions:
        counts[decision.status] = counts.get(decision.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no pods"
    if result.refused:
        summary += f"; {len(result.refused)} refused (live, dead letters)"
    typer.echo(f"replayed {result.events} events offline in {result.seconds:.1f} s: {summary}", err=True)
    for reason in result.refused[:_REFUSED_SHOWN]:
        typer.echo(f"refused: {reason}", err=True)
    if len(result.refused) > _REFUSED_SHOWN:
        typer.echo(f"refused: ... and {len(result.refused) - _REFUSED_SHOWN} more", err=True)


@kafka_options
@one_line_errors
def record(
    out: Annotated[Path, typer.Option("--out", "-o", help="Event log to write (JSON Lines; .gz compresses)")],
    source: Annotated[
        str,
        typer.Option(
            "--source",
            help="sequencer: what placement applied, in its order and at its times (replay --offline then "
            "makes the live decisions); topics: the input topics' records as they are",
        ),
    ] = "sequencer",
    topics: Annotated[
        list[str] | None,
        typer.Option(
            "--topics",
            help=f"With --source topics: topics to record, repeatable (default: {', '.join(RECORDABLE)})",
        ),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep recording new records (until Ctrl-C or SIGTERM)")
    ] = False,
    until_idle: Annotated[
        float | None, typer.Option("--until-idle", help="With --follow: stop after N idle seconds")
    ] = None,
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
) -> None:
    """Record what placement applied (or the input topics) into an event log that `eyrie replay` accepts.
    Lines are flushed as they come; Ctrl-C or SIGTERM ends the log properly."""
    from streams.client import EyrieClient
    from streams.recording.record import SOURCES, record_sequencer, record_topics
    from streams.runtime.lifecycle import run_until_signal

    if source not in SOURCES:
        raise ConfigError(f"--source: {source!r} is not one of {', '.join(SOURCES)}")
    if topics and source != "topics":
        raise ConfigError("--topics: only with --source topics (placement's inputs are one topic)")
    if until_idle is not None and not follow:
        raise ConfigError("--until-idle: only with --follow (without it, record stops at the topics' end)")
    if until_idle is not None and not until_idle > 0:
        raise ConfigError("--until-idle: must be greater than 0")
    chosen = topics or list(RECORDABLE)
    unknown = [t for t in chosen if t not in RECORDABLE]
    if unknown:
        raise ConfigError(f"--topics: cannot record {unknown[0]!r} (one of {', '.join(RECORDABLE)})")
    settings = settings_from(bootstrap, config)
    written: list[EventLogWriter] = []

    async def go() -> None:
        async with EyrieClient(settings) as client:
            with progress() as bar, EventLogWriter(out, field="--out") as writer:
                written.append(writer)
                task = bar.add_task("recording", total=None)

                def advance() -> None:
                    bar.advance(task)

                if source == "topics":
                    await record_topics(
                        client, chosen, writer, follow=follow, until_idle=until_idle, on_event=advance
                    )
                else:
                    await record_sequencer(
                        client, writer, follow=follow, until_idle=until_idle, on_event=advance
                    )

    try:
        signalled = asyncio.run(run_until_signal(go()))
    except KeyboardInterrupt:  # before the handlers were in place
        signalled = signal.SIGINT
    count = written[0].count if written else 0
    if signalled is not None:
        typer.echo(f"interrupted by {signalled.name}: recorded {count} events to {out}", err=True)
        raise typer.Exit(128 + signalled)
    typer.echo(f"recorded {count} events to {out}", err=True)
