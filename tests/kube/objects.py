"""Objects and helpers the tests against a real API server share: names unique to this session, Node and
Pod builders, and a pump that runs a list-and-watch in the background."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from schemas.quantity import parse_quantity
from streams.kube.api import KubeApi, Listed, WatchEvent

# The pid keeps a session pointed at a long-lived cluster (KUBECONFIG) apart from objects an earlier one
# left; the label lets each test watch only its own objects.
RUN = f"eyrie-kube-{os.getpid()}"
RUN_LABEL = "eyrie.test/run"
WAIT_S = 15.0


def selector(test: str) -> str:
    return f"{RUN_LABEL}={RUN}-{test}"


def node(test: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"{RUN}-{name}", "labels": {RUN_LABEL: f"{RUN}-{test}"}},
        "spec": spec,
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        },
    }


def pod(
    test: str,
    name: str,
    *,
    scheduler: str = "eyrie",
    node_name: str | None = None,
    requests: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/pause:1",
                "resources": {"requests": requests or {"cpu": "100m", "memory": "32Mi"}},
            }
        ],
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{RUN}-{name}", "namespace": "default", "labels": {RUN_LABEL: f"{RUN}-{test}"}},
        "spec": spec,
    }


async def create(api: KubeApi, obj: dict[str, Any]) -> dict[str, Any]:
    path = "/api/v1/nodes" if obj["kind"] == "Node" else "/api/v1/namespaces/default/pods"
    status, body = await api.request("POST", path, body=obj)
    assert status == 201, body
    created: dict[str, Any] = orjson.loads(body)
    return created


async def get(api: KubeApi, path: str) -> dict[str, Any]:
    status, body = await api.request("GET", path)
    assert status == 200, body
    found: dict[str, Any] = orjson.loads(body)
    return found


async def delete(api: KubeApi, obj: dict[str, Any]) -> None:
    """Delete now: no kubelet runs to finish a graceful deletion of a bound pod."""
    name = obj["metadata"]["name"]
    path = f"/api/v1/nodes/{name}" if obj["kind"] == "Node" else f"/api/v1/namespaces/default/pods/{name}"
    status, body = await api.request("DELETE", path, params={"gracePeriodSeconds": "0"})
    assert status in (200, 202, 404), body


async def patch(api: KubeApi, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, reply = await api.request(
        "PATCH", path, body=body, content_type="application/strategic-merge-patch+json"
    )
    assert status == 200, reply
    patched: dict[str, Any] = orjson.loads(reply)
    return patched


class Pump:
    """Runs an async iterator in a task and queues what it yields, so a test can wait for items with a
    timeout without cancelling the iterator itself."""

    def __init__(self, iterator: AsyncIterator[Listed | WatchEvent]) -> None:
        self.queue: asyncio.Queue[Listed | WatchEvent] = asyncio.Queue()
        self._iterator = iterator
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for item in self._iterator:
            await self.queue.put(item)

    async def next(self, timeout: float = WAIT_S) -> Listed | WatchEvent:
        getter = asyncio.ensure_future(self.queue.get())
        done, _ = await asyncio.wait(
            {getter, self._task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if getter in done:
            return getter.result()
        getter.cancel()
        if self._task in done:
            self._task.result()  # raises what ended the loop
        raise AssertionError(f"nothing within {timeout} s")

    async def events_until(self, done: Callable[[WatchEvent], bool]) -> list[WatchEvent]:
        seen: list[WatchEvent] = []
        while True:
            item = await self.next()
            assert isinstance(item, WatchEvent), item
            seen.append(item)
            if done(item):
                return seen

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        with contextlib.suppress(RuntimeError):
            await self._iterator.aclose()  # type: ignore[attr-defined]


async def until(condition: Callable[[], bool], timeout: float = WAIT_S, what: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        await asyncio.sleep(0.05)


class Proxy:
    """A TCP relay to the API server (TLS passes through untouched) whose connections a test can cut, and
    which can refuse new ones for a while: a network fault, with the real server behind it."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self.refusing = False
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.close()
            return
        self.accepted += 1
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        self._writers |= {writer, upstream_writer}

        async def relay(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while chunk := await source.read(65536):
                    sink.write(chunk)
                    await sink.drain()
            sink.close()

        await asyncio.gather(relay(reader, upstream_writer), relay(upstream_reader, writer))

    def cut(self) -> None:
        """Close every open connection, both ways."""
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


# ------------------------------------------------------------------------- what the cluster holds
# Judged from the API server's own objects, independently of eyrie's records: what each node's bound pods
# request against its allocatable, and whether a pending pod would fit anywhere.


def requests_of(obj: dict[str, Any]) -> Counter[str]:
    """A pod's requests in base units, as kube-scheduler reserves them: its containers' sum, or its largest
    init container's where that is larger, plus its overhead; one pod slot ("pods")."""
    spec = obj.get("spec") or {}
    total: Counter[str] = Counter()
    for container in spec.get("containers") or []:
        for resource, amount in ((container.get("resources") or {}).get("requests") or {}).items():
            total[resource] += parse_quantity(amount, resource)
    for container in spec.get("initContainers") or []:
        for resource, amount in ((container.get("resources") or {}).get("requests") or {}).items():
            total[resource] = max(total[resource], parse_quantity(amount, resource))
    for resource, amount in (spec.get("overhead") or {}).items():
        total[resource] += parse_quantity(amount, resource)
    total["pods"] = 1
    return total


def allocatable_of(obj: dict[str, Any]) -> dict[str, int]:
    return {
        resource: parse_quantity(amount, resource)
        for resource, amount in ((obj.get("status") or {}).get("allocatable") or {}).items()
    }


def bound_requests(pods: list[dict[str, Any]]) -> dict[str, Counter[str]]:
    """Node name → what the pods bound there request together, whoever bound them."""
    used: dict[str, Counter[str]] = {}
    for obj in pods:
        where = (obj.get("spec") or {}).get("nodeName")
        if where:
            used.setdefault(where, Counter()).update(requests_of(obj))
    return used


def over_allocatable(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Node name → resource → "bound / allocatable" where the pods bound there ask for more than the node has;
    empty when no node is over-committed. A resource the node does not list counts as none of it."""
    used = bound_requests(pods)
    over: dict[str, dict[str, str]] = {}
    for obj in nodes:
        name = obj["metadata"]["name"]
        allocatable = allocatable_of(obj)
        for resource, amount in used.get(name, Counter()).items():
            if amount > allocatable.get(resource, 0):
                over.setdefault(name, {})[resource] = f"{amount} / {allocatable.get(resource, 0)}"
    return over


def _tolerated(taint: dict[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") not in (None, "", taint.get("effect")):
            continue
        if toleration.get("operator") == "Exists" and toleration.get("key") in (None, "", taint.get("key")):
            return True
        if toleration.get("key") == taint.get("key") and toleration.get("value") == taint.get("value"):
            return True
    return False


def would_fit(obj: dict[str, Any], node_obj: dict[str, Any], used: Counter[str]) -> bool:
    """Whether a pending pod would pass kube-scheduler's filters that these tests' pods meet on the node
    with `used` already bound there: node selector, cordon, NoSchedule taints, and resources."""
    spec, node_spec = obj.get("spec") or {}, node_obj.get("spec") or {}
    labels = node_obj["metadata"].get("labels") or {}
    if any(labels.get(key) != value for key, value in (spec.get("nodeSelector") or {}).items()):
        return False
    if node_spec.get("unschedulable"):
        return False
    tolerations = spec.get("tolerations") or []
    for taint in node_spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(taint, tolerations):
            return False
    allocatable = allocatable_of(node_obj)
    return all(
        used[resource] + amount <= allocatable.get(resource, 0)
        for resource, amount in requests_of(obj).items()
    )


def scheduled_false(obj: dict[str, Any]) -> str | None:
    """The message of the pod's PodScheduled=False condition (the explanation of a pending pod), if any."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "")
    return None


async def create_all(api: KubeApi, objs: list[dict[str, Any]], concurrency: int = 16) -> list[dict[str, Any]]:
    """Create many objects, `concurrency` at a time (as a controller would), in their order of creation."""
    gate = asyncio.Semaphore(concurrency)

    async def one(obj: dict[str, Any]) -> dict[str, Any]:
        async with gate:
            return await create(api, obj)

    return list(await asyncio.gather(*(one(obj) for obj in objs)))


async def listed(api: KubeApi, kind: str, label_selector: str) -> list[dict[str, Any]]:
    """Every Node or Pod (`kind`: "nodes" or "pods", in `default`) the selector matches."""
    path = "/api/v1/nodes" if kind == "nodes" else "/api/v1/namespaces/default/pods"
    found = await get(api, f"{path}?labelSelector={label_selector}")
    items: list[dict[str, Any]] = found["items"]
    return items
