"""BES (Alsattar et al. 2020) and TBESK (Geng and Wang 2023) over a batch problem: one dimension per pod.

Encoding: a position is one real number per pod in the centred interval [−m/2, m/2) (m nodes);
the node is the equal-width bin it falls in, over the pod's candidate nodes in node order. Centring keeps
TBESK's multiplicative mutation (P + P·t) and the swoop's pull towards rand·P_best from favouring low node
indices, which they would with positions in [0, m).

Each iteration runs the three phases on the whole population at once; a phase proposes a new position for
every eagle, evaluates all proposals in one call (`model.evaluate`), and keeps each proposal only where it is
better (greedy replacement). Randomness comes from one `numpy.random.default_rng(seed)`, drawn in a fixed
order, so the same problem and seed give the same assignment.

- select: P' = P_best + α·λ·(P_mean − P_i), λ ~ U(0, 1) per dimension; TBESK then mutates P'' = P' + P'·t(ν)
  with ν the iteration number (1, 2, ...): Cauchy-like early, Gaussian-like late.
- search: θ = aπ·U, r = θ + R·U, x = r sin θ / max|·|, y = r cos θ / max|·| (per eagle);
  P' = P_i + y·(P_i − P_{i+1}) + x·(P_i − P_mean), with P_{i+1} the next eagle in a fresh random order.
- swoop: x1 = r sinh θ / max|·|, y1 = r cosh θ / max|·|; P' = U·P_best + x1·(P_i − c1·P_mean) +
  y1·(P_i − c2·P_best).
- TBESK's initial population comes from the skew tent map (β = 0.7) iterated over the eagles, one chaotic
  sequence per pod: the classic 2x tent map reaches exactly 0 within ~55 steps in binary floating point.
- Stagnation (not in the paper): BES's steps are differences between eagles, so once every eagle decodes
  to the same assignment nothing moves again. When that happens, or the best has not improved for
  STALL_ITERATIONS iterations, every eagle but the best is drawn afresh from the initialiser. Without it,
  BES and TBESK missed the exhaustive optimum of 3-node, 4-pod instances in 10 % of runs.

The best position found is decoded; if it still overfills a node (the penalty keeps that rare), pods are
taken off overfilled nodes, the largest relative to the node first, and put back one by one where they fit
and score best; a pod that fits nowhere is left unassigned (-1). The result never overfills a node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from policies.batch.model import BatchProblem, Evaluator, Objective, node_scores, total_fitness
from schemas.exceptions import InvalidInput

__all__ = [
    "ALGORITHMS",
    "BatchResult",
    "BesParams",
    "decode",
    "optimise",
    "repair",
    "skew_tent",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

Algorithm = Literal["bes", "tbesk"]
ALGORITHMS: Final = ("bes", "tbesk")
TENT_BETA: Final = 0.7
_EPS: Final = 1e-9
STALL_ITERATIONS: Final = 10
"""Iterations without a better best after which every eagle but the best is drawn afresh."""


@dataclass(frozen=True, slots=True)
class BesParams:
    """Population, iterations and the BES constants (the paper's defaults)."""

    population: int = 30
    iterations: int = 100
    a: float = 10.0
    r: float = 1.5
    alpha: float = 2.0
    c1: float = 2.0
    c2: float = 2.0

    def __post_init__(self) -> None:
        if not 2 <= self.population <= 10_000:
            raise InvalidInput("must be in 2..10000", field="population")
        if not 0 <= self.iterations <= 1_000_000:
            raise InvalidInput("must be in 0..1000000", field="iterations")
        for name in ("a", "r", "alpha", "c1", "c2"):
            value = getattr(self, name)
            if not np.isfinite(value) or value <= 0:
                raise InvalidInput("must be a positive number", field=name)


@dataclass(frozen=True, slots=True)
class BatchResult:
    """Node index per pod (-1: unassigned), and the search's record."""

    assignment: IntArray
    fitness: float
    """Σ S_N of the returned assignment (assigned pods only)."""
    history: FloatArray
    """Best cost after initialisation and after each iteration."""
    repaired: int
    """Pods moved or left out because the best position overfilled a node."""
    evaluations: int
    restarts: int = 0
    """Times the population was redrawn around the best after stagnating."""


def skew_tent(rng: np.random.Generator, population: int, dims: int, beta: float = TENT_BETA) -> FloatArray:
    """(population, dims) in (0, 1): a skew tent sequence over the population for each dimension."""
    values = np.empty((population, dims))
    x = rng.uniform(_EPS, 1.0 - _EPS, dims)
    for k in range(population):
        values[k] = x
        x = np.where(x < beta, x / beta, (1.0 - x) / (1.0 - beta))
        # Exact 0 or 1 is a fixed point (or one step from it); reseed such rare coordinates.
        stuck = (x <= _EPS) | (x >= 1.0 - _EPS)
        if stuck.any():
            x[stuck] = rng.uniform(_EPS, 1.0 - _EPS, int(stuck.sum()))
    return values


def decode(problem: BatchProblem, positions: FloatArray) -> IntArray:
    """Positions (population, pods) in [−m/2, m/2) → node indices, equal-width bins over each pod's
    candidates."""
    nodes = problem.nodes
    shifted = positions + nodes / 2.0
    np.maximum(shifted, 0.0, out=shifted)  # truncation is then the floor
    if problem.table is None:
        index = shifted.astype(np.int64)
        return np.minimum(index, nodes - 1, out=index)
    counts = problem.counts
    bins = (shifted * (counts / nodes)).astype(np.int64)
    np.minimum(bins, counts - 1, out=bins)
    pods = np.arange(problem.pods)
    return problem.table[pods[None, :], bins].astype(np.int64)


def _polar(
    rng: np.random.Generator, population: int, params: BesParams, hyperbolic: bool
) -> tuple[FloatArray, FloatArray]:
    theta = params.a * np.pi * rng.random(population)
    radius = theta + params.r * rng.random(population)
    if hyperbolic:
        xr, yr = radius * np.sinh(theta), radius * np.cosh(theta)
    else:
        xr, yr = radius * np.sin(theta), radius * np.cos(theta)
    x_max, y_max = np.abs(xr).max(), np.abs(yr).max()
    x = xr / x_max if x_max > 0 else np.zeros(population)
    y = yr / y_max if y_max > 0 else np.zeros(population)
    return x[:, None], y[:, None]


def optimise(
    problem: BatchProblem,
    algorithm: Algorithm = "tbesk",
    params: BesParams | None = None,
    *,
    seed: int = 0,
    initial: IntArray | None = None,
    objective: Objective = "score",
) -> BatchResult:
    """Place the batch with BES or TBESK. `initial` (node per pod) replaces one eagle of the initial
    population (seeding from a heuristic); pods without candidates are always -1 in the result."""
    if algorithm not in ALGORITHMS:
        raise InvalidInput(f"unknown {algorithm!r} (known: {', '.join(ALGORITHMS)})", field="algorithm")
    params = params or BesParams()
    placeable = np.flatnonzero(problem.counts > 0)
    result = np.full(problem.pods, -1, dtype=np.int64)
    if len(placeable) == 0:
        return BatchResult(result, 0.0, np.zeros(0), 0, 0)
    sub = problem if len(placeable) == problem.pods else problem.subset(placeable)
    rng = np.random.default_rng(seed)
    population, dims, nodes = params.population, sub.pods, sub.nodes
    evaluate = Evaluator(sub, population, objective)
    low, high = -nodes / 2.0, nodes / 2.0 - _EPS * max(nodes, 1)

    def initialise(count: int) -> FloatArray:
        if algorithm == "tbesk":
            return low + skew_tent(rng, count, dims) * (high - low)
        return rng.uniform(low, high, (count, dims))

    positions = initialise(population)
    if initial is not None:
        positions[0] = _encode(sub, np.asarray(initial, dtype=np.int64)[placeable])
    decoded = decode(sub, positions)
    cost = evaluate(decoded).cost
    evaluations = population
    restarts = stale = 0
    best_index = int(np.argmin(cost))
    best, best_cost = positions[best_index].copy(), float(cost[best_index])
    history = [best_cost]

    def accept(proposal: FloatArray) -> None:
        nonlocal best, best_cost, evaluations
        np.clip(proposal, low, high, out=proposal)
        nodes_of = decode(sub, proposal)
        proposed = evaluate(nodes_of).cost
        evaluations += population
        better = proposed < cost
        positions[better] = proposal[better]
        decoded[better] = nodes_of[better]
        cost[better] = proposed[better]
        index = int(np.argmin(cost))
        if cost[index] < best_cost:
            best, best_cost = positions[index].copy(), float(cost[index])

    for iteration in range(1, params.iterations + 1):
        # Select the search space.
        mean = positions.mean(axis=0)
        proposal = best + params.alpha * rng.random((population, dims)) * (mean - positions)
        if algorithm == "tbesk":
            proposal += proposal * rng.standard_t(iteration, (population, dims))
        accept(proposal)

        # Search in the space: a spiral around each eagle, towards its neighbour and the mean.
        mean = positions.mean(axis=0)
        order = rng.permutation(population)
        positions[:], cost[:], decoded[:] = positions[order], cost[order], decoded[order]
        neighbour = np.roll(positions, -1, axis=0)
        x, y = _polar(rng, population, params, hyperbolic=False)
        accept(positions + y * (positions - neighbour) + x * (positions - mean))

        # Swoop towards the prey.
        mean = positions.mean(axis=0)
        x1, y1 = _polar(rng, population, params, hyperbolic=True)
        proposal = (
            rng.random((population, dims)) * best
            + x1 * (positions - params.c1 * mean)
            + y1 * (positions - params.c2 * best)
        )
        accept(proposal)
        history.append(best_cost)

        # Stagnation: every eagle decodes to the same assignment, so no phase can move any more (their
        # steps are differences between eagles). Keep the best, draw the others afresh.
        if history[-1] < history[-2]:
            stale = 0
        else:
            stale += 1
        if iteration < params.iterations and (stale >= STALL_ITERATIONS or (decoded == decoded[0]).all()):
            stale = 0
            keep = int(np.argmin(cost))
            fresh = np.ones(population, dtype=np.bool_)
            fresh[keep] = False
            positions[fresh] = initialise(population - 1)
            decoded[fresh] = decode(sub, positions[fresh])
            cost[fresh] = evaluate(decoded[fresh]).cost
            evaluations += population - 1
            restarts += 1

    assignment = decode(sub, best[None, :])[0]
    assignment, repaired = repair(sub, assignment)
    result[placeable] = assignment
    return BatchResult(
        result, total_fitness(sub, assignment), np.array(history), repaired, evaluations, restarts
    )


def _encode(problem: BatchProblem, assignment: IntArray) -> FloatArray:
    """The centre of the bin that decodes to each pod's node (a node that is not a candidate: a random
    candidate's bin is not needed; the pod's first candidate is used)."""
    nodes = problem.nodes
    if problem.table is None:
        return assignment.astype(np.float64) + 0.5 - nodes / 2.0
    counts = problem.counts
    positions = np.zeros(problem.pods)
    for pod in range(problem.pods):
        row = problem.table[pod, : counts[pod]]
        found = np.flatnonzero(row == assignment[pod])
        slot = int(found[0]) if len(found) else 0
        positions[pod] = (slot + 0.5) * nodes / counts[pod] - nodes / 2.0
    return positions


def repair(problem: BatchProblem, assignment: IntArray) -> tuple[IntArray, int]:
    """Take pods off overfilled nodes (largest share of the node first) and put each back on the candidate
    where it fits and scores best, or leave it unassigned (-1). Returns the assignment and the number of pods
    that were moved or left out."""
    assignment = assignment.copy()
    cap, requests = problem.capacity, problem.requests
    loads = problem.requested.copy()
    placed = assignment >= 0
    np.add.at(loads, assignment[placed], requests[placed])
    over = (loads > cap * (1 + 1e-12)).any(axis=1)
    if not over.any():
        return assignment, 0
    removed: list[int] = []
    for node in np.flatnonzero(over).tolist():
        on_node = np.flatnonzero(assignment == node)
        share = (requests[on_node] / problem.overflow_scale[node]).max(axis=1)
        for pod in on_node[np.argsort(-share, kind="stable")].tolist():
            if (loads[node] <= cap[node] * (1 + 1e-12)).all():
                break
            loads[node] -= requests[pod]
            assignment[pod] = -1
            removed.append(pod)
    used = problem.used + (loads - problem.requested)
    for moved in removed:
        fits = problem.candidates[moved] & (loads + requests[moved] <= cap * (1 + 1e-12)).all(axis=1)
        if not fits.any():
            continue
        scores = np.where(fits, node_scores(problem, moved, used), -np.inf)
        target = int(np.argmax(scores))
        assignment[moved] = target
        loads[target] += requests[moved]
        used[target] += requests[moved]
    return assignment, len(removed)
