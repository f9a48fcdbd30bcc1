"""The ``eyrie`` command. Every command exits 2 with one line ``error: ...`` on bad input."""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ParamSpec, TypeVar, cast

import typer

# Typer vendors Click; its usage errors are only importable from there (typer is pinned exactly).
from typer._click import exceptions as click_errors

from schemas.exceptions import EyrieError, InvalidInput
from schemas.jsonschema import export_schemas
from streams.cli.broker import broker_app
from streams.cli.clusters import clusters_app
from streams.cli.common import (
    BootstrapOption,
    ConfigOption,
    UntilIdleOption,
    check_follow,
    check_output,
    json_line,
    kafka_options,
    one_line_errors,
    print_table,
    progress,
    run,
    settings_from,
)
from streams.cli.inspect import (
    dead_letters,
    nodes,
    pending,
    profiles_app,
    send_documents,
    validated_documents,
)
from streams.cli.kube import kube_app
from streams.cli.pipeline import applier, record, replay, worker
from streams.cli.trace import trace_app
from streams.client import Decision, EyrieClient
from streams.runtime.logs import configure_logging, parse_format, parse_level
from streams.runtime.topics import ensure_topics

if TYPE_CHECKING:
    from evaluation.experiments.portrait import RequestRule

__all__ = ["app", "main"]

P = ParamSpec("P")
R = TypeVar("R")

app = typer.Typer(
    name="eyrie",
    help="Streaming, load-aware pod placement over Kafka.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(broker_app, name="broker", help="Run a local single-node Kafka broker (KRaft).")
app.add_typer(
    kube_app,
    name="kube",
    help="Kubernetes: a local control plane, and the bridge that feeds a cluster's nodes and pods to eyrie.",
)
schema_app = typer.Typer(help="JSON Schemas of the wire models.", no_args_is_help=True)
app.add_typer(schema_app, name="schema")
topics_app = typer.Typer(help="Kafka topics.", no_args_is_help=True)
app.add_typer(topics_app, name="topics")
app.add_typer(trace_app, name="trace", help="Convert public cluster traces into event logs.")
app.add_typer(clusters_app, name="clusters", help="Multi-cluster estimates and division (Karmada).")
for _command in (worker, applier, replay, record):
    app.command()(_command)
app.add_typer(profiles_app, name="profiles")
app.command("dead-letters")(dead_letters)
app.command("nodes")(nodes)
app.command("pending")(pending)


@app.callback()
@one_line_errors
def _configure(
    ctx: typer.Context,
    log_level: Annotated[
        str | None,
        typer.Option(
            "--log-level",
            envvar="EYRIE_LOG_LEVEL",
            help="debug, info, warning or error: eyrie's own log lines from this level (worker and applier "
            "default: info; other commands log nothing unless asked); the libraries' from warning",
        ),
    ] = None,
    log_format: Annotated[
        str,
        typer.Option("--log-format", envvar="EYRIE_LOG_FORMAT", help="text, or json: one object per line"),
    ] = "text",
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Also the libraries' info lines (Faust, Kafka client)"),
    ] = False,
) -> None:
    # Log lines go to stderr. A one-shot command's failure is one `error:` line, so it shows log lines
    # only when asked for; a command that runs until stopped turns its own on (`log_as_service`).
    level = parse_level(log_level) if log_level is not None else logging.INFO
    fmt = parse_format(log_format)
    configure_logging(level=level, fmt=fmt, verbose=verbose, quiet=not (verbose or log_level is not None))


@app.command()
@kafka_options
@one_line_errors
def publish(
    files: Annotated[
        list[Path],
        typer.Argument(help="JSON, JSON Lines, YAML, Kubernetes Pod manifests or scheduler profiles"),
    ],
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate only; publish nothing")] = False,
) -> None:
    """Publish pod requests, deletions, node events, metric samples and scheduler profiles.

    Every file is validated before anything is sent (a profile as the workers will check it), so a bad file
    publishes nothing.
    """
    total = sum(1 for path in files for _ in validated_documents(path))
    if dry_run:
        typer.echo(f"{total} documents valid")
        return
    settings = settings_from(bootstrap, config)
    documents = (document for path in files for document in validated_documents(path))
    with progress() as bar:
        task = bar.add_task("publishing", total=total)
        sent = send_documents(settings, documents, on_sent=lambda: bar.advance(task))
    typer.echo(f"published {sent} record{'' if sent == 1 else 's'} to {settings.bootstrap_servers}")


@app.command()
@kafka_options
@one_line_errors
def decisions(
    from_beginning: Annotated[
        bool,
        typer.Option(
            "--from-beginning",
            help="With --follow: start at the beginning of the topics instead of their end",
        ),
    ] = False,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing results as they arrive")
    ] = False,
    until_idle: UntilIdleOption = None,
    output: Annotated[
        str,
        typer.Option(
            "--output", "-o", help="json (one object per line) or table (without --follow: one table)"
        ),
    ] = "json",
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
) -> None:
    """Print each pod's decision: uid, namespace, name, status, node, cluster, reasons, time (and profile,
    score, attempt, and `at` in Unix seconds).

    Without --follow: every pod's latest state, read from the beginning to the current end, in decision
    order. With --follow: a line each time a pod gets a result (applied, conflict, rejected, unschedulable)
    or is deleted.
    """
    check_output(output, follow=follow)
    check_follow("decisions", follow=follow, from_beginning=from_beginning, until_idle=until_idle)
    settings = settings_from(bootstrap, config)

    async def stream() -> None:
        async with EyrieClient(settings) as client:
            found = client.decisions(
                from_beginning=from_beginning or not follow, follow=follow, until_idle=until_idle
            )
            if output == "table":
                _print_table([decision async for decision in found])
                return
            async for decision in found:
                json_line(decision.to_json(), flush=follow)

    run(stream())


def _print_table(found: list[Decision]) -> None:
    """The decisions as a table on stdout."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NAMESPACE", "NAME", "UID", "STATUS", "NODE", "CLUSTER", "TIME", "REASONS"):
        table.add_column(column, overflow="fold")
    for decision in found:
        table.add_row(
            decision.namespace or "",
            decision.name or "",
            decision.uid,
            decision.status,
            decision.node or "",
            decision.cluster or "",
            decision.time or "",
            "; ".join(decision.reasons),
        )
    print_table(table)


@app.command()
@one_line_errors
def explain(
    nodes: Annotated[
        Path,
        typer.Option(
            "--nodes",
            help="A list of node states (see docs/cli.md), or a Kubernetes List of Nodes and Pods (and "
            "Namespaces, Services, ReplicationControllers, ReplicaSets, StatefulSets) as "
            "`kubectl get nodes,pods -A -o yaml` prints it; JSON or YAML (.yaml, .yml)",
        ),
    ],
    pod: Annotated[
        Path, typer.Option("--pod", help="A PodRequest or a Kubernetes Pod manifest, JSON or YAML")
    ],
    profile: Annotated[
        Path | None,
        typer.Option(
            "--profile", help="KubeSchedulerConfiguration-style YAML (or JSON), beside the built-in profiles"
        ),
    ] = None,
    scheduler_name: Annotated[
        str | None,
        typer.Option(
            "--scheduler-name",
            help="Explain with this profile (default: the --profile file's only profile, else the pod's "
            "scheduler_name)",
        ),
    ] = None,
) -> None:
    """Explain one placement: which filter dropped each node and why, every plugin's score, the totals.

    The profile is chosen as a worker chooses it: a pod naming a profile that neither the built-ins nor
    --profile hold is unschedulable (selected null, with the reason), never explained with another. The
    output names the profile it ran.
    """
    from policies.explain import (
        explain_files,
        explain_in_cluster,
        load_pod,
        read_document,
        resolve_profiles,
        scheduler_for_cluster,
    )
    from schemas.manifest import is_pod_manifest
    from streams.kube.dump import is_kube_list, read_cluster_dump

    document = read_document(nodes)
    if not is_kube_list(document):
        json_line(explain_files(nodes, pod, profile, scheduler_name).to_json())
        return
    try:
        dump = read_cluster_dump(document)
    except InvalidInput as exc:
        raise InvalidInput(f"{nodes}: {exc}") from None
    request, extras = load_pod(pod)
    request = dump.with_namespace_labels(request)
    # A manifest names its controller (ownerReferences), which the PodRequest it becomes does not keep.
    pod_document = read_document(pod)
    metadata = pod_document.get("metadata") if is_pod_manifest(pod_document) else None
    request = dump.with_default_selector(request, metadata if isinstance(metadata, dict) else None)
    profiles, name = resolve_profiles(profile, scheduler_name, request)
    occupants = [(occupant.pod, occupant.node) for occupant in dump.occupants]
    scheduler = scheduler_for_cluster(dump.nodes, occupants, profiles)
    json_line(explain_in_cluster(scheduler, request, extras, pod, name).to_json())


_EVALUATE_OPTIONS: dict[str, tuple[str, ...]] = {
    "--experiment portrait": ("trace", "policy", "nodes", "replicas", "requests", "demand", "seeds"),
    "--experiment tbesk-paper": (
        "trace",
        "pods",
        "step",
        "population",
        "iterations",
        "window",
        "batch",
        "trace_pods",
        "trace_limit",
    ),
    "--experiment gpu-sharing": ("trace_dir", "pod_list", "profiles"),
    "--all": (
        "trace",
        "policy",
        "nodes",
        "replicas",
        "requests",
        "demand",
        "seeds",
        "trace_pods",
        "trace_limit",
        "deletions",
        "jobs",
    ),
}
"""The options each way of running `eyrie evaluate` reads, besides --out and --seed, which all read."""


def _refuse_unread_options(ctx: typer.Context, mode: str) -> None:
    """An option the chosen experiment does not read is an error, never silently dropped."""
    for name in ctx.params:
        readers = [key for key, names in _EVALUATE_OPTIONS.items() if name in names]
        if not readers or mode in readers:
            continue
        # By name: Typer ships its own copy of Click, whose enum is not the one `click.core` would import.
        source = ctx.get_parameter_source(name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            raise InvalidInput(f"--{name.replace('_', '-')}: only with {' or '.join(readers)}")


@app.command()
@one_line_errors
def evaluate(
    ctx: typer.Context,
    experiment: Annotated[
        str | None,
        typer.Option("--experiment", help="Which experiment: portrait, tbesk-paper, gpu-sharing"),
    ] = None,
    all_profiles: Annotated[
        bool,
        typer.Option(
            "--all",
            help="The evaluation report: every built-in profile on the Alibaba GPU 2023 trace (placement) "
            "and on Bitbrains (the portrait experiment)",
        ),
    ] = False,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            help="The trace directory the experiment reads (portrait: required; tbesk-paper: the Alibaba GPU "
            "2023 trace instead of the paper's pod generator; --all: the folder holding alibaba_gpu_v2023 "
            "and bitbrains_rnd_2013-7, default ../shared/traces beside the repository)",
        ),
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Where to write the table, CSV and plots")] = Path(
        "evaluation"
    ),
    policy: Annotated[
        list[str] | None, typer.Option("--policy", help="Profiles to compare (repeat; default: all four)")
    ] = None,
    nodes: Annotated[
        int, typer.Option("--nodes", min=1, max=10000, help="portrait, --all: equal nodes in the cluster")
    ] = 6,
    replicas: Annotated[int, typer.Option("--replicas", min=1, max=1000, help="Copies of each workload")] = 4,
    requests: Annotated[
        str,
        typer.Option(
            "--requests",
            help="portrait, --all: what each VM requests: usage (sized from its training usage as the "
            "Vertical Pod Autoscaler would) or declared (its provisioned cores and memory)",
        ),
    ] = "usage",
    demand: Annotated[
        float,
        typer.Option(
            "--demand",
            min=0.1,
            max=100.0,
            help="portrait, --all: the pods' total requests over the cluster's, per resource; sizes the "
            "nodes",
        ),
    ] = 1.25,
    seeds: Annotated[
        int,
        typer.Option(
            "--seeds", min=1, max=100, help="portrait, --all: arrival orders (--seed, --seed + 1, …)"
        ),
    ] = 3,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            help="portrait, --all: the first arrival order (default 42); tbesk-paper: pods, optimisers "
            "(1); gpu-sharing: shuffle and inflation (42)",
        ),
    ] = None,
    pods: Annotated[
        int, typer.Option("--pods", min=1, max=100000, help="tbesk-paper: the last pod count")
    ] = 1800,
    step: Annotated[int, typer.Option("--step", min=1, max=100000, help="tbesk-paper: pod count step")] = 100,
    population: Annotated[
        int, typer.Option("--population", min=2, max=10000, help="tbesk-paper: eagles per population")
    ] = 30,
    iterations: Annotated[
        int, typer.Option("--iterations", min=0, max=100000, help="tbesk-paper: optimiser iterations")
    ] = 100,
    window: Annotated[
        int, typer.Option("--window", min=1, max=100000, help="tbesk-paper: TBESK-Z's pods per window")
    ] = 20,
    batch: Annotated[
        int, typer.Option("--batch", min=1, max=100000, help="tbesk-paper --trace: pods per batch")
    ] = 500,
    trace_pods: Annotated[
        str, typer.Option("--trace-pods", help="tbesk-paper --trace: which openb_pod_list_<NAME>.csv")
    ] = "default",
    trace_limit: Annotated[
        int | None,
        typer.Option(
            "--trace-limit", min=1, help="tbesk-paper --trace, --all: at most this many GPU-trace pods"
        ),
    ] = None,
    deletions: Annotated[
        bool,
        typer.Option(
            "--deletions",
            help="--all: replay the GPU trace's creation and deletion times (slow for tbesk, tbesk-z)",
        ),
    ] = False,
    jobs: Annotated[
        int,
        typer.Option("--jobs", min=1, max=64, help="--all: processes for the profiles (same figures)"),
    ] = 1,
    trace_dir: Annotated[
        Path | None,
        typer.Option(
            "--trace-dir",
            help="gpu-sharing: the openb trace folder (default ../shared/traces/alibaba_gpu_v2023 beside "
            "the repository)",
        ),
    ] = None,
    pod_list: Annotated[
        list[str] | None,
        typer.Option(
            "--pod-list",
            help="gpu-sharing: openb_pod_list_<NAME>.csv to run (repeat; default: default, "
            "gpushare100, multigpu50)",
        ),
    ] = None,
    profiles: Annotated[
        list[str] | None,
        typer.Option(
            "--profiles",
            help="gpu-sharing: built-in profiles to compare (repeat or comma-separate; default: default, "
            "balanced, tbesk-z and the GPU profiles)",
        ),
    ] = None,
) -> None:
    """Run an offline experiment; prints a table, writes it with plots to OUT, and ends with one JSON line."""
    from evaluation.experiments import (
        EXPERIMENTS,
        PORTRAIT_PROFILES,
        PortraitExperiment,
    )
    from evaluation.experiments.portrait import REQUEST_RULES, run_portrait_seeds
    from evaluation.experiments.report import across_seeds, write_portrait_report

    _check_out_directory(out)
    if all_profiles and experiment is not None:
        raise InvalidInput("--all: give either --experiment or --all, not both")
    if not all_profiles:
        if experiment is None:
            raise InvalidInput(
                f"--experiment: required ({', '.join(EXPERIMENTS)}), or --all for the evaluation report"
            )
        if experiment not in EXPERIMENTS:
            raise InvalidInput(f"--experiment: unknown {experiment!r} (known: {', '.join(EXPERIMENTS)})")
    _refuse_unread_options(ctx, "--all" if all_profiles else f"--experiment {experiment}")
    if requests not in REQUEST_RULES:
        raise InvalidInput(f"--requests: unknown {requests!r} (known: {', '.join(REQUEST_RULES)})")
    if all_profiles:
        _evaluate_all(
            trace,
            out,
            policy,
            nodes,
            replicas,
            seed,
            trace_pods,
            trace_limit,
            deletions,
            jobs,
            _PortraitOptions(requests, demand, seeds),
        )
        return
    if experiment == "gpu-sharing":
        from evaluation.experiments.gpu_sharing import evaluate_gpu_sharing

        with progress() as bar:
            task = bar.add_task("gpu-sharing", total=None)
            summary, text = evaluate_gpu_sharing(
                trace_dir, pod_list, profiles, out, seed, lambda what: bar.update(task, description=what)
            )
        typer.echo(text)
        json_line(summary)
        return
    if experiment == "tbesk-paper":
        from evaluation.experiments.tbesk import TbeskExperiment, run_and_report

        if pods < step:
            raise InvalidInput(f"--step: {step} is more than --pods {pods}")
        setup_tbesk = TbeskExperiment(
            pods=pods,
            step=step,
            population=population,
            iterations=iterations,
            seed=1 if seed is None else seed,
            window=window,
            trace=trace,
            trace_pods=trace_pods,
            batch=batch,
            trace_limit=trace_limit,
        )
        with progress() as bar:
            task = bar.add_task("tbesk-paper", total=None)
            result, _, text = run_and_report(
                setup_tbesk, out, lambda what: bar.update(task, description=what)
            )
        typer.echo(text)
        json_line(result.summary())
        return
    if trace is None:
        raise InvalidInput("--trace: required by the portrait experiment")
    seed = 42 if seed is None else seed
    setup = PortraitExperiment(
        trace=trace,
        profiles=tuple(policy or PORTRAIT_PROFILES),
        nodes=nodes,
        replicas=replicas,
        seed=seed,
        requests=requests,
        demand=demand,
    )
    runs, described = run_portrait_seeds(setup, [seed + i for i in range(seeds)])
    context = {
        "command": f"eyrie evaluate --experiment portrait --trace {trace} --out {out}"
        + "".join(f" --policy {name}" for name in policy or ())
        + f" --nodes {nodes} --replicas {replicas} --requests {requests} --demand {demand:g}"
        + f" --seed {seed} --seeds {seeds}",
        "VMs": f"{described['vms']} (left out: {described['vms_left_out']})",
        "requests": requests,
        "requested": f"{described['requested']} ({setup.replicas} replicas per VM)",
        "nodes": f"{setup.nodes} × {described['node_size']} (demand {demand:g})",
        "training days": setup.train_days,
        "replayed hours": described["replay_hours"],
        "seeds": ", ".join(str(seed + i) for i in range(seeds)),
    }
    written = write_portrait_report(runs[0], out, context, runs)
    typer.echo((out / "results.md").read_text().split("\n\n", 1)[-1].rstrip())
    typer.echo(f"wrote {', '.join(str(path) for path in written)}")
    json_line(across_seeds(runs))


def _check_out_directory(out: Path) -> None:
    """--out is a directory the report can be written into, checked before the experiment's minutes."""
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"--out: {out} is a file (the report is a directory of files)")
    existing = next((path for path in (out, *out.absolute().parents) if path.exists()), None)
    if existing is not None and not existing.is_dir():
        raise InvalidInput(f"--out: {existing} is a file, so {out} cannot be a directory")
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise InvalidInput(f"--out: {existing}: permission denied")


@dataclass(frozen=True, slots=True)
class _PortraitOptions:
    requests: str
    demand: float
    seeds: int


def _evaluate_all(
    trace: Path | None,
    out: Path,
    policy: list[str] | None,
    nodes: int,
    replicas: int,
    seed: int | None,
    trace_pods: str,
    trace_limit: int | None,
    deletions: bool,
    jobs: int,
    portrait: _PortraitOptions,
) -> None:
    """`eyrie evaluate --all`: the evaluation report (evaluation.experiments.suite)."""
    from evaluation.experiments.suite import DEFAULT_TRACES, SuiteExperiment, run_suite
    from evaluation.experiments.suite_report import gpu_table, portrait_table, write_suite_report
    from policies.framework.profile import BUILTIN_PROFILES

    setup = SuiteExperiment(
        traces=DEFAULT_TRACES if trace is None else trace,
        profiles=tuple(policy) if policy else tuple(BUILTIN_PROFILES),
        trace_pods=trace_pods,
        limit=trace_limit,
        deletions=deletions,
        portrait_nodes=nodes,
        replicas=replicas,
        seed=42 if seed is None else seed,
        portrait_requests=cast("RequestRule", portrait.requests),  # the caller checked it
        portrait_demand=portrait.demand,
        portrait_seeds=portrait.seeds,
        jobs=jobs,
    )
    # The command as it could be typed again, with only what differs from the defaults.
    command = " ".join(
        [
            "eyrie evaluate --all",
            *([f"--trace {trace}"] if trace is not None else []),
            f"--out {out}",
            *(f"--policy {name}" for name in policy or ()),
            *([f"--trace-pods {trace_pods}"] if trace_pods != "default" else []),
            *([f"--trace-limit {trace_limit}"] if trace_limit is not None else []),
            *(["--deletions"] if deletions else []),
            *([f"--nodes {nodes}"] if nodes != 6 else []),
            *([f"--replicas {replicas}"] if replicas != 4 else []),
            *([f"--requests {portrait.requests}"] if portrait.requests != "usage" else []),
            *([f"--demand {portrait.demand:g}"] if portrait.demand != 1.25 else []),
            *([f"--seeds {portrait.seeds}"] if portrait.seeds != 3 else []),
            *([f"--seed {seed}"] if seed is not None else []),
            *([f"--jobs {jobs}"] if jobs != 1 else []),
        ]
    )
    with progress() as bar:
        task = bar.add_task("evaluation report", total=None)
        result = run_suite(setup, lambda what: bar.update(task, description=what))
    written = write_suite_report(result, out, command)
    typer.echo(gpu_table(result.gpu, deletions=deletions).rstrip())
    if result.bitbrains:
        typer.echo("")
        typer.echo(portrait_table(result).rstrip())
    typer.echo(f"wall time: {result.seconds['total']:.1f} s")
    typer.echo(f"wrote {', '.join(str(path) for path in written)}")
    json_line(result.summary())


@topics_app.command("create")
@kafka_options
@one_line_errors
def topics_create(bootstrap: BootstrapOption = None, config: ConfigOption = None) -> None:
    """Create every eyrie topic that does not exist yet (idempotent)."""
    settings = settings_from(bootstrap, config)
    created = run(ensure_topics(settings))
    typer.echo(f"created {len(created)} topics" + (f": {', '.join(created)}" if created else " (all exist)"))


@schema_app.command("export")
@one_line_errors
def schema_export(directory: Annotated[Path, typer.Argument(help="Directory to write into")]) -> None:
    """Write one JSON Schema per wire model into DIRECTORY."""
    try:
        written = export_schemas(directory)
    except OSError as exc:
        raise EyrieError(f"{directory}: {exc.strerror or exc}") from None
    typer.echo(f"wrote {len(written)} schemas to {directory}")


_GLOBAL_WITH_VALUE = ("--log-level", "--log-format")
_GLOBAL_FLAGS = ("--verbose", "-v")


def _global_options_first(args: list[str]) -> list[str]:
    """`eyrie worker --log-level debug` means what `eyrie --log-level debug worker` does: the logging
    options belong to the `eyrie` command, but an operator types them after the subcommand too."""
    moved: list[str] = []
    rest: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            rest.extend(args[index:])
            break
        if arg in _GLOBAL_FLAGS or (arg.split("=", 1)[0] in _GLOBAL_WITH_VALUE and "=" in arg):
            moved.append(arg)
        elif arg in _GLOBAL_WITH_VALUE and index + 1 < len(args):
            moved.extend(args[index : index + 2])
            index += 1
        else:
            rest.append(arg)
        index += 1
    return moved + rest


def main() -> None:
    # Click's usage errors are a multi-line panel by default; eyrie's contract is one line and exit 2.
    try:
        code = app(args=_global_options_first(sys.argv[1:]), standalone_mode=False)
    except click_errors.NoArgsIsHelpError as error:
        typer.echo(error.ctx.get_help() if error.ctx else str(error), err=True)
        sys.exit(2)
    except click_errors.UsageError as error:
        command = error.ctx.command_path if error.ctx else "eyrie"
        message = " ".join(error.format_message().split())
        typer.echo(f"error: {message} (see '{command} --help')", err=True)
        sys.exit(2)
    except click_errors.ClickException as error:
        typer.echo(f"error: {' '.join(error.format_message().split())}", err=True)
        sys.exit(error.exit_code)
    except typer.Abort:
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
