"""`eyrie worker`, `eyrie applier`, `eyrie replay` and `eyrie record`: running and feeding the pipeline."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Annotated

import typer

from schemas.eventlog import EventLogWriter, read_events, replacing_text
from schemas.exceptions import ConfigError
from streams.cli_common import (
    BootstrapOption,
    ConfigOption,
    kafka_options,
    one_line_errors,
    progress,
    settings_from,
)

__all__ = ["applier", "record", "replay", "worker"]

RECORDABLE = ("metrics", "node-events", "pod-requests", "config")

WebPort = Annotated[int | None, typer.Option("--web-port", help="Serve Faust's web views on this port")]


def _run_role(role: str, bootstrap: str | None, config: Path | None, web_port: int | None) -> None:
    from streams.app import create_app, run_app
    from streams.topics import ensure_topics

    settings = settings_from(bootstrap, config)
    asyncio.run(ensure_topics(settings))  # a Faust agent on a missing topic subscribes to nothing
    run_app(create_app(settings, role, web_port=web_port))


@kafka_options
@one_line_errors
def worker(bootstrap: BootstrapOption = None, config: ConfigOption = None, web_port: WebPort = None) -> None:
    """Run a worker: forwarders, metrics agent and placement (stops on Ctrl-C or SIGTERM)."""
    _run_role("worker", bootstrap, config, web_port)


@kafka_options
@one_line_errors
def applier(bootstrap: BootstrapOption = None, config: ConfigOption = None, web_port: WebPort = None) -> None:
    """Run the applier: commits bindings against its ledger and reports results."""
    _run_role("applier", bootstrap, config, web_port)


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
    from streams.replay import replay_live, replay_offline, write_decisions

    if out is not None and not offline:
        raise ConfigError("--out: only with --offline (live decisions come from `eyrie decisions`)")
    for name, value in (("--speed", speed), ("--rate", rate)):
        if value is not None and not value > 0:
            raise ConfigError(f"{name}: must be greater than 0")
    settings = settings_from(bootstrap, config)
    # Counting the events also validates the whole log before anything is sent.
    total = sum(1 for _ in read_events(log, field="LOG"))
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
                stats = asyncio.run(
                    replay_live(log, settings, speed=speed, rate=rate, on_event=lambda: bar.advance(task))
                )
        if offline:
            write_decisions(result.decisions, sink)
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
    typer.echo(f"replayed {result.events} events offline in {result.seconds:.1f} s: {summary}", err=True)


@kafka_options
@one_line_errors
def record(
    out: Annotated[Path, typer.Option("--out", "-o", help="Event log to write (JSON Lines; .gz compresses)")],
    topics: Annotated[
        list[str] | None,
        typer.Option("--topics", help=f"Topics to record, repeatable (default: {', '.join(RECORDABLE)})"),
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep recording new records")] = False,
    until_idle: Annotated[
        float | None, typer.Option("--until-idle", help="With --follow: stop after N idle seconds")
    ] = None,
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
) -> None:
    """Record live topics into an event log that `eyrie replay` accepts."""
    from streams.client import EyrieClient
    from streams.record import record_topics

    chosen = topics or list(RECORDABLE)
    unknown = [t for t in chosen if t not in RECORDABLE]
    if unknown:
        raise ConfigError(f"--topics: cannot record {unknown[0]!r} (one of {', '.join(RECORDABLE)})")
    settings = settings_from(bootstrap, config)

    async def go() -> int:
        async with EyrieClient(settings) as client:
            with progress() as bar, EventLogWriter(out, field="--out") as writer:
                task = bar.add_task("recording", total=None)
                return await record_topics(
                    client,
                    chosen,
                    writer,
                    follow=follow,
                    until_idle=until_idle,
                    on_event=lambda: bar.advance(task),
                )

    count = asyncio.run(go())
    typer.echo(f"recorded {count} events to {out}", err=True)
