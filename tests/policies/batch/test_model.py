"""The TBESK model: pod classes, R_N, L_N and S_N by hand, batch fitness, Z_avg, bad input."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from policies.batch import (
    BALANCED,
    COMPRESSIBLE,
    INCOMPRESSIBLE,
    ClassWeights,
    Evaluator,
    class_weights,
    classify,
    evaluate,
    make_problem,
    node_scores,
    optimise,
    pod_scores,
    z_avg,
    z_per_node,
)
from schemas.exceptions import InvalidInput

FOUR = ("cpu", "memory", "bandwidth", "disk")
NODE = [10.0, 100.0, 10.0, 100.0]


def problem(capacity: Any, requests: Any, **extra: Any):
    return make_problem(np.atleast_2d(capacity), np.atleast_2d(requests), **extra)


def one_pod_score(capacity: Any, used: Any, request: Any, **extra: Any) -> float:
    """S_N of one pod on one node that already uses `used`."""
    p = problem(capacity, request, requested=np.atleast_2d(used), **extra)
    return float(node_scores(p, 0, p.used)[0])


def random_problem(seed: int, nodes: int, pods: int, *, zero_capacity: bool = False):
    rng = np.random.default_rng(seed)
    capacity = rng.uniform(20, 40, (nodes, 4))
    requests = rng.uniform(0.1, 2.0, (pods, 4))
    if zero_capacity:
        capacity[::3, 3] = 0.0  # every third node has no disk...
        requests[::2, 3] = 0.0  # ...and half the pods ask for none
    used = capacity * rng.uniform(0.0, 0.3, (nodes, 4))
    return make_problem(capacity, requests, requested=used, used=used * 1.1)


# ------------------------------------------------------------------------------------- classes


@pytest.mark.parametrize(
    ("request_", "capacity", "resources", "expected"),
    [
        pytest.param(
            [2, 10, 4, 10], NODE, FOUR, COMPRESSIBLE, id="A pod heavier on cpu and bandwidth is compressible."
        ),
        pytest.param(
            [1, 20, 1, 40],
            NODE,
            FOUR,
            INCOMPRESSIBLE,
            id="A pod heavier on memory and disk is incompressible.",
        ),
        pytest.param([2, 10, 1, 40], NODE, FOUR, BALANCED, id="A pod heavy on cpu and disk is balanced."),
        pytest.param(
            [1, 20, 4, 10], NODE, FOUR, BALANCED, id="A pod heavy on memory and bandwidth is balanced."
        ),
        pytest.param(
            [1, 10, 4, 10],
            NODE,
            FOUR,
            BALANCED,
            id="A cpu/memory ratio of exactly 1 is balanced, not compressible.",
        ),
        pytest.param(
            [1, 20, 1, 10],
            NODE,
            FOUR,
            BALANCED,
            id="A bandwidth/disk ratio of exactly 1 is balanced, not incompressible.",
        ),
        pytest.param(
            [1, 0, 1, 0],
            NODE,
            FOUR,
            COMPRESSIBLE,
            id="A pod asking no memory and no disk has infinite ratios: compressible.",
        ),
        pytest.param([0, 0, 0, 0], NODE, FOUR, BALANCED, id="A pod asking for nothing is balanced."),
        pytest.param(
            [2, 10, 4, 10],
            [40, 100, 10, 100],
            FOUR,
            BALANCED,
            id="The class is relative to the node: the compressible pod is balanced where cpu is 4x larger.",
        ),
        pytest.param(
            [1, 20, 1, 40],
            [5, 100, 10, 100],
            FOUR,
            BALANCED,
            id="The incompressible pod is balanced on half the cpu, where its cpu and memory shares tie.",
        ),
        pytest.param(
            [1, 10, 0, 0],
            [10, 100, 0, 0],
            FOUR,
            BALANCED,
            id="A node without bandwidth or disk counts their shares as zero.",
        ),
        pytest.param(
            [2, 10, 3],
            [10, 100, 8],
            ("cpu", "memory", "nvidia.com/gpu"),
            COMPRESSIBLE,
            id="Without bandwidth and disk in the model the cpu/memory pair decides alone.",
        ),
        pytest.param(
            [1, 20, 3],
            [10, 100, 8],
            ("cpu", "memory", "nvidia.com/gpu"),
            INCOMPRESSIBLE,
            id="Without bandwidth and disk a memory-heavy pod is incompressible.",
        ),
    ],
)
def test_pods_are_classified_by_their_shares_of_the_node(request_, capacity, resources, expected):
    classes = classify(
        np.atleast_2d(np.array(request_, float)), np.atleast_2d(np.array(capacity, float)), resources
    )
    assert classes.tolist() == [[expected]]


# ----------------------------------------------------------------------------- scores by hand


@pytest.mark.parametrize(
    ("capacity", "used", "pod_request", "extra", "expected"),
    [
        pytest.param(
            NODE,
            [2, 20, 1, 10],
            [1, 10, 1, 10],
            {},
            # balanced (cpu/mem = 1): μ = ν = 0.25 each. R: 1 − 1/8, 1 − 10/80, 1 − 1/9, 1 − 10/90.
            # L: 3/10, 30/100, 2/10, 20/100 against T = 0.8.
            0.25 * (7 / 8 + 7 / 8 + 8 / 9 + 8 / 9) + 0.25 * (0.5 + 0.5 + 0.6 + 0.6),
            id="A balanced pod on a part-used node: R_N and L_N with equal weights.",
        ),
        pytest.param(
            NODE,
            [2, 20, 1, 10],
            [2, 10, 2, 10],
            {},
            # compressible: μ = ν = (0.4, 0.1, 0.4, 0.1). R: 1 − 2/8, 1 − 10/80, 1 − 2/9, 1 − 10/90.
            # L: 4/10, 30/100, 3/10, 20/100.
            (0.4 * 0.75 + 0.1 * 0.875 + 0.4 * 7 / 9 + 0.1 * 8 / 9)
            + (0.4 * 0.4 + 0.1 * 0.5 + 0.4 * 0.5 + 0.1 * 0.6),
            id="A compressible pod weighs cpu and bandwidth 0.4.",
        ),
        pytest.param(
            NODE,
            [0, 0, 0, 0],
            [1, 20, 1, 40],
            {"critical": [0.5, 0.9, 0.5, 0.9]},
            # incompressible: (0.1, 0.4, 0.1, 0.4). R: 0.9, 0.8, 0.9, 0.6. L: 0.1, 0.2, 0.1, 0.4.
            (0.1 * 0.9 + 0.4 * 0.8 + 0.1 * 0.9 + 0.4 * 0.6) + (0.1 * 0.4 + 0.4 * 0.7 + 0.1 * 0.4 + 0.4 * 0.5),
            id="An incompressible pod on an empty node with per-resource critical loads.",
        ),
        pytest.param(
            NODE,
            [9, 0, 0, 0],
            [2, 10, 1, 10],
            {},
            # cpu is already over what is free: R_cpu clamps to 0; L_cpu = 11/10. Balanced (cpu/mem 2 but
            # bandwidth/disk 1).
            0.25 * (0 + 0.9 + 0.9 + 0.9) + 0.25 * ((0.8 - 1.1) + 0.7 + 0.7 + 0.7),
            id="A pod that does not fit gets R_cpu = 0, never a negative or infinite rate.",
        ),
    ],
)
def test_node_score_is_r_n_plus_l_n(capacity, used, pod_request, extra, expected):
    assert one_pod_score(capacity, used, pod_request, **extra) == pytest.approx(expected, abs=1e-12)


def test_the_peak_usage_replaces_requests_in_the_score_but_not_in_the_capacity_check():
    p = problem(NODE, [1, 10, 1, 10], requested=[[2, 20, 1, 10]], used=[[6, 20, 1, 10]])
    # R_cpu = 1 − 1/(10 − 6), L_cpu = 7/10; the pod still fits by requests (2 + 1 ≤ 10).
    expected = 0.25 * (0.75 + 7 / 8 + 8 / 9 + 8 / 9) + 0.25 * (0.1 + 0.5 + 0.6 + 0.6)
    assert float(node_scores(p, 0, p.used)[0]) == pytest.approx(expected)
    assert p.candidates.tolist() == [[True]]


def test_the_batch_fitness_counts_the_other_batch_pods_on_the_node():
    p = problem(NODE, [[1, 10, 1, 10], [1, 10, 1, 10]])
    both = evaluate(p, np.array([[0, 0]]))
    # Each pod sees the other as used: R = 1 − 1/9, 1 − 10/90, ...; L = 2/10, 20/100, ... for both.
    one = 0.25 * 4 * (8 / 9) + 0.25 * 4 * 0.6
    assert both.fitness[0] == pytest.approx(2 * one)
    assert both.cost[0] == pytest.approx(-one)
    assert both.overflow[0] == 0


@pytest.mark.parametrize(
    ("seed", "zero_capacity"),
    [
        pytest.param(
            1, False, id="The fast evaluator matches the formulas on a cluster with every resource."
        ),
        pytest.param(2, True, id="The fast evaluator matches the formulas when some nodes have no disk."),
    ],
)
def test_the_population_evaluator_equals_the_formulas_pod_by_pod(seed, zero_capacity):
    p = random_problem(seed, nodes=7, pods=40, zero_capacity=zero_capacity)
    rng = np.random.default_rng(seed)
    population = np.array(
        [[rng.choice(np.flatnonzero(p.candidates[i])) for i in range(p.pods)] for _ in range(6)]
    )
    fast = Evaluator(p, 6)(population).fitness
    loads = Evaluator(p, 6).loads(population)
    direct = pod_scores(p, population, p.used + loads).sum(axis=1)
    np.testing.assert_allclose(fast, direct, rtol=1e-12)
    assert np.isfinite(fast).all()


def test_an_assignment_that_overfills_a_node_costs_more_than_any_feasible_one():
    p = problem([[4, 40, 4, 40], [4, 40, 4, 40]], [[3, 10, 1, 10]] * 2)
    spread, piled = evaluate(p, np.array([[0, 1], [0, 0]])).cost
    assert piled > spread
    assert piled > 1.0  # feasible costs are at most 1 (−fitness / pods)


# --------------------------------------------------------------------------------------- Z_avg


@pytest.mark.parametrize(
    ("util", "applicable", "expected"),
    [
        pytest.param(
            [[0.2, 0.4, 0.6, 0.8]],
            None,
            [np.sqrt(0.2)],
            id="Deviations from the node's mean, squared and summed, square-rooted.",
        ),
        pytest.param(
            [[0.5, 0.5, 0.5, 0.5]], None, [0.0], id="Equal utilisation of every resource is zero imbalance."
        ),
        pytest.param([[0.2, 0.4, 0.6, 0.8], [0.5] * 4], None, [np.sqrt(0.2), 0.0], id="Z is per node."),
        pytest.param(
            [[0.2, 0.6, 0.0]],
            [[True, True, False]],
            [np.sqrt(0.08)],
            id="A resource the node does not have is left out of its mean.",
        ),
    ],
)
def test_z_per_node_and_z_avg_by_hand(util, applicable, expected):
    util_array = np.array(util, float)
    mask = None if applicable is None else np.array(applicable)
    np.testing.assert_allclose(z_per_node(util_array, mask), expected, atol=1e-12)
    assert z_avg(util_array, mask) == pytest.approx(float(np.mean(expected)))


def test_z_avg_of_a_placement_by_hand():
    p = problem([[10, 100, 10, 100], [10, 100, 10, 100]], [[2, 40, 6, 80], [5, 50, 5, 50]])
    from policies.batch import utilisation

    util = utilisation(p, np.array([0, 1]))
    # Node 0: (0.2, 0.4, 0.6, 0.8) → sqrt(0.2); node 1: 0.5 everywhere → 0.
    assert z_avg(util) == pytest.approx(np.sqrt(0.2) / 2)


# ----------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "field"),
    [
        pytest.param(
            lambda: class_weights(
                FOUR,
                mu={
                    "compressible": [0.5, 0.5, 0.5, 0.5],
                    "incompressible": [0.25] * 4,
                    "balanced": [0.25] * 4,
                },
            ),
            "weights.mu.compressible",
            id="Weights that do not sum to 1 are refused naming the class.",
        ),
        pytest.param(
            lambda: class_weights(
                FOUR,
                nu={"compressible": [1.2, -0.2, 0, 0], "incompressible": [0.25] * 4, "balanced": [0.25] * 4},
            ),
            "weights.nu.compressible",
            id="Negative weights are refused even when they sum to 1.",
        ),
        pytest.param(
            lambda: class_weights(FOUR, mu={"compressible": [0.25] * 4, "incompressible": [0.25] * 4}),
            "weights.mu.balanced",
            id="A class without weights is refused.",
        ),
        pytest.param(
            lambda: class_weights(
                FOUR, mu={"compressible": {"gpu": 1.0}, "incompressible": [0.25] * 4, "balanced": [0.25] * 4}
            ),
            "weights.mu.compressible",
            id="A weight for a resource the model does not have is refused.",
        ),
        pytest.param(
            lambda: problem(
                NODE, [1, 1, 1, 1], weights=ClassWeights(np.full((3, 4), 0.3), np.full((3, 4), 0.25))
            ),
            "weights.mu",
            id="Weight matrices given directly are checked too.",
        ),
        pytest.param(
            lambda: problem(NODE, [1, 1, 1, float("nan")]), "requests", id="A NaN request is refused."
        ),
        pytest.param(
            lambda: problem([10, -1, 10, 100], [1, 1, 1, 1]), "capacity", id="A negative capacity is refused."
        ),
        pytest.param(
            lambda: problem(NODE, [1, 1, 1]),
            "requests",
            id="Requests with the wrong number of resources are refused.",
        ),
        pytest.param(
            lambda: problem(NODE, [1, 1, 1, 1], critical=0.0),
            "critical",
            id="A critical load of 0 is refused.",
        ),
        pytest.param(
            lambda: problem(NODE, [1, 1, 1, 1], critical=1.5),
            "critical",
            id="A critical load above 1 is refused.",
        ),
        pytest.param(
            lambda: problem(NODE, [1, 1, 1, 1], candidates=[[True, False]]),
            "candidates",
            id="A candidate mask of the wrong shape is refused.",
        ),
        pytest.param(
            lambda: make_problem([[1.0]], [[1.0]], resources=("cpu", "cpu")),
            "resources",
            id="A resource named twice is refused.",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_field(call, field):
    with pytest.raises(InvalidInput) as caught:
        call()
    assert caught.value.field == field
    assert "\n" not in str(caught.value)


def test_zero_capacity_resources_never_give_nan_and_keep_requesting_pods_away():
    capacity = [[10, 100, 10, 0], [10, 100, 10, 100], [0, 0, 0, 0]]
    requests = [[1, 10, 1, 0], [1, 10, 1, 5], [0, 0, 0, 0]]
    p = problem(capacity, requests)
    # Pod 1 asks for disk: not node 0 (no disk), not node 2 (nothing at all).
    assert p.candidates.tolist() == [[True, True, False], [False, True, False], [True, True, True]]
    every = np.array([[0, 1, 2], [1, 1, 0], [0, 1, 1]])
    result = evaluate(p, every)
    assert np.isfinite(result.cost).all() and np.isfinite(result.fitness).all()
    for pod in range(3):
        assert np.isfinite(node_scores(p, pod, p.used)).all()


def test_a_pod_with_no_candidate_node_is_left_unassigned_and_the_others_are_placed():
    p = problem([[4, 40, 4, 40], [4, 40, 4, 40]], [[1, 10, 1, 10], [8, 10, 1, 10], [1, 10, 1, 10]])
    assert p.counts.tolist() == [2, 0, 2]
    result = optimise(p, "tbesk", seed=3)
    assert result.assignment[1] == -1
    assert (result.assignment[[0, 2]] >= 0).all()


def test_a_batch_where_no_pod_has_a_candidate_returns_all_unassigned():
    p = problem([[1, 1, 1, 1]], [[2, 2, 2, 2]] * 3)
    assert optimise(p, "bes", seed=0).assignment.tolist() == [-1, -1, -1]
