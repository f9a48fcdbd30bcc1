"""`eyrie trace convert KIND SRC -o LOG.jsonl`: public cluster traces → a recorded event log.

The summary (events per topic, rows, bad rows) goes to stderr as one line, followed by the first bad rows,
so stdout stays free for ``-o -``. Some bad rows do not fail the command; bad arguments exit 2 with one line,
and so does a source that yields none of the kind's data (every row bad, or none at all): the wrong kind of
trace, or the wrong folder. Its output is removed then, as it holds nothing of the trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from evaluation.traces import CONVERTERS
from evaluation.traces.alibaba2018 import DEFAULT_BANDWIDTH_FULL_SCALE, DEFAULT_MEMORY_FULL_SCALE
from evaluation.traces.alibaba_gpu2023 import DEFAULT_PODS
from evaluation.traces.bitbrains import DEFAULT_NODE
from schemas.exceptions import InvalidInput
from streams.cli.common import one_line_errors, stderr

__all__ = ["trace_app"]

trace_app = typer.Typer(
    help="Convert public cluster traces into event logs.", no_args_is_help=True, add_completion=False
)

# Which kind each kind-specific option belongs to: giving it to another kind is a mistake worth a message.
_OPTION_KIND = {
    "node": ("--node", "bitbrains"),
    "memory_full_scale": ("--memory-full-scale", "alibaba-2018"),
    "bandwidth_full_scale": ("--bandwidth-full-scale", "alibaba-2018"),
    "pods": ("--pods", "alibaba-gpu-2023"),
    "nodes": ("--nodes", "alibaba-gpu-2023"),
}


# What each kind turns its data rows into, and what it expects to read: no such event means the source
# was not that kind of trace.
_DATA_TOPIC = {
    "bitbrains": (
        "metrics",
        "GWA-T-12 per-VM CSVs (a header, then 11 ';'-separated columns: Timestamp; CPU cores; ...)",
    ),
    "alibaba-2018": (
        "metrics",
        "cluster-trace-v2018 machine_meta.csv (machine_id,time_stamp,...: 7 columns) and machine_usage.csv "
        "(machine_id,time_stamp,cpu_util_percent,...: 9 columns)",
    ),
    "alibaba-gpu-2023": (
        "pod-requests",
        "an openb pod list (header name,cpu_milli,memory_mib,num_gpu,gpu_milli,..., then one pod a row)",
    ),
}


@trace_app.callback()
def _trace() -> None:
    """Convert public cluster traces into event logs."""
    # A callback keeps `convert` a subcommand: Typer would otherwise collapse a one-command app into it.


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
        disable=not stderr.is_terminal,
    )


@trace_app.command("convert")
@one_line_errors
def convert(
    kind: Annotated[str, typer.Argument(help=f"Trace kind: {', '.join(CONVERTERS)}", show_default=False)],
    src: Annotated[
        Path,
        typer.Argument(
            help="bitbrains: a folder of per-VM CSVs or one CSV; alibaba-2018: the folder of "
            "machine_meta.csv and machine_usage.csv; alibaba-gpu-2023: the openb folder or a pod list CSV",
            show_default=False,
        ),
    ],
    out: Annotated[str, typer.Option("--out", "-o", help="Event log to write (.gz compresses, - is stdout)")],
    limit: Annotated[
        int | None, typer.Option("--limit", min=0, help="Stop after this many events (for tests and demos)")
    ] = None,
    node: Annotated[
        str | None,
        typer.Option("--node", help=f"bitbrains: node name of every sample (default: {DEFAULT_NODE})"),
    ] = None,
    memory_full_scale: Annotated[
        str | None,
        typer.Option(
            "--memory-full-scale",
            help="alibaba-2018: memory that mem_size 100 stands for (a quantity) "
            f"(default: {DEFAULT_MEMORY_FULL_SCALE})",
        ),
    ] = None,
    bandwidth_full_scale: Annotated[
        str | None,
        typer.Option(
            "--bandwidth-full-scale",
            help="alibaba-2018: bits/s that net_in or net_out 100 stands for "
            f"(default: {DEFAULT_BANDWIDTH_FULL_SCALE})",
        ),
    ] = None,
    pods: Annotated[
        str | None,
        typer.Option(
            "--pods", help=f"alibaba-gpu-2023: pod list openb_pod_list_NAME.csv (default: {DEFAULT_PODS})"
        ),
    ] = None,
    nodes: Annotated[
        Path | None,
        typer.Option(
            "--nodes",
            help="alibaba-gpu-2023: node list (default: openb_node_list_all_node.csv beside the pods)",
        ),
    ] = None,
    show_bad: Annotated[
        int, typer.Option("--show-bad", min=0, help="How many bad rows to list after the summary")
    ] = 10,
) -> None:
    """Convert a public cluster trace into an event log ordered by time.

    Malformed rows are skipped and reported (file:line: reason); the conversion always finishes.
    """
    converter = CONVERTERS.get(kind)
    if converter is None:
        raise InvalidInput(
            f"unknown trace kind {kind!r} (expected one of {', '.join(CONVERTERS)})", field="kind"
        )
    given: dict[str, Any] = {
        "node": node,
        "memory_full_scale": memory_full_scale,
        "bandwidth_full_scale": bandwidth_full_scale,
        "pods": pods,
        "nodes": nodes,
    }
    options: dict[str, Any] = {}
    for name, value in given.items():
        if value is None:
            continue
        flag, owner = _OPTION_KIND[name]
        if owner != kind:
            raise InvalidInput(f"{flag} applies to {owner}, not {kind}", field=flag.lstrip("-"))
        options[name] = value

    with _progress() as progress:
        task: TaskID = progress.add_task("starting", total=None)

        def on_progress(phase: str, done: int, total: int) -> None:
            progress.update(task, description=phase, completed=done, total=total)

        summary = converter(src, out, limit=limit, progress=on_progress, **options)
    topic, expected = _DATA_TOPIC[kind]
    if not summary.truncated and summary.events.get(topic, 0) == 0:
        if out != "-":
            Path(out).unlink(missing_ok=True)
        found = (
            f"no row converts ({summary.bad_row_count:,} bad rows, the first {summary.bad_rows[0]})"
            if summary.bad_rows
            else "it holds no data rows"
        )
        raise InvalidInput(f"no {topic} events from {src}: {found}; {kind} expects {expected}", field="src")
    typer.echo(summary.one_line(), err=True)
    for bad in summary.bad_rows[:show_bad]:
        typer.echo(f"  bad row {bad}", err=True)
    hidden = summary.bad_row_count - min(show_bad, len(summary.bad_rows))
    if hidden > 0 and show_bad > 0:
        typer.echo(f"  … and {hidden} more bad rows", err=True)
