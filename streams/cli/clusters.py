"""``eyrie clusters estimate|divide``: Karmada-style multi-cluster estimates and division.

Both read CLUSTERS.json (a list of clusters with Karmada's field names, see `policies.clusters.documents`)
and REQ.json (a per-replica ``{resource: quantity}`` or a PodRequest), and print one JSON object
``{cluster: replicas}``: every cluster for ``estimate``, in file order; the clusters given replicas for
``divide``. Bad input exits 2 with one line, and so does a division the clusters cannot hold (Karmada's
"clusters resources are not enough to schedule"), as does an option the chosen strategy or estimator would
not read.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer

from schemas.exceptions import InvalidInput
from streams.cli.common import one_line_errors

__all__ = ["clusters_app"]

clusters_app = typer.Typer(
    help="Multi-cluster placement by cluster resource models (Karmada).",
    no_args_is_help=True,
    add_completion=False,
)

ClustersOption = Annotated[
    Path,
    typer.Option("--clusters", help="CLUSTERS.json: clusters with Karmada's field names (see docs/cli.md)"),
]
RequestOption = Annotated[
    Path, typer.Option("--request", help="REQ.json: a per-replica {resource: quantity}, or a PodRequest")
]
EstimatorOption = Annotated[
    str,
    typer.Option(
        "--estimator",
        help="general (resource summary), model (resource models, else the summary) or accurate (nodes)",
    ),
]
ModelingOption = Annotated[
    bool,
    typer.Option(
        "--modeling/--no-modeling",
        help="Use per-grade node counts (off: the model estimator uses the summary)",
    ),
]
ProfileOption = Annotated[
    Path | None, typer.Option("--profile", help="Profile YAML whose filters the accurate estimator runs")
]
SchedulerNameOption = Annotated[
    str | None, typer.Option("--scheduler-name", help="Which profile of the file (default: the pod's)")
]


@clusters_app.callback()
def _clusters() -> None:
    """Multi-cluster placement by cluster resource models (Karmada)."""


def _estimates(
    clusters_path: Path,
    request_path: Path,
    estimator: str,
    modeling: bool,
    profile: Path | None,
    scheduler_name: str | None,
) -> tuple[list[str], dict[str, int]]:
    from policies.clusters.documents import load_clusters, load_request, resolve_profiles
    from policies.clusters.estimators import accurate_estimate, estimate
    from policies.clusters.policy import ESTIMATORS

    if estimator not in ESTIMATORS:
        raise InvalidInput(
            f"unknown estimator {estimator!r} (expected {', '.join(ESTIMATORS)})", field="--estimator"
        )
    if estimator != "accurate":
        for flag, value in (("--profile", profile), ("--scheduler-name", scheduler_name)):
            if value is not None:
                raise InvalidInput(
                    f"only with --estimator accurate (the {estimator} estimator runs no filters)", field=flag
                )
    clusters = load_clusters(clusters_path)
    requests, pod = load_request(request_path)
    names = [cluster.name for cluster in clusters]
    if estimator != "accurate":
        return names, {c.name: estimate(c.status, requests, estimator, modeling=modeling) for c in clusters}
    profiles, profile_name = resolve_profiles(profile, scheduler_name, pod)
    result: dict[str, int] = {}
    for index, cluster in enumerate(clusters):
        scheduler = cluster.scheduler(profiles)
        if scheduler is None:
            raise InvalidInput(
                f"{clusters_path}: [{index}].nodes: cluster {cluster.name!r} lists no nodes "
                "(the accurate estimator needs them)"
            )
        result[cluster.name] = accurate_estimate(scheduler, pod, profile_name)
    return names, result


def _pairs(raw: str | None, option: str) -> dict[str, int]:
    """``name=n,name=n`` → {name: n}, n a whole number >= 0."""
    pairs: dict[str, int] = {}
    for item in (raw or "").split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise InvalidInput(
                f"expected name=number pairs separated by commas, got {item.strip()!r}", field=option
            )
        try:
            number = int(value.strip())
        except ValueError:
            raise InvalidInput(
                f"{name}: expected a whole number, got {value.strip()!r}", field=option
            ) from None
        if number < 0:
            raise InvalidInput(f"{name}: must be >= 0, got {number}", field=option)
        if name in pairs:
            raise InvalidInput(f"{name} is given twice", field=option)
        pairs[name] = number
    return pairs


def _print(result: dict[str, int]) -> None:
    sys.stdout.write(orjson.dumps(result).decode() + "\n")


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the user gave option `name` (its default alone is not a choice worth a complaint)."""
    # By name: Typer ships its own copy of Click, whose enum is not the one `click.core` would import.
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _check_modeling(ctx: typer.Context, estimator: str, modeling: bool) -> None:
    if estimator != "model" and _given(ctx, "modeling"):
        flag = "--modeling" if modeling else "--no-modeling"
        raise InvalidInput(
            f"only with --estimator model (the {estimator} estimator has no modeling)", field=flag
        )


@clusters_app.command("estimate")
@one_line_errors
def estimate_command(
    ctx: typer.Context,
    clusters: ClustersOption,
    request: RequestOption,
    estimator: EstimatorOption = "model",
    modeling: ModelingOption = True,
    profile: ProfileOption = None,
    scheduler_name: SchedulerNameOption = None,
) -> None:
    """Print {cluster: replicas}: how many replicas of the request each cluster can still take."""
    _check_modeling(ctx, estimator, modeling)
    _, result = _estimates(clusters, request, estimator, modeling, profile, scheduler_name)
    _print(result)


@clusters_app.command("divide")
@one_line_errors
def divide_command(
    ctx: typer.Context,
    clusters: ClustersOption,
    request: RequestOption,
    replicas: Annotated[int, typer.Option("--replicas", help="Replicas of the workload (>= 0)")],
    strategy: Annotated[str, typer.Option("--strategy", help="duplicated, static, dynamic or aggregated")],
    weights: Annotated[
        str | None,
        typer.Option("--weights", help="static only: name=w,... (clusters not named weigh 0)"),
    ] = None,
    current: Annotated[
        str | None,
        typer.Option(
            "--current", help="dynamic and aggregated: replicas the workload holds now, name=n,... (scaling)"
        ),
    ] = None,
    estimator: EstimatorOption = "model",
    modeling: ModelingOption = True,
    profile: ProfileOption = None,
    scheduler_name: SchedulerNameOption = None,
) -> None:
    """Print {cluster: replicas}: the workload's replicas divided among the clusters by the strategy.

    Exits 2 when the clusters cannot take the replicas to place (dynamic and aggregated).
    """
    from policies.clusters.division import divide
    from policies.clusters.documents import load_clusters
    from policies.clusters.policy import STRATEGIES

    if strategy not in STRATEGIES:
        raise InvalidInput(
            f"unknown strategy {strategy!r} (expected {', '.join(STRATEGIES)})", field="--strategy"
        )
    if replicas < 0:
        raise InvalidInput(f"must be >= 0, got {replicas}", field="--replicas")
    static_weights = _pairs(weights, "--weights")
    held = _pairs(current, "--current")
    estimated = strategy in ("dynamic", "aggregated")
    if weights is not None and strategy != "static":
        raise InvalidInput(
            f"only with --strategy static (a {strategy} division reads no weights)", field="--weights"
        )
    if current is not None and not estimated:
        raise InvalidInput(
            f"only with --strategy dynamic or aggregated (a {strategy} division does not depend on the "
            "replicas held now)",
            field="--current",
        )
    if not estimated:
        for name in ("estimator", "modeling", "profile", "scheduler_name"):
            if _given(ctx, name):
                flag = (
                    "--no-modeling" if name == "modeling" and not modeling else f"--{name.replace('_', '-')}"
                )
                raise InvalidInput(
                    f"only with --strategy dynamic or aggregated (a {strategy} division reads no estimates)",
                    field=flag,
                )
    _check_modeling(ctx, estimator, modeling)
    if estimated:
        names, available = _estimates(clusters, request, estimator, modeling, profile, scheduler_name)
    else:
        names, available = [cluster.name for cluster in load_clusters(clusters)], {}
    known = set(names)
    for name in static_weights:
        if name not in known:
            raise InvalidInput(f"{name!r} is not a cluster of {clusters}", field="--weights")
    for name, count in held.items():
        if name not in known:
            # Karmada's scaling drops the replicas of a cluster that left; a typo looks the same, so say it.
            typer.echo(
                f"note: --current: {name!r} is not a cluster of {clusters}; "
                f"its {count} replicas count as lost",
                err=True,
            )
    division = divide(
        replicas,
        names,
        strategy,
        available=available,
        weights=static_weights,
        current=held,
    )
    if not division.feasible:
        raise InvalidInput(
            f"clusters resources are not enough to schedule: {division.needed} replicas to place, "
            f"the clusters can take {division.available}",
            field="--replicas",
        )
    _print(division.assignment)
