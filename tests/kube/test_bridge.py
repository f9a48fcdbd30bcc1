"""The bridge against a real API server: what it publishes as Nodes and Pods change, and that a relist or a
restarted bridge publishes nothing that would change a decision."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from schemas.node import NodeEvent
from schemas.pod import PodDeleted, PodRequest
from streams.kube.api import NODES, PODS, KubeApi
from streams.kube.bridge import Bridge, record_digest
from streams.kube.translate import KubeRecord, Occupant, Rejected
from tests.kube.objects import WAIT_S, create, delete, node, patch, pod, selector, until

pytestmark = pytest.mark.kube


@pytest.fixture
async def api(kube_config: str) -> AsyncIterator[KubeApi]:
    async with KubeApi.from_kubeconfig(kube_config, seed=11) as client:
        yield client


class Published:
    def __init__(self) -> None:
        self.records: list[KubeRecord] = []

    async def __call__(self, record: KubeRecord) -> None:
        self.records.append(record)

    async def count(self, expected: int) -> None:
        await until(lambda: len(self.records) >= expected, what=f"{expected} records ({self.records})")


def summary(record: KubeRecord) -> tuple[str, ...]:
    if isinstance(record, NodeEvent):
        return ("node", record.type, record.node.name, str(record.node.unschedulable))
    if isinstance(record, Occupant):
        return ("occupant", record.uid, record.node)
    if isinstance(record, Rejected):
        return ("rejected", record.uid, record.field)
    return (type(record).__name__, record.uid)


@contextlib.asynccontextmanager
async def running(bridge: Bridge) -> AsyncIterator[Bridge]:
    task = asyncio.create_task(bridge.run())
    try:
        await asyncio.wait_for(bridge.pods_synced.wait(), WAIT_S)
        yield bridge
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def key(record: KubeRecord) -> str:
    """What the bridge remembers a record by: the node's name, the pod's uid."""
    return record.node.name if isinstance(record, NodeEvent) else record.uid


def uid(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["uid"])


async def test_the_bridge_publishes_requests_occupants_rejections_and_frees_as_the_cluster_changes(api):
    test = "bridge-life"
    published = Published()
    bridge = Bridge(api, published, label_selector=selector(test), watch_timeout_s=30)
    created_node = await create(api, node(test, "n"))
    node_name = created_node["metadata"]["name"]
    objects: list[dict[str, Any]] = []
    try:
        async with running(bridge):
            await published.count(1)
            mine = await create(api, pod(test, "mine"))
            objects.append(mine)
            await published.count(2)
            objects.append(await create(api, pod(test, "theirs-pending", scheduler="default-scheduler")))
            theirs = await create(
                api, pod(test, "theirs", scheduler="default-scheduler", node_name=node_name)
            )
            objects.append(theirs)
            await published.count(3)
            # The API server stores 16Ei as the int64 maximum, beyond what eyrie represents.
            huge = await create(api, pod(test, "huge", requests={"memory": "16Ei"}))
            objects.append(huge)
            await published.count(4)
            assert (
                await api.bind("default", mine["metadata"]["name"], uid(mine), node_name)
            ).status == "bound"
            await published.count(5)
            theirs_path = f"/api/v1/namespaces/default/pods/{theirs['metadata']['name']}/status"
            await patch(api, theirs_path, {"status": {"phase": "Succeeded"}})
            await published.count(6)
            await patch(api, f"/api/v1/nodes/{node_name}", {"spec": {"unschedulable": True}})
            await published.count(7)
            for obj in objects:
                await delete(api, obj)
            await published.count(8)
            await delete(api, created_node)
            await published.count(9)
            await asyncio.sleep(0.5)  # time for anything that should not come
    finally:
        for obj in [*objects, created_node]:
            await delete(api, obj)
    assert [summary(record) for record in published.records] == [
        ("node", "upsert", node_name, "False"),
        ("PodRequest", uid(mine)),
        ("occupant", uid(theirs), node_name),
        ("rejected", uid(huge), "spec.containers[0].resources.requests.memory"),
        ("occupant", uid(mine), node_name),
        ("PodDeleted", uid(theirs)),
        ("node", "upsert", node_name, "True"),
        ("PodDeleted", uid(mine)),
        ("node", "delete", node_name, "False"),
    ]
    rejected = published.records[3]
    assert isinstance(rejected, Rejected) and "exceeds the maximum" in rejected.reason
    occupant = published.records[2]
    assert isinstance(occupant, Occupant) and occupant.requests == {"cpu": 100, "memory": 32 * 2**20}
    request = published.records[1]
    assert isinstance(request, PodRequest) and request.scheduler_name == "eyrie"


async def test_a_relist_and_a_restarted_bridge_publish_nothing_that_changes_a_decision(api):
    test = "bridge-restart"
    labels = selector(test)
    first_published = Published()
    first = Bridge(api, first_published, label_selector=labels, watch_timeout_s=30)
    created_node = await create(api, node(test, "n"))
    node_name = created_node["metadata"]["name"]
    mine = await create(api, pod(test, "mine"))
    bound = await create(api, pod(test, "bound", scheduler="other", node_name=node_name))
    lost = await create(api, pod(test, "lost"))
    try:
        async with running(first):
            await first_published.count(4)
            await asyncio.sleep(0.3)
            before = len(first_published.records)
            # The same lists again, as after a 410: nothing is new.
            await first.nodes_listed(await api.list(NODES, label_selector=labels))
            await first.pods_listed(await api.list(PODS, label_selector=labels))
            assert first_published.records[before:] == []
        last = {key(record): record_digest(record) for record in first_published.records}
        held = [key for key, seen in first.pods.items() if seen.holds]
        assert sorted(held) == sorted([uid(mine), uid(bound), uid(lost)])

        # While no bridge runs, a pod goes away; a relist of the stopped bridge's memory releases it once.
        await delete(api, lost)
        await first.pods_listed(await api.list(PODS, label_selector=labels))
        assert [summary(r) for r in first_published.records[before:]] == [("PodDeleted", uid(lost))]

        # A new process knows only what the pipeline holds: it repeats the rest and releases the lost pod.
        second_published = Published()
        second = Bridge(
            api,
            second_published,
            label_selector=labels,
            watch_timeout_s=30,
            held_pods=held,
            known_nodes=[node_name],
        )
        async with running(second):
            await second_published.count(4)
            await asyncio.sleep(0.3)
    finally:
        for obj in (mine, bound, lost, created_node):
            await delete(api, obj)
    repeats = [r for r in second_published.records if not isinstance(r, PodDeleted)]
    releases = [summary(r) for r in second_published.records if isinstance(r, PodDeleted)]
    assert releases == [("PodDeleted", uid(lost))]
    for record in repeats:
        assert record_digest(record) == last[key(record)], record
    assert sorted(summary(r) for r in repeats) == sorted(
        [
            ("node", "upsert", node_name, "False"),
            ("PodRequest", uid(mine)),
            ("occupant", uid(bound), node_name),
        ]
    )


async def test_a_gated_pod_is_published_with_its_gates_and_again_when_they_are_lifted(api):
    test = "bridge-gates"
    published = Published()
    bridge = Bridge(api, published, label_selector=selector(test), watch_timeout_s=30)
    created_node = await create(api, node(test, "n"))
    gated = pod(test, "gated")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/a"}, {"name": "example.com/b"}]
    mine: dict[str, Any] = {}
    try:
        async with running(bridge):
            await published.count(1)
            mine = await create(api, gated)
            await published.count(2)
            path = f"/api/v1/namespaces/default/pods/{mine['metadata']['name']}"
            # Gates can only be removed; a JSON merge patch replaces the list.
            for remaining in ([{"name": "example.com/b"}], []):
                status, body = await api.request(
                    "PATCH",
                    path,
                    body={"spec": {"schedulingGates": remaining}},
                    content_type="application/merge-patch+json",
                )
                assert status == 200, body
            await published.count(4)
            await asyncio.sleep(0.5)  # time for anything that should not come
    finally:
        for obj in (mine, created_node):
            if obj:
                await delete(api, obj)
    requests = [record for record in published.records if isinstance(record, PodRequest)]
    assert [request.scheduling_gates for request in requests] == [
        ["example.com/a", "example.com/b"],
        ["example.com/b"],
        [],
    ]
    # The pipeline's namespace labels come from the Namespace object (kubernetes.io/metadata.name at least).
    assert requests[-1].namespace_labels.get("kubernetes.io/metadata.name") == "default"
