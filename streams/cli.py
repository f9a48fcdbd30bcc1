"""The ``eyrie`` command. Every command exits 2 with one line ``error: ...`` on bad input."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

import orjson
import typer

from schemas.documents import load_documents
from schemas.exceptions import EyrieError, InvalidInput
from schemas.jsonschema import export_schemas
from streams.cli_broker import broker_app
from streams.cli_clusters import clusters_app
from streams.cli_common import (
    BootstrapOption,
    ConfigOption,
    kafka_options,
    one_line_errors,
    progress,
    run,
    settings_from,
)
from streams.cli_pipeline import applier, record, replay, worker
from streams.cli_trace import trace_app
from streams.client import EyrieClient
from streams.topics import ensure_topics

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
schema_app = typer.Typer(help="JSON Schemas of the wire models.", no_args_is_help=True)
app.add_typer(schema_app, name="schema")
topics_app = typer.Typer(help="Kafka topics.", no_args_is_help=True)
app.add_typer(topics_app, name="topics")
app.add_typer(trace_app, name="trace", help="Convert public cluster traces into event logs.")
app.add_typer(clusters_app, name="clusters", help="Multi-cluster estimates and division (Karmada).")
for _command in (worker, applier, replay, record):
    app.command()(_command)


@app.callback()
def _configure(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show library logs (Kafka client)")
    ] = False,
) -> None:
    # Without a handler, Python prints library warnings through its last-resort handler, which would
    # break the one-line error contract; they are shown only when asked for.
    root = logging.getLogger()
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    elif not root.handlers:
        root.addHandler(logging.NullHandler())


@app.command()
@kafka_options
@one_line_errors
def publish(
    files: Annotated[list[Path], typer.Argument(help="JSON, JSON Lines, YAML or Kubernetes Pod manifests")],
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate only; publish nothing")] = False,
) -> None:
    """Publish pod requests, deletions, node events and metric samples.

    Every file is validated before anything is sent, so a bad file publishes nothing.
    """
    total = sum(1 for path in files for _ in load_documents(path))
    if dry_run:
        typer.echo(f"{total} documents valid")
        return
    settings = settings_from(bootstrap, config)

    async def send_all() -> int:
        async with EyrieClient(settings) as client:
            with progress() as bar:
                task = bar.add_task("publishing", total=total)
                documents = (document for path in files for document in load_documents(path))
                return await client.publish_documents(documents, on_sent=lambda: bar.advance(task))

    sent = run(send_all())
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
    until_idle: Annotated[
        float | None,
        typer.Option(
            "--until-idle", min=0.0, help="With --follow: stop after this many seconds without a new record"
        ),
    ] = None,
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
) -> None:
    """Print one JSON object per line per pod: uid, node, cluster, status, reasons (and profile, score).

    Without --follow: every pod's latest state, read from the beginning to the current end. With --follow: a
    line each time a pod gets a result (applied, conflict, rejected, unschedulable).
    """
    settings = settings_from(bootstrap, config)

    async def stream() -> None:
        async with EyrieClient(settings) as client:
            async for decision in client.decisions(
                from_beginning=from_beginning or not follow, follow=follow, until_idle=until_idle
            ):
                sys.stdout.write(orjson.dumps(decision.to_json()).decode() + "\n")
                if follow:
                    sys.stdout.flush()

    run(stream())


@app.command()
@one_line_errors
def explain(
    nodes: Annotated[Path, typer.Option("--nodes", help="NODES.json: a list of node states (SPEC 7)")],
    pod: Annotated[Path, typer.Option("--pod", help="POD.json: a PodRequest")],
    profile: Annotated[
        Path | None, typer.Option("--profile", help="KubeSchedulerConfiguration-style YAML")
    ] = None,
    scheduler_name: Annotated[
        str | None,
        typer.Option(
            "--scheduler-name", help="Which profile of the file (default: the pod's scheduler_name)"
        ),
    ] = None,
) -> None:
    """Explain one placement: which filter dropped each node and why, every plugin's score, the totals."""
    from policies.explain import explain_files

    result = explain_files(nodes, pod, profile, scheduler_name)
    sys.stdout.write(orjson.dumps(result.to_json()).decode() + "\n")


@app.command()
@one_line_errors
def evaluate(
    experiment: Annotated[
        str | None, typer.Option("--experiment", help="Which experiment: portrait, tbesk-paper")
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
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=10000, help="Equal nodes in the cluster")] = 12,
    replicas: Annotated[int, typer.Option("--replicas", min=1, max=1000, help="Copies of each workload")] = 4,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed", help="portrait: arrival order (default 42); tbesk-paper: pods, optimisers (1)"
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
) -> None:
    """Run an offline experiment; prints a table, writes it with plots to OUT, and ends with one JSON line."""
    from streams.evaluate import EXPERIMENTS, PORTRAIT_PROFILES, PortraitExperiment, run_portrait_experiment
    from streams.evaluate.report import write_portrait_report

    if all_profiles:
        if experiment is not None:
            raise InvalidInput("--all: give either --experiment or --all, not both")
        _evaluate_all(trace, out, policy, nodes, replicas, seed, trace_pods, trace_limit, deletions, jobs)
        return
    if deletions or jobs != 1:
        raise InvalidInput(f"{'--deletions' if deletions else '--jobs'}: only with --all")
    if experiment is None:
        raise InvalidInput(
            f"--experiment: required ({', '.join(EXPERIMENTS)}), or --all for the evaluation report"
        )
    if experiment not in EXPERIMENTS:
        raise InvalidInput(f"--experiment: unknown {experiment!r} (known: {', '.join(EXPERIMENTS)})")
    if experiment == "tbesk-paper":
        from streams.evaluate.tbesk import TbeskExperiment, run_and_report

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
        sys.stdout.write(orjson.dumps(result.summary()).decode() + "\n")
        return
    if trace is None:
        raise InvalidInput("--trace: required by the portrait experiment")
    seed = 42 if seed is None else seed
    setup = PortraitExperiment(
        trace=trace, profiles=tuple(policy or PORTRAIT_PROFILES), nodes=nodes, replicas=replicas, seed=seed
    )
    results = run_portrait_experiment(setup)
    context = {
        "command": f"eyrie evaluate --experiment portrait --trace {trace} --out {out}"
        + "".join(f" --policy {name}" for name in policy or ())
        + f" --nodes {nodes} --replicas {replicas} --seed {seed}",
        "nodes": f"{setup.nodes} × {setup.node_cpu_cores} cores / {setup.node_memory_bytes // 1024**3} GiB",
        "replicas per workload": setup.replicas,
        "training days": setup.train_days,
        "seed": setup.seed,
    }
    written = write_portrait_report(results, out, context)
    typer.echo((out / "results.md").read_text().split("\n\n", 1)[-1].rstrip())
    typer.echo(f"wrote {', '.join(str(path) for path in written)}")
    sys.stdout.write(orjson.dumps({r.profile: r.metrics() for r in results}).decode() + "\n")


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
) -> None:
    """`eyrie evaluate --all`: the evaluation report (streams.evaluate.suite)."""
    from policies.framework.profile import BUILTIN_PROFILES
    from streams.evaluate.suite import DEFAULT_TRACES, SuiteExperiment, run_suite
    from streams.evaluate.suite_report import gpu_table, portrait_table, write_suite_report

    setup = SuiteExperiment(
        traces=DEFAULT_TRACES if trace is None else trace,
        profiles=tuple(policy) if policy else tuple(BUILTIN_PROFILES),
        trace_pods=trace_pods,
        limit=trace_limit,
        deletions=deletions,
        portrait_nodes=nodes,
        replicas=replicas,
        seed=42 if seed is None else seed,
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
            *([f"--nodes {nodes}"] if nodes != 12 else []),
            *([f"--replicas {replicas}"] if replicas != 4 else []),
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
    sys.stdout.write(orjson.dumps(result.summary()).decode() + "\n")


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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
