"""Dividing a workload's replicas among clusters (Karmada's replica scheduling strategies).

* ``duplicated``: every cluster runs all the replicas.
* ``static``: replicas ∝ static weights (clusters not weighted get none; no weights at all: equal).
* ``dynamic``: replicas ∝ the replicas each cluster can still take (its estimate).
* ``aggregated``: the fewest clusters whose estimates cover the replicas, clusters that already hold
  replicas first, then larger estimates first (ties by name); then ∝ their estimates.

Proportional shares are apportioned by the Webster (Sainte-Laguë) method: one replica at a time to the
largest w / (2·s + 1), s being the replicas the cluster got so far in this division; ties go to fewer
replicas, then to the name that sorts first. Unlike Karmada's older dispenser (⌊w·n / Σw⌋ each, remainders
to the largest weights) it is house-monotone: giving one more replica never takes one from a cluster. It
also never gives a cluster more than its weight when the weights are estimates that cover the replicas.

Scaling (``current`` replicas given, dynamic and aggregated): growing divides only the extra replicas, by the
estimates, and adds them to the current ones (nothing moves); shrinking divides the new total in proportion
to the current replicas (aggregated: among as few of the current clusters as hold it). Estimates below the
replicas to place mean nothing is placed.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.clusters.policy import Strategy
from schemas.exceptions import InvalidInput

__all__ = ["Division", "divide", "proportional", "webster"]


@dataclass(frozen=True, slots=True)
class Division:
    """The outcome: replicas per cluster (clusters with none left out), or nothing when estimates fall
    short (`available` < `needed`: the replicas that had to be placed in this step)."""

    assignment: dict[str, int]
    feasible: bool = True
    needed: int = 0
    available: int = 0

    @property
    def total(self) -> int:
        return sum(self.assignment.values())


class _Priority:
    """A heap entry: larger w/(2s+1) first, then fewer seats, then the smaller name."""

    __slots__ = ("name", "seats", "weight")

    def __init__(self, name: str, weight: int, seats: int) -> None:
        self.name, self.weight, self.seats = name, weight, seats

    def __lt__(self, other: _Priority) -> bool:
        # w_a/(2s_a+1) > w_b/(2s_b+1), exactly, in integers.
        left = self.weight * (2 * other.seats + 1)
        right = other.weight * (2 * self.seats + 1)
        if left != right:
            return left > right
        if self.seats != other.seats:
            return self.seats < other.seats
        return self.name < other.name


def webster(seats: int, weights: Mapping[str, int], start: Mapping[str, int] | None = None) -> dict[str, int]:
    """Give `seats` seats one at a time by the Webster method, on top of `start` (default none)."""
    held = {name: (start or {}).get(name, 0) for name in weights}
    heap = [_Priority(name, weight, held[name]) for name, weight in weights.items()]
    heapq.heapify(heap)
    for _ in range(seats if heap else 0):
        top = heapq.heappop(heap)
        top.seats += 1
        held[top.name] = top.seats
        heapq.heappush(heap, top)
    return held


def proportional(replicas: int, weights: Mapping[str, int]) -> dict[str, int]:
    """`replicas` in proportion to `weights` by Webster (Karmada's Dispenser.TakeByWeight, with Webster
    rounding). Zero total weight places nothing."""
    if sum(weights.values()) <= 0 or replicas <= 0:
        return dict.fromkeys(weights, 0)
    return webster(replicas, weights)


def _merge(*parts: Mapping[str, int]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for part in parts:
        for name, count in part.items():
            merged[name] = merged.get(name, 0) + count
    return merged


def _ordered(assignment: Mapping[str, int], clusters: Sequence[str]) -> dict[str, int]:
    return {name: assignment[name] for name in clusters if assignment.get(name, 0) > 0}


def _by_estimate(available: Mapping[str, int]) -> list[str]:
    return sorted(available, key=lambda name: (-available[name], name))


def _dynamic(
    target: int,
    available: Mapping[str, int],
    order: list[str],
    start: Mapping[str, int],
    aggregated: bool,
) -> Division | dict[str, int]:
    """Karmada's dynamicDivideReplicas: `order` is the clusters by preference, `start` the replicas kept."""
    offered = sum(available[name] for name in order)
    if offered < target:
        return Division({}, feasible=False, needed=target, available=offered)
    if aggregated:
        chosen, covered = [], 0
        for name in order:
            chosen.append(name)
            covered += available[name]
            if covered >= target:
                break
        order = chosen
    return _merge(start, proportional(target, {name: available[name] for name in order}))


def divide(
    replicas: int,
    clusters: Sequence[str],
    strategy: Strategy,
    *,
    available: Mapping[str, int] | None = None,
    weights: Mapping[str, int] | None = None,
    current: Mapping[str, int] | None = None,
) -> Division:
    """Divide `replicas` among `clusters` (the candidates, in their order) by `strategy`.

    `available` (estimates) is needed by dynamic and aggregated; `weights` is read by static; `current`
    (replicas the workload holds now) by dynamic and aggregated. Names outside `clusters` are ignored.
    """
    if replicas < 0:
        raise InvalidInput(f"replicas must be >= 0, got {replicas}", field="replicas")
    names = list(dict.fromkeys(clusters))
    if strategy == "duplicated":
        return Division(_ordered(dict.fromkeys(names, replicas), names))
    if strategy == "static":
        chosen = {name: w for name in names if (w := (weights or {}).get(name, 0)) > 0}
        if not chosen:
            chosen = dict.fromkeys(names, 1)
        return Division(_ordered(proportional(replicas, chosen), names))
    if strategy not in ("dynamic", "aggregated"):
        raise InvalidInput(
            f"unknown strategy {strategy!r} (expected duplicated, static, dynamic or aggregated)",
            field="strategy",
        )
    aggregated = strategy == "aggregated"
    estimates = {name: max(0, (available or {}).get(name, 0)) for name in names}
    scheduled = {name: n for name in names if (n := (current or {}).get(name, 0)) > 0}
    assigned = sum(scheduled.values())
    if assigned > replicas:
        # Scale down: the current replicas are the weights, as if scheduling afresh.
        outcome = _dynamic(replicas, scheduled, _by_estimate(scheduled), {}, aggregated)
    elif assigned < replicas:
        # Scale up (a first placement included): only the extra replicas, by the estimates.
        order = _by_estimate(estimates)
        if aggregated:
            order = [n for n in order if n in scheduled] + [n for n in order if n not in scheduled]
        outcome = _dynamic(replicas - assigned, estimates, order, scheduled, aggregated)
    else:
        outcome = scheduled
    if isinstance(outcome, Division):
        return outcome
    return Division(_ordered(outcome, names))
