"""A long batch as consecutive windows of pods, each optimised on the cluster the earlier windows filled.

This is what the scheduler's batch mode does with a queue longer than ``batch_size``, written over one
`BatchProblem` so the paper experiment can run it. Why it matters: BES and TBESK search one dimension per
pod with 30 eagles and 100 iterations, so on 1,800 pods each dimension barely moves from its chaotic
start, while on 20 pods the same budget explores the window thoroughly. Each window's pods are decided
from the pods before them only, so a prefix of whole windows of a longer run is the shorter run.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from policies.batch.bes import Algorithm, BesParams, optimise
from policies.batch.greedy import greedy_score
from policies.batch.model import BatchProblem, Objective
from schemas.exceptions import InvalidInput

__all__ = ["optimise_windows"]

IntArray = npt.NDArray[np.int64]


def optimise_windows(
    problem: BatchProblem,
    algorithm: Algorithm = "tbesk",
    params: BesParams | None = None,
    *,
    window: int,
    seed: int = 0,
    objective: Objective = "score",
) -> IntArray:
    """A node per pod (-1: it fits nowhere). Window k (pods k·window ..) is optimised with seed
    ``seed + k·window`` beside everything placed before it, and the pods it leaves unassigned are placed
    one by one by S_N, as the scheduler's batch mode falls back to one-by-one placement."""
    if window < 1:
        raise InvalidInput("must be at least 1", field="window")
    requested = problem.requested.copy()
    used = problem.used.copy()
    result = np.full(problem.pods, -1, dtype=np.int64)
    for start in range(0, problem.pods, window):
        pods = slice(start, min(start + window, problem.pods))
        part = problem.subset(pods, requested, used)
        found = optimise(part, algorithm, params, seed=seed + start, objective=objective).assignment
        chosen = greedy_score(part, found)
        result[pods] = chosen
        placed = chosen >= 0
        np.add.at(requested, chosen[placed], part.requests[placed])
        np.add.at(used, chosen[placed], part.requests[placed])
    return result
