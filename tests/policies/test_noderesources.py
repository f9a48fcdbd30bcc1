"""NodeResourcesFit and BalancedAllocation against hand-worked numbers and kube-scheduler's integer rules."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.plugins.noderesources.fit import broken_linear
from tests.policies.builders import GI, node, place, pod, profile, scheduler

THREE_MACHINES = [
    node(f"m{i}", cpu=64, memory="64Gi", pods=110, pod_requests=[pod(f"base{i}", cpu=c, memory=f"{m}Gi")])
    for i, (c, m) in enumerate([(50, 10), (30, 30), (10, 50)], start=1)
]


def scores_of(s, p, plugin):
    return s.explain(p).scores[plugin]


def v133(document):
    """The same profile following kube-scheduler 1.33 (BalancedAllocation scores the balance with the pod)."""
    return {**document, "kubernetesVersion": "1.33"}


def test_the_first_pod_on_three_machines_scores_as_kubernetes_does_and_goes_to_machine_1():
    s = scheduler(THREE_MACHINES)
    first = pod("p1", cpu=2, memory="10Gi")
    explanation = s.explain(first)
    # The formula in floats gives 43.75 everywhere; Kubernetes' integer truncation gives 43.
    assert explanation.scores["NodeResourcesFit"] == {"m1": 43, "m2": 43, "m3": 43}
    # Balance without → with the pod: m1 68 → 75, m2 100 → 93, m3 68 → 62; 50 + (50 + with − without) / 2.
    # m1 is evened out by the pod and wins; m2, balanced before, is skewed by it.
    assert explanation.scores["NodeResourcesBalancedAllocation"] == {"m1": 78, "m2": 71, "m3": 72}
    assert explanation.selected == "m1"


def test_the_first_pod_on_three_machines_goes_to_machine_2_under_kubernetes_1_33():
    s = scheduler(THREE_MACHINES, v133(profile(score=[("NodeResourcesFit", 1), (BA, 1)])))
    explanation = s.explain(pod("p1", cpu=2, memory="10Gi", scheduler_name="test"))
    # 75, 93.75 and 62.5, truncated: the balance with the pod alone.
    assert explanation.scores[BA] == {"m1": 75, "m2": 93, "m3": 62}
    assert explanation.selected == "m2"


def test_the_second_pod_on_three_machines_sees_the_first():
    s = scheduler(THREE_MACHINES)
    assert place(s, pod("p1", cpu=2, memory="10Gi")) == {"p1": "m1"}
    second = pod("p2", cpu=5, memory="5Gi")
    explanation = s.explain(second)
    assert explanation.scores["NodeResourcesFit"] == {"m1": 35, "m2": 45, "m3": 45}
    # The pod shifts no node's balance: m1 75 → 75 (52, 20 → 57, 25 of 64), m2 100 → 100, m3 68 → 68.
    assert explanation.scores[BA] == {"m1": 75, "m2": 75, "m3": 75}
    assert explanation.selected in ("m2", "m3")


def test_the_second_pod_on_three_machines_also_goes_to_machine_2_under_kubernetes_1_33():
    s = scheduler(THREE_MACHINES, v133(profile(score=[("NodeResourcesFit", 1), (BA, 1)])))
    assert place(s, pod("p1", cpu=2, memory="10Gi", scheduler_name="test")) == {"p1": "m2"}
    explanation = s.explain(pod("p2", cpu=5, memory="5Gi", scheduler_name="test"))
    assert explanation.scores["NodeResourcesFit"] == {"m1": 45, "m2": 35, "m3": 45}  # 45.3, 35.9, 45.3
    assert explanation.scores[BA] == {"m1": 68, "m2": 93, "m3": 68}
    assert explanation.selected == "m2"


def rtcr(shape, resources=None):
    resources = resources or [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]
    return profile(
        score=[("NodeResourcesFit", 1)],
        config={
            "NodeResourcesFit": {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "resources": resources,
                    "requestedToCapacityRatio": {"shape": [{"utilization": u, "score": v} for u, v in shape]},
                }
            }
        },
    )


def test_requested_to_capacity_ratio_scores_the_worked_example_38():
    s = scheduler([node("n", cpu=4, memory=10000)], rtcr([(0, 10), (100, 0)]))
    # cpu 75 % → 25, memory 50 % → 50; (25 + 50) / 2 = 37.5 rounds half away from zero to 38.
    assert scores_of(s, pod("p", cpu=3, memory=5000, scheduler_name="test"), "NodeResourcesFit") == {"n": 38}


def test_balanced_allocation_scores_the_worked_example_87_under_kubernetes_1_33():
    s = scheduler([node("n", cpu=4, memory=10000)], v133(BALANCED))
    assert scores_of(s, pod("p", cpu=3, memory=5000, scheduler_name="test"), BA) == {"n": 87}


def test_balanced_allocation_scores_the_change_of_the_worked_example_as_68():
    s = scheduler([node("n", cpu=4, memory=10000)])
    # An empty node is balanced (100); with the pod 87: 50 + (50 + 87 − 100) / 2 = 50 + 37 / 2 = 68.
    assert scores_of(s, pod("p", cpu=3, memory=5000), BA) == {"n": 68}


@pytest.mark.parametrize(
    ("case", "points", "utilization", "expected"),
    [
        ("a falling segment truncates toward zero at 50", [(0, 2), (40, 10), (100, 0)], 50, 9),
        ("a falling segment truncates toward zero at 70", [(0, 2), (40, 10), (100, 0)], 70, 5),
        ("the first point holds at and below its utilization", [(10, 3), (100, 9)], 5, 3),
        ("past the last point the last score holds", [(0, 0), (80, 10)], 95, 10),
        ("a rising segment floors", [(0, 0), (100, 10)], 55, 5),
    ],
)
def test_the_shape_function_is_kubernetes_broken_linear_function(case, points, utilization, expected):
    u, s = zip(*points, strict=True)
    assert broken_linear(list(u), list(s), np.array([utilization]))[0] == expected


def test_resources_scoring_zero_drop_out_of_the_weight_sum():
    # memory at 0 % scores 0 on a rising shape and leaves the mean: cpu 50 % → 50, not (50 + 0) / 2.
    s = scheduler([node("n", cpu=4, memory="8Gi")], rtcr([(0, 0), (100, 10)]))
    assert scores_of(s, pod("p", cpu=2, memory=0, scheduler_name="test"), "NodeResourcesFit") == {"n": 50}


def test_rounding_is_half_away_from_zero_not_bankers():
    # cpu 20 % → 20 and memory 25 % → 25: (20 + 25) / 2 = 22.5 → 23 (banker's rounding would give 22).
    s = scheduler([node("n", cpu=100, memory=1000)], rtcr([(0, 0), (100, 10)]))
    assert scores_of(s, pod("p", cpu=20, memory=250, scheduler_name="test"), "NodeResourcesFit") == {"n": 23}


BA = "NodeResourcesBalancedAllocation"
LEAST = profile(score=[("NodeResourcesFit", 1)])
BALANCED = profile(score=[("NodeResourcesBalancedAllocation", 1)])


def test_a_pod_without_requests_counts_100m_and_200mi_for_least_allocated():
    s = scheduler([node("n", cpu=1, memory=GI)], LEAST)
    # cpu (1000 - 100)·100/1000 = 90; memory (1024 - 200)·100/1024 = 80.47 → 80; (90 + 80) / 2 = 85.
    assert scores_of(s, pod("p", scheduler_name="test", containers=[{}]), "NodeResourcesFit") == {"n": 85}


def test_a_pod_with_no_containers_adds_nothing_for_least_allocated_as_upstream():
    s = scheduler([node("n", cpu=1, memory=GI)], LEAST)
    assert scores_of(s, pod("p", scheduler_name="test"), "NodeResourcesFit") == {"n": 100}


@pytest.mark.parametrize(
    ("case", "version", "expected"),
    [
        ("kube-scheduler 1.36 skips a pod that requests nothing: no score at all", None, 0),
        ("kube-scheduler 1.34 skips it too", "1.34", 0),
        ("kube-scheduler 1.33 scores the empty node's balance, 100", "1.33", 100),
    ],
)
def test_a_pod_without_requests_is_skipped_by_balanced_allocation_from_1_34(case, version, expected):
    document = BALANCED if version is None else {**BALANCED, "kubernetesVersion": version}
    s = scheduler([node("n", cpu=1, memory=GI)], document)
    assert scores_of(s, pod("p", scheduler_name="test", containers=[{}]), BA) == {"n": expected}


def test_pods_already_on_a_node_without_requests_count_the_defaults_for_scoring_but_not_for_fit():
    busy = node("n", cpu=1, memory=GI, pod_requests=[pod(f"e{i}", containers=[{}]) for i in range(9)])
    s = scheduler([busy], LEAST)
    # Nine request-less pods count 900m for scoring, so a 100m pod leaves 0 % free cpu ...
    explanation = s.explain(pod("p", cpu="100m", memory="1Mi", scheduler_name="test"))
    cpu_score = (1000 - 1000) * 100 // 1000
    memory_score = 0  # 9 × 200Mi + 1Mi > 1Gi
    assert explanation.scores["NodeResourcesFit"] == {"n": (cpu_score + memory_score) // 2}
    # ... yet the Fit filter uses actual requests (zero), so a full-size pod still fits.
    assert s.explain(pod("q", cpu=1, memory=GI, scheduler_name="test")).feasible == ["n"]


def test_a_resource_with_zero_allocatable_is_skipped():
    config = {
        "NodeResourcesFit": {
            "scoringStrategy": {
                "type": "LeastAllocated",
                "resources": [
                    {"name": "cpu", "weight": 1},
                    {"name": "memory", "weight": 1},
                    {"name": "ephemeral-storage", "weight": 5},
                ],
            }
        }
    }
    s = scheduler([node("n", cpu=4, memory="8Gi")], profile(score=[("NodeResourcesFit", 1)], config=config))
    # ephemeral-storage has no allocatable here, so only cpu (50) and memory (50) count.
    assert scores_of(s, pod("p", cpu=2, memory="4Gi", scheduler_name="test"), "NodeResourcesFit") == {"n": 50}


def test_an_extended_resource_the_pod_does_not_request_is_skipped():
    config = {
        "NodeResourcesFit": {
            "scoringStrategy": {
                "type": "MostAllocated",
                "resources": [
                    {"name": "cpu", "weight": 1},
                    {"name": "memory", "weight": 1},
                    {"name": "nvidia.com/gpu", "weight": 3},
                ],
            }
        }
    }
    gpu_node = node("g", cpu=4, memory="8Gi", extra={"nvidia.com/gpu": 4})
    s = scheduler([gpu_node], profile(score=[("NodeResourcesFit", 1)], config=config))
    assert scores_of(s, pod("p", cpu=2, memory="4Gi", scheduler_name="test"), "NodeResourcesFit") == {"g": 50}
    with_gpu = pod("q", cpu=2, memory="4Gi", scheduler_name="test", requests={"nvidia.com/gpu": 4})
    # (50·1 + 50·1 + 100·3) / 5 = 80
    assert scores_of(s, with_gpu, "NodeResourcesFit") == {"g": 80}


@pytest.mark.parametrize(
    ("case", "free_node", "incoming", "reasons"),
    [
        (
            "a pod that fits exactly is feasible",
            node("n", cpu=2, memory="1Gi"),
            pod("p", cpu=2, memory="1Gi"),
            None,
        ),
        (
            "too little cpu is reported by name",
            node("n", cpu=1, memory="1Gi"),
            pod("p", cpu=2),
            ["Insufficient cpu"],
        ),
        (
            "every short resource is listed in upstream order",
            node("n", cpu=1, memory="1Gi"),
            pod("p", cpu=2, memory="2Gi"),
            ["Insufficient cpu", "Insufficient memory"],
        ),
        (
            "a full node says too many pods",
            node("n", pods=1, pod_requests=[pod("x")]),
            pod("p"),
            ["Too many pods"],
        ),
        (
            "an extended resource the node lacks is insufficient",
            node("n"),
            pod("p", requests={"nvidia.com/gpu": 1}),
            ["Insufficient nvidia.com/gpu"],
        ),
    ],
)
def test_the_fit_filter_reports_what_is_short(case, free_node, incoming, reasons):
    explanation = scheduler([free_node]).explain(incoming)
    if reasons is None:
        assert explanation.feasible == ["n"]
    else:
        assert explanation.filtered == {"n": reasons}
        assert explanation.selected is None


def strategy_profile(kind, cpu_weight, memory_weight):
    resources = [{"name": "cpu", "weight": cpu_weight}, {"name": "memory", "weight": memory_weight}]
    return profile(
        score=[("NodeResourcesFit", 1), ("NodeResourcesBalancedAllocation", 1)],
        config={"NodeResourcesFit": {"scoringStrategy": {"type": kind, "resources": resources}}},
    )


def general_paths_only(s):
    """The same scheduler with the cpu-and-memory shortcuts of Fit and BalancedAllocation turned off."""
    for p in (s.profiles.get(name) for name in s.profiles.names()):
        assert p is not None
        if (fit := p.plugin("NodeResourcesFit")) is not None:
            fit.cpu_memory_weights = None
        if (balanced := p.plugin("NodeResourcesBalancedAllocation")) is not None:
            balanced.cpu_memory = False


_quantity = st.integers(min_value=0, max_value=2**40)
_node_shape = st.tuples(
    st.integers(min_value=0, max_value=512_000),  # cpu, millicores (0: the shortcut must step aside)
    st.integers(min_value=0, max_value=2**40),  # memory, bytes
    st.lists(st.tuples(st.integers(0, 64_000) | st.none(), _quantity | st.none()), max_size=4),
)


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["LeastAllocated", "MostAllocated"]),
    weights=st.tuples(st.integers(1, 100), st.integers(1, 100)),
    shapes=st.lists(_node_shape, min_size=1, max_size=8),
    incoming=st.tuples(st.integers(0, 64_000) | st.none(), _quantity | st.none()),
)
def test_the_cpu_and_memory_shortcuts_score_exactly_as_the_general_paths(kind, weights, shapes, incoming):
    nodes = [
        node(
            f"n{i}",
            cpu=f"{cpu}m",
            memory=memory,
            pod_requests=[
                pod(f"on{i}-{j}", cpu=None if c is None else f"{c}m", memory=m)
                for j, (c, m) in enumerate(pods)
            ],
        )
        for i, (cpu, memory, pods) in enumerate(shapes)
    ]
    cpu, memory = incoming
    p = pod("p", cpu=None if cpu is None else f"{cpu}m", memory=memory, scheduler_name="test")
    fast = scheduler(nodes, strategy_profile(kind, *weights))
    general = scheduler(nodes, strategy_profile(kind, *weights))
    general_paths_only(general)
    assert fast.explain(p).to_json() == general.explain(p).to_json()
