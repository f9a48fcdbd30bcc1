"""ImageLocality against kube-scheduler v1.36's image_locality_test.go entries and its formula."""

import pytest

from policies.plugins.imagelocality import normalized_image_name
from tests.policies.builders import node, pod, profile, scheduler

IL = "ImageLocality"
MB = 1024 * 1024
# image_locality_test.go's node403002000 and node25010 (sizes in MiB, as upstream's `mb`).
NODE_40_300_2000 = [
    {"names": ["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], "size_bytes": 40 * MB},
    {"names": ["gcr.io/300:latest", "gcr.io/300:v1"], "size_bytes": 300 * MB},
    {"names": ["gcr.io/2000:latest"], "size_bytes": 2000 * MB},
]
NODE_250_10 = [
    {"names": ["gcr.io/250:latest"], "size_bytes": 250 * MB},
    {"names": ["gcr.io/10:latest", "gcr.io/10:v1"], "size_bytes": 10 * MB},
]
ONLY = profile(score=[(IL, 1)])


def two_nodes():
    return [node("node1", images=NODE_40_300_2000), node("node2", images=NODE_250_10)]


def images_pod(*images, init=()):
    return pod(
        "p",
        scheduler_name="test",
        containers=[{"image": i} for i in images],
        init_containers=[{"image": i} for i in init],
    )


@pytest.mark.parametrize(
    ("case", "containers", "init", "expected"),
    [
        # Upstream TestImageLocalityPriority entries (names verbatim).
        (
            "two images spread on two nodes, prefer the larger image one",
            ["gcr.io/40", "gcr.io/250"],
            [],
            {"node1": 0, "node2": 5},
        ),
        (
            "two images on one node, prefer this node",
            ["gcr.io/40", "gcr.io/300"],
            [],
            {"node1": 7, "node2": 0},
        ),
        # An init container's image counts like the others: 300M / 2 spread, over 1000M × 2 containers.
        ("an init container's image counts", ["gcr.io/250"], ["gcr.io/300"], {"node1": 6, "node2": 5}),
        ("a pod without containers scores zero everywhere", [], [], {"node1": 0, "node2": 0}),
    ],
)
def test_image_locality_scores_as_upstream(case, containers, init, expected):
    s = scheduler(two_nodes(), ONLY)
    assert s.explain(images_pod(*containers, init=init)).scores[IL] == expected


def test_an_image_on_every_node_is_not_scaled_down_by_its_spread():
    nodes = [node("a", images=[{"names": ["x:latest"], "size_bytes": 523 * MB}]), node("b")]
    spread = scheduler(nodes, ONLY).explain(images_pod("x")).scores[IL]
    nodes[1] = node("b", images=[{"names": ["x:latest"], "size_bytes": 523 * MB}])
    everywhere = scheduler(nodes, ONLY).explain(images_pod("x")).scores[IL]
    # 523M × 1/2 = 261.5M → 100 · (261.5 − 23) / 977 = 24; on both nodes 100 · 500 / 977 = 51.
    assert spread == {"a": 24, "b": 0}
    assert everywhere == {"a": 51, "b": 51}


def test_images_follow_node_updates_and_removals():
    s = scheduler(two_nodes(), ONLY)
    assert s.explain(images_pod("gcr.io/250")).scores[IL]["node2"] > 0
    s.snapshot.upsert_node(node("node2").spec())
    assert s.explain(images_pod("gcr.io/250")).scores[IL] == {"node1": 0, "node2": 0}


@pytest.mark.parametrize(
    ("case", "name", "normalized"),
    [
        ("a name without a tag gains :latest", "gcr.io/40", "gcr.io/40:latest"),
        ("a tagged name is kept", "gcr.io/40:v1", "gcr.io/40:v1"),
        ("a registry port is not a tag", "host:5000/app", "host:5000/app:latest"),
        ("no registry or library prefix is added", "nginx", "nginx:latest"),
    ],
)
def test_image_names_are_normalised_as_upstream(case, name, normalized):
    assert normalized_image_name(name) == normalized
