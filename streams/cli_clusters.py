"""``eyrie clusters estimate|divide`` (SPEC 7): Karmada-style multi-cluster estimates and division.

Both read CLUSTERS.json (a list of clusters with Karmada's field names, see `policies.clusters.documents`)
and REQ.json (a per-replica ``{resource: quantity}`` or a PodRequest), and print one JSON object
``{cluster: replicas}``: every cluster for ``estimate``, in file order; the clusters given replicas for
``divide`` (none when the estimates fall short of what has to be placed). Bad input exits 2 with one line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer

from schemas.exceptions import InvalidInput
from streams.cli_common import one_line_errors

__all__ = ["clusters_app"]

clusters_app = typer.Typer(
    help="Multi-cluster placement by cluster resource models (Karmada).",
    no_args_is_help=True,
    add_completion=False,
)

ClustersOption = Annotated[
    Path, typer.Option("--clusters", help="CLUSTERS.json: clusters with Karmada's field names (SPEC 7)")
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


@clusters_app.command("estimate")
@one_line_errors
def estimate_command(
    clusters: ClustersOption,
    request: RequestOption,
    estimator: EstimatorOption = "model",
    modeling: ModelingOption = True,
    profile: ProfileOption = None,
    scheduler_name: SchedulerNameOption = None,
) -> None:
    """Print {cluster: replicas}: how many replicas of the request each cluster can still take."""
    _, result = _estimates(clusters, request, estimator, modeling, profile, scheduler_name)
    _print(result)


@clusters_app.command("divide")
@one_line_errors
def divide_command(
    clusters: ClustersOption,
    request: RequestOption,
    replicas: Annotated[int, typer.Option("--replicas", help="Replicas of the workload (>= 0)")],
    strategy: Annotated[str, typer.Option("--strategy", help="duplicated, static, dynamic or aggregated")],
    weights: Annotated[
        str | None, typer.Option("--weights", help="Static weights: name=w,... (clusters not named weigh 0)")
    ] = None,
    current: Annotated[
        str | None, typer.Option("--current", help="Replicas the workload holds now: name=n,... (scaling)")
    ] = None,
    estimator: EstimatorOption = "model",
    modeling: ModelingOption = True,
    profile: ProfileOption = None,
    scheduler_name: SchedulerNameOption = None,
) -> None:
    """Print {cluster: replicas}: the workload's replicas divided among the clusters by the strategy."""
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
    if strategy in ("dynamic", "aggregated"):
        names, available = _estimates(clusters, request, estimator, modeling, profile, scheduler_name)
    else:
        names, available = [cluster.name for cluster in load_clusters(clusters)], {}
    division = divide(
        replicas,
        names,
        strategy,
        available=available,
        weights=static_weights,
        current=held,
    )
    _print(division.assignment)
