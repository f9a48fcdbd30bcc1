"""The bridge against a real API server: pods owned by a ReplicaSet and selected by Services are published
with the default selector kube-scheduler derives from those objects (``default_spread_selector``), whether
the objects were there when the bridge listed them or came through its watch. No controller-manager runs, so
the tests create the pods themselves, with the ownerReference a ReplicaSet would give them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from schemas.pod import LabelSelector, PodRequest
from streams.kube.api import KubeApi
from streams.kube.bridge import Bridge
from streams.kube.translate import KubeRecord, Occupant
from tests.kube.objects import RUN, WAIT_S, create, delete, node, pod, selector, until

pytestmark = pytest.mark.kube

# ------------------------------------------------------------------------------------------- builders

Requirement = tuple[str, str, tuple[str, ...]]


@pytest.fixture
async def api(kube_config: str) -> AsyncIterator[KubeApi]:
    async with KubeApi.from_kubeconfig(kube_config, seed=13) as client:
        yield client


async def post(api: KubeApi, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    status, body = await api.request("POST", path, body=obj)
    assert status == 201, body
    created: dict[str, Any] = orjson.loads(body)
    return created


async def remove(api: KubeApi, path: str) -> None:
    status, body = await api.request("DELETE", path, params={"gracePeriodSeconds": "0"})
    assert status in (200, 202, 404), body


def service(name: str, chosen: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": chosen, "ports": [{"port": 80}]},
    }


def replica_set(name: str, labels: dict[str, str]) -> dict[str, Any]:
    container = {"name": "main", "image": "registry.invalid/pause:1"}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def owned_pod(
    test: str, name: str, labels: dict[str, str], owner: dict[str, Any] | None, **fields: Any
) -> dict[str, Any]:
    obj = pod(test, name, **fields)
    obj["metadata"]["labels"].update(labels)
    if owner is not None:
        obj["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    return obj


def requirements(found: LabelSelector | None) -> set[Requirement] | None:
    """What a selector requires, ``key = v`` and ``key In [v]`` alike."""
    if found is None:
        return None
    result: set[Requirement] = {(k, "=", (v,)) for k, v in found.match_labels.items()}
    for e in found.match_expressions:
        operator = "=" if e.operator == "In" and len(e.values) == 1 else e.operator
        result.add((e.key, operator, tuple(sorted(e.values))))
    return result


class Published:
    def __init__(self) -> None:
        self.records: list[KubeRecord] = []

    async def __call__(self, record: KubeRecord) -> None:
        self.records.append(record)

    def pod_of(self, uid: str) -> PodRequest | None:
        for record in reversed(self.records):
            if isinstance(record, Occupant) and record.uid == uid:
                return record.pod
            if isinstance(record, PodRequest) and record.uid == uid:
                return record
        return None


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


# ------------------------------------------------------------------------------------------------ tests


async def test_pods_carry_the_selectors_of_their_replicaset_and_services(api: KubeApi) -> None:
    test = "bridge-defaults"
    app = f"{RUN}-web"
    rs_path = "/apis/apps/v1/namespaces/default/replicasets"
    svc_path = "/api/v1/namespaces/default/services"
    created_node = await create(api, node(test, "defaults-n"))
    node_name = created_node["metadata"]["name"]
    rs = await post(api, rs_path, replica_set(f"{RUN}-web", {"app": app, "tier": "front"}))
    await post(api, svc_path, service(f"{RUN}-web", {"app": app}))
    pods: list[dict[str, Any]] = []
    late_service = f"{RUN}-late"
    published = Published()
    bridge = Bridge(api, published, label_selector=selector(test), watch_timeout_s=30)
    try:
        async with running(bridge):
            labels = {"app": app, "tier": "front"}
            pending = await create(api, owned_pod(test, "defaults-pending", labels, rs))
            bound = await create(api, owned_pod(test, "defaults-bound", labels, rs, node_name=node_name))
            bare = await create(api, owned_pod(test, "defaults-bare", {"app": f"{RUN}-alone"}, None))
            pods += [pending, bound, bare]
            # A Service created after the bridge listed: it reaches the bridge through the watch.
            await post(api, svc_path, service(late_service, {"app": f"{RUN}-alone", "late": "yes"}))
            await post(api, svc_path, service(f"{late_service}-2", {"app": f"{RUN}-alone"}))
            await until(
                lambda: len(bridge.workloads.services.get("default", {})) >= 3, what="the late services"
            )
            after = await create(api, owned_pod(test, "defaults-after", {"app": f"{RUN}-alone"}, None))
            pods.append(after)
            uids = [p["metadata"]["uid"] for p in pods]
            await until(lambda: all(published.pod_of(u) is not None for u in uids), what=f"records of {uids}")
    finally:
        for obj in pods:
            await delete(api, obj)
        await delete(api, created_node)
        await remove(api, f"{rs_path}/{RUN}-web")
        for name in (f"{RUN}-web", late_service, f"{late_service}-2"):
            await remove(api, f"{svc_path}/{name}")
    expected = {("app", "=", (app,)), ("tier", "=", ("front",))}
    first = published.pod_of(pending["metadata"]["uid"])
    assert isinstance(first, PodRequest) and requirements(first.default_spread_selector) == expected
    occupant = next(
        r for r in published.records if isinstance(r, Occupant) and r.uid == bound["metadata"]["uid"]
    )
    assert requirements(occupant.pod.default_spread_selector) == expected
    alone = published.pod_of(bare["metadata"]["uid"])
    assert alone is not None and alone.default_spread_selector is None
    late = published.pod_of(after["metadata"]["uid"])
    # Only the Service whose whole selector the pod matches selects it.
    assert late is not None and requirements(late.default_spread_selector) == {
        ("app", "=", (f"{RUN}-alone",))
    }
