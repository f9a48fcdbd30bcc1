"""The asyncio Kubernetes client against a real API server: list and watch in order, a relist when the
server no longer has the watched version, bindings and their refusals, and what a scheduler writes about
a pod it could not place."""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streams.kube.api import EVENTS, NODES, PODS, Backoff, KubeApi, Listed
from tests.kube.objects import RUN, Proxy, Pump, create, delete, get, node, patch, pod, selector, until

pytestmark = pytest.mark.kube


@pytest.fixture
async def api(kube_config: str) -> AsyncIterator[KubeApi]:
    async with KubeApi.from_kubeconfig(kube_config, seed=5) as client:
        yield client


async def test_a_watch_sees_a_node_created_cordoned_and_deleted_in_order(api):
    pump = Pump(api.list_and_watch(NODES, label_selector=selector("order-nodes"), watch_timeout_s=30))
    try:
        listed = await pump.next()
        assert isinstance(listed, Listed) and listed.items == [] and listed.resource_version
        created = await create(api, node("order-nodes", "n"))
        name = created["metadata"]["name"]
        await patch(api, f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}})
        await delete(api, created)
        events = await pump.events_until(lambda event: event.type == "DELETED")
    finally:
        await pump.close()
    assert [event.type for event in events] == ["ADDED", "MODIFIED", "DELETED"], events
    assert {event.object["metadata"]["name"] for event in events} == {name}
    assert events[1].object["spec"].get("unschedulable") is True
    versions = [int(event.resource_version) for event in events]
    assert versions == sorted(versions) and versions[0] > int(listed.resource_version)


async def test_a_watch_sees_a_pod_created_and_deleted_and_a_list_sees_what_exists(api):
    test = "order-pods"
    kept = await create(api, pod(test, "kept"))
    pump = Pump(api.list_and_watch(PODS, label_selector=selector(test), watch_timeout_s=30))
    try:
        listed = await pump.next()
        assert isinstance(listed, Listed)
        assert [(item["kind"], item["apiVersion"], item["metadata"]["uid"]) for item in listed.items] == [
            ("Pod", "v1", kept["metadata"]["uid"])
        ]
        created = await create(api, pod(test, "p"))
        await delete(api, created)
        events = await pump.events_until(lambda event: event.type == "DELETED")
    finally:
        await pump.close()
        await delete(api, kept)
    assert events[0].type == "ADDED" and events[-1].type == "DELETED", events
    # A deletion without grace may show the deletionTimestamp in a MODIFIED event before it is gone.
    assert {event.type for event in events[1:-1]} <= {"MODIFIED"}, events
    assert {event.object["metadata"]["uid"] for event in events} == {created["metadata"]["uid"]}


def _etcd_compact(kube_config: str) -> None:
    """Compact the local control plane's etcd up to its current revision (its v3 JSON gateway)."""
    state_file = Path(kube_config).parent / "state.json"
    if not state_file.is_file():
        pytest.skip("compacting etcd needs the local control plane (KUBECONFIG names another cluster)")
    port = json.loads(state_file.read_text())["etcd_client_port"]

    def call(method: str, body: dict[str, object]) -> dict[str, object]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v3/kv/{method}", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            answer: dict[str, object] = json.loads(reply.read())
            return answer

    header = call("range", {"key": "AA==", "limit": 1})["header"]
    call("compaction", {"revision": header["revision"]})  # type: ignore[index]


async def test_a_watch_from_a_compacted_resource_version_gets_410_and_lists_again(api, kube_config):
    """Events are served from etcd, not the API server's watch cache (which answers old versions of
    Nodes and Pods from memory), so after a compaction a watch from version 1 gets etcd's 410."""
    event = await api.create_event(
        namespace="default", name=f"{RUN}-compacted", uid="u-compacted", reason="Scheduled", message="m"
    )
    _etcd_compact(kube_config)
    pump = Pump(
        api.list_and_watch(
            EVENTS,
            resource_version="1",
            field_selector=f"metadata.name={event['metadata']['name']}",
            watch_timeout_s=30,
        )
    )
    try:
        relisted = await pump.next()
    finally:
        await pump.close()
    assert isinstance(relisted, Listed), relisted
    assert [item["metadata"]["name"] for item in relisted.items] == [event["metadata"]["name"]]
    assert api.counters["relists"] == 1 and api.counters["lists"] == 1, api.counters
    assert api.counters["reconnects"] == 0, api.counters


async def test_bind_sets_the_node_then_a_second_bind_is_a_conflict_and_a_deleted_pod_is_gone(api):
    created = await create(api, pod("bind", "b"))
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    try:
        first = await api.bind("default", name, uid, f"{RUN}-node-a")
        assert first.status == "bound", first
        fetched = await get(api, f"/api/v1/namespaces/default/pods/{name}")
        assert fetched["spec"]["nodeName"] == f"{RUN}-node-a"
        second = await api.bind("default", name, uid, f"{RUN}-node-b")
        assert (second.status, second.reason) == ("conflict", "Conflict"), second
        assert "already assigned" in second.message, second
    finally:
        await delete(api, created)
    gone = await api.bind("default", name, uid, f"{RUN}-node-a")
    assert (gone.status, gone.reason) == ("gone", "NotFound"), gone


async def test_bind_of_a_pod_recreated_under_the_same_name_is_gone(api):
    first = await create(api, pod("bind", "again"))
    await delete(api, first)
    second = await create(api, pod("bind", "again"))
    try:
        outcome = await api.bind("default", first["metadata"]["name"], first["metadata"]["uid"], "n")
        assert outcome.status == "gone" and "Precondition failed: UID" in outcome.message, outcome
        fetched = await get(api, f"/api/v1/namespaces/default/pods/{second['metadata']['name']}")
        assert not fetched["spec"].get("nodeName")
    finally:
        await delete(api, second)


async def test_failed_scheduling_is_an_event_and_a_pod_scheduled_false_condition_on_the_pod(api):
    created = await create(api, pod("failed", "f"))
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    message = "0/3 nodes are available: 3 Insufficient cpu."
    try:
        event = await api.create_event(
            namespace="default", name=name, uid=uid, reason="FailedScheduling", message=message
        )
        assert event["reportingController"] == "eyrie" and event["type"] == "Warning"
        assert await api.set_pod_condition("default", name, uid=uid, message=message)
        # What `kubectl describe pod` reads: core/v1 events about the pod.
        events = await get(api, f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.uid={uid}")
        assert [(e["reason"], e["type"], e["message"], e["reportingComponent"]) for e in events["items"]] == [
            ("FailedScheduling", "Warning", message, "eyrie")
        ]
        fetched = await get(api, f"/api/v1/namespaces/default/pods/{name}")
        conditions = {c["type"]: c for c in fetched["status"]["conditions"]}
        scheduled = conditions["PodScheduled"]
        assert (scheduled["status"], scheduled["reason"], scheduled["message"]) == (
            "False",
            "Unschedulable",
            message,
        )
        assert not await api.set_pod_condition("default", name, uid="another-uid", message=message)
    finally:
        await delete(api, created)
    assert not await api.set_pod_condition("default", name, uid=uid, message=message)


async def test_a_scheduled_event_names_the_node_as_the_related_object(api):
    created = await create(api, pod("scheduled", "s"))
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    try:
        event = await api.create_event(
            namespace="default",
            name=name,
            uid=uid,
            reason="Scheduled",
            message=f"Successfully assigned default/{name} to n1",
            node="n1",
        )
        assert event["type"] == "Normal" and event["related"]["name"] == "n1"
        assert event["regarding"] == {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": "default",
            "name": name,
            "uid": uid,
        }
    finally:
        await delete(api, created)


async def test_a_cut_connection_is_resumed_from_the_last_version_after_a_backoff_without_a_relist(api):
    test = "reconnect"
    server = urllib.parse.urlsplit(api.config.server)
    proxy = Proxy(server.hostname or "127.0.0.1", server.port or 443)
    await proxy.start()
    behind = dataclasses.replace(api.config, server=f"https://127.0.0.1:{proxy.port}")
    backoff = Backoff(initial=0.05, cap=0.2, seed=3)
    created: list[dict[str, object]] = []
    async with KubeApi(behind, backoff=backoff) as relayed:
        pump = Pump(relayed.list_and_watch(NODES, label_selector=selector(test), watch_timeout_s=30))
        try:
            assert isinstance(await pump.next(), Listed)
            proxy.refusing = True
            proxy.cut()
            await until(lambda: relayed.counters["reconnects"] >= 3, what="three refused reconnections")
            created.append(await create(api, node(test, "while-cut")))
            proxy.refusing = False
            events = await pump.events_until(lambda event: event.type == "ADDED")
        finally:
            await pump.close()
            await proxy.close()
            for obj in created:
                await delete(api, obj)
    assert [event.object["metadata"]["name"] for event in events] == [created[0]["metadata"]["name"]]
    counters = relayed.counters
    assert counters["lists"] == 1 and counters["relists"] == 0 and counters["watches"] >= 2, counters
