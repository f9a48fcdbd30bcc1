"""Replica estimators: how many replicas of a per-replica request a cluster can still take.

* ``general`` (Karmada's summary estimate): min(allowed pods, min over requested resources
  ⌊(allocatable − allocated − allocating) / request⌋); a requested resource the cluster lacks, or has none
  left of, gives 0.
* ``model`` (Karmada v1.18's resource-model estimate): Σ over grades count × min(110, min over requested
  resources ⌊grade min / request⌋), at most the allowed pods; the summary estimate when the cluster reports
  no per-grade counts or resource modeling is off.
* ``accurate`` (Karmada's scheduler-estimator): Σ over the nodes that pass the profile's filters of
  min(free pod slots, min over requested resources ⌊free / request⌋).

Requests are in base units (cpu in millicores), as `schemas.quantity` parses them; a ``pods`` entry is
ignored (every replica is one pod), and so are zero requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from policies.clusters.policy import Estimator
from policies.clusters.summary import ClusterView, allowed_pods
from schemas.exceptions import InvalidInput

if TYPE_CHECKING:
    from policies.scheduler import Scheduler
    from schemas.pod import PodRequest

__all__ = [
    "accurate_estimate",
    "estimate",
    "estimate_all",
    "general_estimate",
    "model_estimate",
    "per_replica",
]


def per_replica(request: Mapping[str, int]) -> dict[str, int]:
    """The resources a replica asks for: positive amounts, without ``pods``."""
    return {name: amount for name, amount in request.items() if amount > 0 and name != "pods"}


def general_estimate(cluster: ClusterView, request: Mapping[str, int]) -> int:
    """Karmada's GeneralEstimator on the resource summary (getMaximumReplicasBasedOnClusterSummary)."""
    most = allowed_pods(cluster)
    if most == 0:
        return 0
    allocatable, allocated, allocating = cluster.allocatable, cluster.allocated, cluster.allocating
    for name, amount in request.items():
        if amount <= 0 or name == "pods":
            continue
        total = allocatable.get(name)
        if total is None:
            return 0
        available = total - allocated.get(name, 0) - allocating.get(name, 0)
        if available <= 0:
            return 0
        fits = available // amount
        most = min(most, fits)
    return most


def model_estimate(cluster: ClusterView, request: Mapping[str, int], *, modeling: bool = True) -> int:
    """Karmada's GeneralEstimator with CustomizedClusterResourceModeling: per-grade virtual nodes."""
    counts = cluster.grade_counts
    if not modeling or not counts:
        return general_estimate(cluster, request)
    most = allowed_pods(cluster)
    if most == 0:
        return 0
    total = 0
    for count, fits in zip(counts, cluster.models.capacities(request), strict=True):
        if count and fits:
            total += count * fits
    return total if total < most else most


def accurate_estimate(scheduler: Scheduler, pod: PodRequest, profile: str | None = None) -> int:
    """Replicas of `pod` the scheduler's nodes hold, each node counted alone, after the profile's filters
    (`profile` defaults to the pod's scheduler name)."""
    snapshot = scheduler.snapshot
    if snapshot.size == 0:
        return 0
    explanation = scheduler.explain(pod, profile_name=profile)
    if not explanation.feasible:
        return 0
    rows = np.fromiter((snapshot.index[name] for name in explanation.feasible), dtype=np.int64)
    fits = snapshot.max_pods[rows] - snapshot.pod_count[rows]
    for name, amount in per_replica(pod.effective_requests).items():
        column = snapshot.column.get(name)
        if column is None:
            return 0
        fits = np.minimum(fits, snapshot.free[rows, column] // amount)
    return int(np.clip(fits, 0, None).sum())


def estimate(
    cluster: ClusterView,
    request: Mapping[str, int],
    estimator: Estimator = "model",
    *,
    modeling: bool = True,
    scheduler: Scheduler | None = None,
    pod: PodRequest | None = None,
    profile: str | None = None,
) -> int:
    """One cluster's estimate by the named estimator (``accurate`` needs the cluster's scheduler and pod)."""
    if estimator == "general":
        return general_estimate(cluster, request)
    if estimator == "model":
        return model_estimate(cluster, request, modeling=modeling)
    if estimator == "accurate":
        if scheduler is None or pod is None:
            raise InvalidInput(
                f"cluster {cluster.name!r}: the accurate estimator needs the cluster's nodes", field="nodes"
            )
        return accurate_estimate(scheduler, pod, profile)
    raise InvalidInput(
        f"unknown estimator {estimator!r} (expected general, model or accurate)", field="estimator"
    )


def estimate_all(
    clusters: Iterable[ClusterView],
    request: Mapping[str, int],
    estimator: Estimator = "model",
    *,
    modeling: bool = True,
) -> dict[str, int]:
    """Summary and model estimates of many clusters (name → replicas), in their order."""
    if estimator == "accurate":
        raise InvalidInput("the accurate estimator needs each cluster's scheduler", field="estimator")
    wanted = per_replica(request)
    return {c.name: estimate(c, wanted, estimator, modeling=modeling) for c in clusters}
