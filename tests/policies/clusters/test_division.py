"""Replica division: Webster apportionment, the four strategies, scaling, shortfalls.

The Webster cases port Karmada's ``pkg/util/helper/webstermethod_test.go`` (TestAllocateWebsterSeats and
ExampleAllocateWebsterSeats). One differs by its tie rule: in round 6 of the classic example parties A
(2 seats, 100,000 votes) and D (0 seats, 20,000 votes) tie at 20,000; upstream (that version) breaks ties by
votes and gives A the seat, eyrie breaks them by fewer seats and gives D the seat. Round 7 agrees again.
"""

import random

import pytest

from policies.clusters.division import divide, proportional, webster

CLASSIC = {"PartyA": 100_000, "PartyB": 80_000, "PartyC": 30_000, "PartyD": 20_000}

WEBSTER = [
    (
        "the doc example gives 2, 1, 1 of four seats",
        4,
        {"Alpha": 1200, "Beta": 900, "Gamma": 400},
        None,
        {"Alpha": 2, "Beta": 1, "Gamma": 1},
    ),
    ("classic example, round 1", 1, CLASSIC, None, {"PartyA": 1, "PartyB": 0, "PartyC": 0, "PartyD": 0}),
    ("classic example, round 2", 2, CLASSIC, None, {"PartyA": 1, "PartyB": 1, "PartyC": 0, "PartyD": 0}),
    ("classic example, round 3", 3, CLASSIC, None, {"PartyA": 2, "PartyB": 1, "PartyC": 0, "PartyD": 0}),
    ("classic example, round 4", 4, CLASSIC, None, {"PartyA": 2, "PartyB": 1, "PartyC": 1, "PartyD": 0}),
    ("classic example, round 5", 5, CLASSIC, None, {"PartyA": 2, "PartyB": 2, "PartyC": 1, "PartyD": 0}),
    (
        "classic example, round 6: the tie at 20,000 goes to fewer seats (upstream: to more votes)",
        6,
        CLASSIC,
        None,
        {"PartyA": 2, "PartyB": 2, "PartyC": 1, "PartyD": 1},
    ),
    ("classic example, round 7", 7, CLASSIC, None, {"PartyA": 3, "PartyB": 2, "PartyC": 1, "PartyD": 1}),
    ("classic example, round 8", 8, CLASSIC, None, {"PartyA": 3, "PartyB": 3, "PartyC": 1, "PartyD": 1}),
    ("no parties get nothing", 1, {}, None, {}),
    ("no seats leave everyone at zero", 0, {"PartyA": 100, "PartyB": 200}, None, {"PartyA": 0, "PartyB": 0}),
    ("a larger priority wins outright", 1, {"PartyA": 1, "PartyB": 2}, None, {"PartyA": 0, "PartyB": 1}),
    (
        "an equal priority goes to fewer seats",
        1,
        {"PartyA": 0, "PartyB": 0},
        {"PartyA": 2, "PartyB": 1},
        {"PartyA": 2, "PartyB": 2},
    ),
    (
        "equal priority and seats go to the first name",
        1,
        {"PartyA": 1, "PartyB": 1},
        None,
        {"PartyA": 1, "PartyB": 0},
    ),
    (
        "a party without votes gets no new seat while others have votes",
        2,
        {"NewParty1": 1, "NewParty2": 1, "OldParty": 0},
        {"OldParty": 0},
        {"NewParty1": 1, "NewParty2": 1, "OldParty": 0},
    ),
    (
        "new and old parties compete for new seats",
        2,
        {"OldParty": 1, "NewParty": 1},
        {"OldParty": 1},
        {"NewParty": 2, "OldParty": 1},
    ),
]


@pytest.mark.parametrize(("case", "seats", "votes", "start", "expect"), WEBSTER, ids=[w[0] for w in WEBSTER])
def test_webster_seats(case, seats, votes, start, expect):
    assert webster(seats, votes, start) == expect


@pytest.mark.parametrize(
    ("replicas", "expect"),
    [(5, {"a": 2, "b": 2, "c": 1}), (6, {"a": 3, "b": 2, "c": 1})],
    ids=[
        "five replicas by 170:110:60 give 2, 2, 1",
        "six replicas by 170:110:60 give 3, 2, 1 (b keeps its 2)",
    ],
)
def test_webster_on_170_110_60(replicas, expect):
    assert proportional(replicas, {"a": 170, "b": 110, "c": 60}) == expect


def test_the_old_dispenser_would_take_a_replica_from_b_when_the_total_grows():
    """The paradox Webster avoids: Karmada's older dispenser (⌊w·n/Σw⌋ each, the remainder one by one to the
    largest weights) gives 170:110:60 3, 2, 0 of five replicas but 4, 1, 1 of six."""

    def old_dispenser(n, weights):
        total = sum(weights.values())
        result = {k: w * n // total for k, w in weights.items()}
        for k in sorted(weights, key=lambda k: (-weights[k], k))[: n - sum(result.values())]:
            result[k] += 1
        return result

    weights = {"a": 170, "b": 110, "c": 60}
    assert old_dispenser(5, weights) == {"a": 3, "b": 2, "c": 0}
    assert old_dispenser(6, weights) == {"a": 4, "b": 1, "c": 1}
    assert proportional(5, weights)["b"] == proportional(6, weights)["b"] == 2


def test_no_cluster_loses_a_replica_when_the_total_grows():
    rng = random.Random(4)
    cases = [{"a": 170, "b": 110, "c": 60}] + [
        {f"c{i}": rng.randint(0, 400) for i in range(rng.randint(2, 7))} for _ in range(120)
    ]
    for weights in cases:
        if not any(weights.values()):
            continue
        previous = proportional(0, weights)
        for n in range(1, 150):
            current = proportional(n, weights)
            assert sum(current.values()) == n
            assert all(current[k] >= previous[k] for k in weights), (weights, n)
            previous = current


def test_dynamic_division_never_gives_a_cluster_more_than_its_estimate():
    rng = random.Random(7)
    for _ in range(500):
        available = {f"c{i}": rng.randint(0, 30) for i in range(rng.randint(1, 6))}
        total = sum(available.values())
        for strategy in ("dynamic", "aggregated"):
            replicas = rng.randint(0, total + 3)
            division = divide(replicas, list(available), strategy, available=available)
            if replicas > total:
                assert not division.feasible and division.assignment == {}
                continue
            assert division.total == replicas
            assert all(count <= available[name] for name, count in division.assignment.items())


AGGREGATED = [
    ("one cluster that holds everything is enough", {"a": 5, "b": 12, "c": 6}, 12, None, {"b": 12}),
    (
        "the largest clusters first, as few as cover the replicas",
        {"a": 5, "b": 7, "c": 6},
        12,
        None,
        {"b": 6, "c": 6},
    ),
    (
        "clusters already holding replicas come first when scaling up",
        {"a": 5, "b": 7, "c": 20},
        12,
        {"a": 2},
        {"a": 4, "c": 8},
    ),
    ("equal estimates are taken by name", {"b": 6, "a": 6, "c": 6}, 12, None, {"a": 6, "b": 6}),
]


@pytest.mark.parametrize(
    ("case", "available", "replicas", "current", "expect"), AGGREGATED, ids=[a[0] for a in AGGREGATED]
)
def test_aggregated_chooses_the_fewest_clusters(case, available, replicas, current, expect):
    assert (
        divide(replicas, list(available), "aggregated", available=available, current=current).assignment
        == expect
    )


STRATEGIES = [
    ("duplicated gives each cluster all replicas", "duplicated", 3, {}, {}, None, {"x": 3, "y": 3}),
    (
        "static ignores estimates and current replicas",
        "static",
        4,
        {"x": 3},
        {"x": 0, "y": 0},
        {"x": 9},
        {"x": 4},
    ),
    (
        "static weights of zero everywhere mean equal weights",
        "static",
        4,
        {"x": 0, "y": 0},
        {},
        None,
        {"x": 2, "y": 2},
    ),
    ("static weights naming unknown clusters are ignored", "static", 2, {"z": 5, "x": 1}, {}, None, {"x": 2}),
    (
        "dynamic with unchanged replicas keeps the current division",
        "dynamic",
        4,
        {},
        {"x": 0, "y": 0},
        {"x": 1, "y": 3},
        {"x": 1, "y": 3},
    ),
    (
        "dynamic current replicas of unknown clusters are ignored",
        "dynamic",
        4,
        {},
        {"x": 4, "y": 4},
        {"gone": 4},
        {"x": 2, "y": 2},
    ),
    ("dynamic scale-down to zero releases everything", "dynamic", 0, {}, {}, {"x": 2, "y": 3}, {}),
    ("clusters with no room get nothing", "dynamic", 3, {}, {"x": 0, "y": 5}, None, {"y": 3}),
]


@pytest.mark.parametrize(
    ("case", "strategy", "replicas", "weights", "available", "current", "expect"),
    STRATEGIES,
    ids=[s[0] for s in STRATEGIES],
)
def test_strategies(case, strategy, replicas, weights, available, current, expect):
    division = divide(replicas, ["x", "y"], strategy, available=available, weights=weights, current=current)
    assert division.assignment == expect


def test_a_shortfall_places_nothing_and_says_by_how_much():
    division = divide(10, ["x", "y"], "dynamic", available={"x": 3, "y": 4}, current={"x": 1})
    assert (division.feasible, division.assignment, division.needed, division.available) == (False, {}, 9, 7)
