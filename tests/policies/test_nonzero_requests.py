"""The cpu and memory a pod counts for on a node in kube-scheduler's cache (PodInfo.CalculateResource in
pkg/scheduler/framework/types.go, v1.36): the non-zero defaults (100m, 200 MiB) for each container's missing
request, sidecars and init containers combined as for the requests, pod-level requests, overhead."""

from __future__ import annotations

from typing import Any

import pytest

from policies.snapshot import Snapshot, nonzero_requests
from tests.policies.builders import pod

MI = 2**20
DEFAULT_MEMORY = 200 * MI


def c(name: str, cpu: str | None = None, memory: str | None = None, **fields: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": name, "requests": requests, **fields}


CASES = [
    ("A container with no requests counts both defaults.", {"containers": [c("m")]}, (100, DEFAULT_MEMORY)),
    (
        "An explicit zero stays zero; only the missing memory takes its default.",
        {"containers": [c("m", cpu="0")]},
        (0, DEFAULT_MEMORY),
    ),
    (
        "Each app container takes the defaults it lacks, and they add up.",
        {"containers": [c("a", cpu="500m"), c("b", memory="1Gi")]},
        (600, DEFAULT_MEMORY + 1024 * MI),
    ),
    (
        "A sidecar without requests adds the defaults to the app containers.",
        {
            "containers": [c("m", cpu="500m", memory="256Mi")],
            "init_containers": [c("s", restart_policy="Always")],
        },
        (600, 256 * MI + DEFAULT_MEMORY),
    ),
    (
        "A plain init container without requests counts the defaults plus the sidecars started before it.",
        {
            "containers": [c("m", cpu="50m", memory="64Mi")],
            "init_containers": [c("s", cpu="100m", memory="100Mi", restart_policy="Always"), c("i")],
        },
        (200, 100 * MI + DEFAULT_MEMORY),
    ),
    (
        "Pod-level cpu and memory replace the containers' figures.",
        {"containers": [c("m")], "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
        (2000, 1024 * MI),
    ),
    (
        "With pod-level cpu only, memory missing everywhere takes the default per container.",
        {"containers": [c("a"), c("b")], "resources": {"requests": {"cpu": "1"}}},
        (1000, 2 * DEFAULT_MEMORY),
    ),
    (
        "With pod-level requests, memory requested by one container gives the others no default.",
        {"containers": [c("a"), c("b", memory="100Mi")], "resources": {"requests": {"cpu": "1"}}},
        (1000, 100 * MI),
    ),
    (
        "Overhead adds to the defaults.",
        {"containers": [c("m")], "overhead": {"cpu": "250m", "memory": "128Mi"}},
        (350, DEFAULT_MEMORY + 128 * MI),
    ),
    ("A request with no containers counts nothing.", {}, (0, 0)),
]


@pytest.mark.parametrize(
    ("fields", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_nonzero_requests_count_as_kube_scheduler_counts_them(
    fields: dict[str, Any], expected: tuple[int, int]
) -> None:
    assert nonzero_requests(pod("p", **fields)) == expected


# The pod's own share as the Fit scorers count it (calculatePodResourceRequest in
# noderesources/resource_allocation.go, v1.36): every container's missing cpu or memory takes the default, and
# pod-level requests are ignored: NodeResourcesFit builds its scorer without the PodLevelResources feature
# (fit.go's nodeResourceStrategyTypeMap), so SkipPodLevelResources holds, as kube-scheduler v1.36.3's own
# score logs show (bench.kube_parity --kube-scores). The first eight are upstream's
# TestResourceAllocationScorerCalculateRequests (names verbatim).
SCORING_CASES = [
    ("overhead only", {"overhead": {"cpu": "1", "memory": "1Mi"}}, (1000, MI)),
    ("1x requestless container", {"containers": [c("a")]}, (100, DEFAULT_MEMORY)),
    ("2x requestless container", {"containers": [c("a"), c("b")]}, (200, 2 * DEFAULT_MEMORY)),
    (
        "request container + requestless container",
        {"containers": [c("a", cpu="1", memory="1Mi"), c("b")]},
        (1100, MI + DEFAULT_MEMORY),
    ),
    (
        "container + requestless container + overhead",
        {"containers": [c("a", cpu="1", memory="1Mi"), c("b")], "overhead": {"cpu": "1", "memory": "1Mi"}},
        (2100, 2 * MI + DEFAULT_MEMORY),
    ),
    (
        "init container + container + requestless container + overhead",
        {
            "containers": [c("a", cpu="1", memory="1Mi"), c("b")],
            "init_containers": [c("i", cpu="3")],
            "overhead": {"cpu": "1", "memory": "1Mi"},
        },
        (4000, 2 * MI + DEFAULT_MEMORY),
    ),
    (
        "requestless init container + small init container + small container ",
        {
            "containers": [c("a", cpu="3m", memory="3")],
            "init_containers": [c("i"), c("j", cpu="1m", memory="1")],
        },
        (100, DEFAULT_MEMORY),
    ),
    (
        "requestless init container + small init container + small container + requestless container ",
        {
            "containers": [c("a", cpu="3m", memory="3"), c("b")],
            "init_containers": [c("i"), c("j", cpu="1m", memory="1")],
        },
        (103, 3 + DEFAULT_MEMORY),
    ),
    (
        "With pod-level cpu only, a container without memory still takes its default though another requests "
        "memory (on the node it would not), and the pod-level cpu is ignored.",
        {"containers": [c("a"), c("b", memory="100Mi")], "resources": {"requests": {"cpu": "1"}}},
        (200, 100 * MI + DEFAULT_MEMORY),
    ),
    (
        "Pod-level cpu and memory are ignored: the containers' defaulted sums count.",
        {
            "containers": [c("a"), c("b", memory="100Mi")],
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
        },
        (200, 100 * MI + DEFAULT_MEMORY),
    ),
    (
        "Pod-level requests are ignored and the containers' own requests count, overhead added.",
        {
            "containers": [c("a", cpu="300m"), c("b")],
            "resources": {"requests": {"cpu": "2", "memory": "1Gi"}},
            "overhead": {"cpu": "250m"},
        },
        (650, 2 * DEFAULT_MEMORY),
    ),
    (
        "Pod-level hugepages alone leave cpu and memory to the per-container defaults.",
        {"containers": [c("a", cpu="200m"), c("b")], "resources": {"requests": {"hugepages-2Mi": "4Mi"}}},
        (300, 2 * DEFAULT_MEMORY),
    ),
]


@pytest.mark.parametrize(
    ("fields", "expected"), [case[1:] for case in SCORING_CASES], ids=[case[0] for case in SCORING_CASES]
)
def test_scoring_requests_give_every_container_its_missing_defaults(
    fields: dict[str, Any], expected: tuple[int, int]
) -> None:
    assert nonzero_requests(pod("p", **fields), scoring=True) == expected


def test_the_snapshot_scores_a_pod_by_its_own_share_and_books_the_node_share() -> None:
    snapshot = Snapshot()
    fields = {"containers": [c("a"), c("b", memory="100Mi")], "resources": {"requests": {"cpu": "1"}}}
    info = snapshot.pod_info(pod("p", **fields))
    assert (info.nonzero_cpu, info.nonzero_memory) == (1000, 100 * MI)
    assert (info.score_cpu, info.score_memory) == (200, 100 * MI + DEFAULT_MEMORY)
