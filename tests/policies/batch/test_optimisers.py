"""BES and TBESK, the sequential baselines and the Z reference: exactness on tiny instances,
capacity, determinism, the encoding, and LRA/BRA by hand."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from policies.batch import (
    BesParams,
    Evaluator,
    balanced_allocation,
    decode,
    feasible,
    greedy_score,
    greedy_z,
    least_requested,
    local_search_z,
    make_problem,
    optimise,
    reference,
    skew_tent,
    utilisation,
    z_avg,
)

ALGORITHMS = ("bes", "tbesk")


def tiny(seed: int, nodes: int = 3, pods: int = 5):
    rng = np.random.default_rng(seed)
    return make_problem(rng.uniform(5, 10, (nodes, 4)), rng.uniform(0.5, 3, (pods, 4)))


def tight(seed: int, load: float, nodes: int = 4, pods: int = 24, candidates: Any = None):
    """Pods whose requests sum to `load` × the cluster's capacity, resource by resource."""
    rng = np.random.default_rng(seed)
    capacity = rng.uniform(10, 20, (nodes, 4))
    requests = rng.uniform(0.5, 1.5, (pods, 4))
    requests *= load * capacity.sum(axis=0) / requests.sum(axis=0)
    return make_problem(capacity, requests, candidates=candidates)


def exhaustive_best(problem, objective: str) -> float:
    every = np.array(list(itertools.product(range(problem.nodes), repeat=problem.pods)))
    return float(Evaluator(problem, len(every), objective)(every).cost.min())


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize(
    ("instance", "objective"),
    [
        pytest.param(0, "score", id="Instance 0 (3 nodes, 5 pods), batch fitness: the exhaustive optimum."),
        pytest.param(1, "score", id="Instance 1 (3 nodes, 5 pods), batch fitness: the exhaustive optimum."),
        pytest.param(4, "score", id="Instance 4 (3 nodes, 5 pods), batch fitness: the exhaustive optimum."),
        pytest.param(6, "z", id="Instance 6 (3 nodes, 5 pods), Z_avg: the exhaustive optimum."),
        pytest.param(7, "z", id="Instance 7 (3 nodes, 5 pods), Z_avg: the exhaustive optimum."),
    ],
)
def test_on_a_tiny_instance_the_optimiser_reaches_the_exhaustive_optimum(algorithm, instance, objective):
    problem = tiny(instance)
    result = optimise(problem, algorithm, BesParams(30, 100), seed=instance, objective=objective)
    found = float(Evaluator(problem, 1, objective)(result.assignment[None]).cost[0])
    assert found == pytest.approx(exhaustive_best(problem, objective), abs=1e-12)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize(
    "problem",
    [
        pytest.param(tight(1, 0.93), id="A cluster 93 % full, where random assignments overflow."),
        pytest.param(tight(2, 1.3), id="More pods than fit: some are left unassigned, none overfill."),
        pytest.param(
            tight(3, 0.6, candidates=np.eye(4, dtype=bool)[np.arange(24) % 4]),
            id="Each pod may use one node only.",
        ),
    ],
)
def test_the_optimiser_never_returns_an_assignment_that_overfills_a_node(algorithm, problem):
    for seed in range(3):
        assignment = optimise(problem, algorithm, BesParams(10, 15), seed=seed).assignment
        assert feasible(problem, assignment)
        # A pod left unassigned (for one-by-one placement) fits on none of its candidates beside the rest.
        loads = problem.requested.copy()
        np.add.at(loads, assignment[assignment >= 0], problem.requests[assignment >= 0])
        for pod in np.flatnonzero(assignment < 0):
            room = (loads + problem.requests[pod] <= problem.capacity).all(axis=1)
            assert not (room & problem.candidates[pod]).any()


@pytest.mark.parametrize(
    ("algorithm", "objective"),
    [
        pytest.param("bes", "score", id="BES with the same seed gives the same assignment."),
        pytest.param("tbesk", "score", id="TBESK with the same seed gives the same assignment."),
        pytest.param("tbesk", "z", id="TBESK on Z_avg with the same seed gives the same assignment."),
    ],
)
def test_the_same_seed_gives_the_identical_assignment(algorithm, objective):
    problem = tight(5, 0.7, nodes=8, pods=60)
    params = BesParams(12, 20)
    first = optimise(problem, algorithm, params, seed=42, objective=objective)
    second = optimise(problem, algorithm, params, seed=42, objective=objective)
    assert first.assignment.tolist() == second.assignment.tolist()
    assert first.history.tolist() == second.history.tolist()


def test_the_skew_tent_map_stays_chaotic_where_the_doubling_map_collapses():
    values = skew_tent(np.random.default_rng(0), 2000, 8)
    assert ((values > 0) & (values < 1)).all()
    assert values[-200:].std() > 0.2  # still spread over (0, 1) after 1,800 steps
    x = 0.123456789
    for _ in range(60):  # the paper's x → 2x mod 1 in binary floating point
        x = (2 * x) % 1.0
    assert x == 0.0


@pytest.mark.parametrize(
    ("positions", "candidates", "expected"),
    [
        pytest.param(
            [-2.0, -1.0001, -1.0, -0.0001, 0.0, 0.9999, 1.0, 1.9999],
            None,
            [0, 0, 1, 1, 2, 2, 3, 3],
            id="Four nodes split [-2, 2) into four bins of width 1, centred on 0.",
        ),
        pytest.param(
            [-2.0, -0.0001, 0.0, 1.9999],
            [False, True, False, True],
            [1, 1, 3, 3],
            id="A pod with two candidates splits the same interval in two equal halves.",
        ),
    ],
)
def test_positions_decode_to_equal_width_bins(positions, candidates, expected):
    count = len(positions)
    mask = None if candidates is None else np.tile(candidates, (count, 1))
    problem = make_problem(np.full((4, 4), 10.0), np.ones((count, 4)), candidates=mask)
    assert decode(problem, np.array([positions])).tolist() == [expected]


# ------------------------------------------------------------------------------------- baselines


@pytest.mark.parametrize(
    ("baseline", "extra", "expected"),
    [
        # Node a (10 cpu, 100 memory) has (0, 50) requested, node b (5, 50); the pod asks (1, 10).
        # LRA: a ((9/10 + 40/100)·10)/2 = 6.5, b ((4/10 + 40/100)·10)/2 = 4 → a.
        pytest.param(least_requested, {}, 0, id="LRA takes the node with the most cpu and memory left."),
        # BRA: a 10 − |0.1 − 0.6|·10 = 5, b 10 − |0.6 − 0.6|·10 = 10 → b.
        pytest.param(
            balanced_allocation, {}, 1, id="BRA takes the node whose cpu and memory shares are closest."
        ),
        pytest.param(
            least_requested,
            {"bandwidth": (9.5, 0)},
            1,
            id="LRA scores cpu and memory only, but a node without bandwidth left is not a candidate.",
        ),
        pytest.param(
            least_requested,
            {"bandwidth": (9.5, 0), "fit": ("cpu", "memory")},
            0,
            id="With the paper's Kubernetes fit check (cpu and memory), LRA overfills bandwidth.",
        ),
    ],
)
def test_the_paper_baselines_by_hand(baseline, extra, expected):
    bandwidth = extra.get("bandwidth", (0, 0))
    requested = [[0, 50, bandwidth[0], 0], [5, 50, bandwidth[1], 0]]
    problem = make_problem([[10, 100, 10, 100]] * 2, [[1, 10, 1, 1]], requested=requested)
    kwargs = {"fit": extra["fit"]} if "fit" in extra else {}
    assert baseline(problem, **kwargs).tolist() == [expected]


def test_the_reference_local_search_only_lowers_z_and_stays_within_capacity():
    problem = tight(7, 0.8, nodes=6, pods=80)
    start = greedy_z(problem)
    improved = reference(problem)
    assert z_avg(utilisation(problem, improved)) <= z_avg(utilisation(problem, start)) + 1e-15
    assert feasible(problem, improved)
    random_start = np.random.default_rng(0).integers(0, 6, 80)
    polished = local_search_z(tight(7, 0.5, nodes=6, pods=80), random_start)
    assert z_avg(utilisation(problem, polished)) < z_avg(utilisation(problem, random_start))


def test_the_one_by_one_fallback_places_only_the_pods_left_unassigned():
    problem = tight(8, 0.5, nodes=4, pods=10)
    start = np.array([0, 1, 2, 3, -1, 0, 1, -1, 2, 3])
    filled = greedy_score(problem, start)
    assert filled[start >= 0].tolist() == start[start >= 0].tolist()
    assert (filled >= 0).all() and feasible(problem, filled)
