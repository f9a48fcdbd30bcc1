"""AssumePodOnNode: a node's portrait once a pod is added to it.

Per hour and metric the pod's workload portrait adds to the node's (μ = μ_N + μ_W, σ² = σ²_N + σ²_W: the
loads are taken as independent), and the capacity recommendation is recomputed from the sums. The node's
side is its measured portrait plus the workload portraits of pods that arrived after the node was last
measured in that hour: hour h of a pod placed at time t counts until the node has a sample of hour h taken
after t (`seen[h] > t`). A pod whose workload has no portrait yet contributes its request, σ = 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from portraits.hourly import DEFAULT_Z, HOURS, Portrait

__all__ = ["AssumedPortrait", "PodLoad", "assume_pod_on_node", "node_base", "pod_load", "uncovered_hours"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class PodLoad:
    """What a pod adds to a node's portrait: mean and variance (24, metrics), from `at` on."""

    at: float
    mean: FloatArray
    var: FloatArray


@dataclass(frozen=True, slots=True)
class AssumedPortrait:
    mean: FloatArray
    var: FloatArray
    cap: FloatArray


def pod_load(
    portrait: Portrait | None, requests: Mapping[str, float], metrics: Sequence[str], at: float
) -> PodLoad:
    """The pod's contribution: its workload portrait, with the cold-start rule (the request, σ = 0) for
    every cell the portrait has no data for. `requests` are in the portrait's units (cpu in cores)."""
    fallback = np.array([float(requests.get(metric, 0.0)) for metric in metrics])
    mean = np.empty((HOURS, len(metrics)))
    mean[...] = fallback  # not `broadcast_to(...).copy()`, built in Python: every cold start pays it
    var = np.zeros((HOURS, len(metrics)))
    if portrait is not None:
        if tuple(portrait.metrics) != tuple(metrics):
            raise ValueError("the workload portrait's metrics differ from the node portraits'")
        mean = np.where(portrait.has_data, portrait.mean, mean)
        var = np.where(portrait.has_data, portrait.std * portrait.std, 0.0)
    return PodLoad(at, mean, var)


def uncovered_hours(seen: FloatArray, at: float) -> BoolArray:
    """Hours for which the node has no sample taken after `at` (a pod placed at `at` is not in them yet)."""
    mask: BoolArray = seen <= at
    return mask


def node_base(
    node_mean: FloatArray, node_var: FloatArray, seen: FloatArray, pods: Iterable[PodLoad]
) -> tuple[FloatArray, FloatArray]:
    """The node's side of AssumePodOnNode: measured portrait plus the pods not yet measured, per hour."""
    mean = node_mean.copy()
    var = node_var.copy()
    for pod in pods:
        hours = uncovered_hours(seen, pod.at)
        mean[hours] += pod.mean[hours]
        var[hours] += pod.var[hours]
    return mean, var


def assume_pod_on_node(
    node_mean: FloatArray,
    node_var: FloatArray,
    seen: FloatArray,
    pods_on_node: Iterable[PodLoad],
    pod: PodLoad,
    z: float = DEFAULT_Z,
) -> AssumedPortrait:
    mean, var = node_base(node_mean, node_var, seen, pods_on_node)
    mean = mean + pod.mean
    var = var + pod.var
    return AssumedPortrait(mean, var, mean + z * np.sqrt(var))
