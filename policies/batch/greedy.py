"""Sequential placements on the batch model: the paper's baselines, S_N one by one, and a Z reference.

Every function places the pods in order, one at a time, each on the best-scoring candidate node where it
fits beside everything placed so far (ties: the lowest node index), and returns a node per pod (-1: it fits
nowhere). Scores are computed for all nodes at once.

- `least_requested` (LRA, the paper's eq. 1): ((S_cpu − N_cpu)/S_cpu·10 + (S_mem − N_mem)/S_mem·10) / 2, with
  S the node's total and N its requested amount with the pod; cpu and memory only, as Kubernetes did.
- `balanced_allocation` (BRA, eq. 2): 10 − |N_cpu/S_cpu − N_mem/S_mem|·10.
- `greedy_score`: the TBESK model's node score S_N (all the model's resources), one pod at a time.
- `reference`: greedy on Z (each pod where the node's Z grows least), then single-pod moves, best
  improvement first, until no move lowers Σ Z(i): how far below its start a local search on the metric
  itself gets, the yardstick the optimisers are compared with.

`fit` names the resources that must fit (default: every resource of the model). The paper's Kubernetes
checked cpu and memory only, so its LRA and BRA overfilled bandwidth and disk (its figures 6 and 7);
`fit=("cpu", "memory")` reproduces that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from policies.batch.model import BatchProblem, node_scores, z_per_node
from schemas.exceptions import InvalidInput

__all__ = [
    "balanced_allocation",
    "greedy_score",
    "greedy_z",
    "least_requested",
    "local_search_z",
    "reference",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_TOLERANCE: Final = 1e-12
_MAX_ROUNDS: Final = 100_000
_CHUNK_ELEMENTS: Final = 1 << 20
"""Pod × node pairs per chunk of the local search's temporaries (× resources × 8 bytes each)."""

Scorer = Callable[[int, FloatArray, FloatArray], FloatArray]
"""(pod, requested (nodes, resources) before it, used (nodes, resources) before it) → score per node."""


def _fit_columns(problem: BatchProblem, fit: Sequence[str] | None) -> IntArray:
    if fit is None:
        return np.arange(len(problem.resources), dtype=np.int64)
    missing = [name for name in fit if name not in problem.resources]
    if missing:
        raise InvalidInput(f"resource {missing[0]!r} is not in the model", field="fit")
    return np.array([problem.resources.index(name) for name in fit], dtype=np.int64)


def _sequential(
    problem: BatchProblem, scorer: Scorer, fit: Sequence[str] | None, start: IntArray | None = None
) -> IntArray:
    columns = _fit_columns(problem, fit)
    cap = problem.capacity[:, columns]
    requested = problem.requested.copy()
    used = problem.used.copy()
    if start is None:
        assignment = np.full(problem.pods, -1, dtype=np.int64)
    else:
        assignment = np.asarray(start, dtype=np.int64).copy()
        placed = assignment >= 0
        np.add.at(requested, assignment[placed], problem.requests[placed])
        np.add.at(used, assignment[placed], problem.requests[placed])
    candidates = problem.allowed  # the fit check is below, on the `fit` resources
    for pod in np.flatnonzero(assignment < 0).tolist():
        request = problem.requests[pod]
        fits = candidates[pod] & (requested[:, columns] + request[columns] <= cap).all(axis=1)
        if not fits.any():
            continue
        scores = np.where(fits, scorer(pod, requested, used), -np.inf)
        node = int(np.argmax(scores))
        assignment[pod] = node
        requested[node] += request
        used[node] += request
    return assignment


def _two(problem: BatchProblem) -> tuple[int, int]:
    if "cpu" not in problem.resources or "memory" not in problem.resources:
        raise InvalidInput("LRA and BRA need cpu and memory in the model", field="resources")
    return problem.resources.index("cpu"), problem.resources.index("memory")


def least_requested(problem: BatchProblem, *, fit: Sequence[str] | None = None) -> IntArray:
    """The paper's LeastRequestedPriority (eq. 1), one pod at a time."""
    cpu, memory = _two(problem)
    cap = problem.capacity

    def score(pod: int, requested: FloatArray, used: FloatArray) -> FloatArray:
        after = requested + problem.requests[pod]
        parts = [
            np.divide(cap[:, r] - after[:, r], cap[:, r], out=np.zeros(len(cap)), where=cap[:, r] > 0) * 10
            for r in (cpu, memory)
        ]
        return np.asarray((parts[0] + parts[1]) / 2)

    return _sequential(problem, score, fit)


def balanced_allocation(problem: BatchProblem, *, fit: Sequence[str] | None = None) -> IntArray:
    """The paper's BalancedResourceAllocation (eq. 2), one pod at a time."""
    cpu, memory = _two(problem)
    cap = problem.capacity

    def score(pod: int, requested: FloatArray, used: FloatArray) -> FloatArray:
        after = requested + problem.requests[pod]
        fractions = [
            np.divide(after[:, r], cap[:, r], out=np.zeros(len(cap)), where=cap[:, r] > 0)
            for r in (cpu, memory)
        ]
        return np.asarray(10 - np.abs(fractions[0] - fractions[1]) * 10)

    return _sequential(problem, score, fit)


def greedy_score(problem: BatchProblem, start: IntArray | None = None) -> IntArray:
    """The TBESK model's S_N as a one-by-one scheduler. With `start` (a node per pod, -1 = not placed), only
    the pods it leaves unplaced are placed, beside the placed ones: the fallback for pods an optimiser left
    unassigned."""
    return _sequential(problem, lambda pod, requested, used: node_scores(problem, pod, used), None, start)


def _scale(problem: BatchProblem) -> FloatArray:
    return np.where(problem.applicable, problem.capacity, np.inf)


def greedy_z(problem: BatchProblem) -> IntArray:
    """Each pod where Z(i) of the node grows least (utilisation of requests)."""
    scale = _scale(problem)
    applicable = problem.applicable

    def score(pod: int, requested: FloatArray, used: FloatArray) -> FloatArray:
        before = requested / scale
        after = (requested + problem.requests[pod]) / scale
        return np.asarray(z_per_node(before, applicable) - z_per_node(after, applicable))

    return _sequential(problem, score, None)


def _chunks(pods: int, width: int) -> list[slice]:
    """Pod ranges whose (pods, `width`, resources) temporaries stay around _CHUNK_ELEMENTS."""
    step = max(1, _CHUNK_ELEMENTS // max(width, 1))
    return [slice(start, min(start + step, pods)) for start in range(0, pods, step)]


def local_search_z(problem: BatchProblem, assignment: IntArray, *, max_rounds: int = _MAX_ROUNDS) -> IntArray:
    """Single-pod moves that lower Σ Z(i), best improvement first.

    Each round looks at every (pod, node) move at once and applies the best moves that touch disjoint nodes
    (their gains are then exact). The cost of moving each pod into each node is kept in a (pods, nodes)
    table and recomputed only for the nodes the last round touched, in chunks of pods, so memory stays
    O(pods × nodes) and late rounds (few moves) are cheap.
    """
    assignment = np.asarray(assignment, dtype=np.int64).copy()
    scale = _scale(problem)
    applicable = problem.applicable
    cap = problem.capacity * (1 + 1e-12)
    loads = problem.requested.copy()
    placed = assignment >= 0
    np.add.at(loads, assignment[placed], problem.requests[placed])
    movable = np.flatnonzero(placed)
    if len(movable) == 0:
        return assignment
    requests = problem.requests[movable]
    candidates = problem.candidates[movable]
    count = len(movable)
    index = np.arange(count)
    cost_in = np.empty((count, problem.nodes))
    fits = np.empty((count, problem.nodes), dtype=np.bool_)
    util = loads / scale
    z = z_per_node(util, applicable)

    def refresh(columns: IntArray) -> None:
        """cost_in and fits for every pod and the given nodes, from the current loads."""
        for part in _chunks(count, len(columns)):
            share = requests[part, None, :] / scale[None, columns, :]
            with_pod = util[None, columns, :] + share
            cost_in[part, columns] = z_per_node(with_pod, applicable[None, columns, :]) - z[None, columns]
            room = (loads[None, columns, :] + requests[part, None, :] <= cap[None, columns, :]).all(axis=2)
            fits[part, columns] = candidates[part][:, columns] & room

    def gains(pods: IntArray) -> FloatArray:
        """How much Σ Z falls when each given pod leaves its node."""
        source = assignment[movable[pods]]
        without = util[source] - requests[pods] / scale[source]
        return np.asarray(z[source] - z_per_node(without, applicable[source]))

    refresh(np.arange(problem.nodes))
    gain_out = gains(index)
    for _ in range(max_rounds):
        source = assignment[movable]
        allowed = fits.copy()
        allowed[index, source] = False
        delta = np.where(allowed, cost_in - gain_out[:, None], np.inf)
        target = np.argmin(delta, axis=1)
        best = delta[index, target]
        improving = np.flatnonzero(best < -_TOLERANCE)
        if len(improving) == 0:
            break
        touched = np.zeros(problem.nodes, dtype=np.bool_)
        for k in improving[np.argsort(best[improving], kind="stable")].tolist():
            a, b = int(source[k]), int(target[k])
            if touched[a] or touched[b]:
                continue
            touched[a] = touched[b] = True
            assignment[movable[k]] = b
            loads[a] -= requests[k]
            loads[b] += requests[k]
        columns = np.flatnonzero(touched)
        util[columns] = loads[columns] / scale[columns]
        z[columns] = z_per_node(util[columns], applicable[columns])
        refresh(columns)
        moved_or_neighbours = np.flatnonzero(touched[assignment[movable]])
        gain_out[moved_or_neighbours] = gains(moved_or_neighbours)
    return assignment


def reference(problem: BatchProblem) -> IntArray:
    """Greedy on Z, then single-pod-move local search on Σ Z(i)."""
    return local_search_z(problem, greedy_z(problem))
