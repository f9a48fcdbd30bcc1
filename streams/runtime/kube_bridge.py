"""``eyrie kube bridge``: a Kubernetes cluster's Nodes and Pods into eyrie's topics, through `EyrieClient`.

`streams.kube.bridge.Bridge` decides what to publish; this module publishes it and runs the process:

- ``NodeEvent`` → node-events (key: node name); ``PodRequest`` and ``PodDeleted`` → pod-requests (key:
  uid); an ``Occupant`` (a pod bound to a node, by eyrie or anyone else) → a `PodBound` on pod-requests
  (key: uid);
- a ``Rejected`` object → a dead letter whose reason names the field, and, for a pod, a ``FailedScheduling``
  Warning event on it (what ``kubectl describe pod`` shows); the bridge goes on;
- every record carries the header ``eyrie-source: kube-bridge/<cluster>``. At start the bridge reads
  node-events and pod-requests to their end and takes the last record of each node and pod that carries its
  own header as what it published before (`read_published`, `Bridge.remember`): a restarted bridge
  publishes only what changed while it was down, and releases what was deleted meanwhile.

Records are queued by the producer and flushed every `FLUSH_S`; a record that cannot be delivered ends the
process (exit 2), since the bridge's memory would claim it published: the next bridge reads the topics and
publishes it again. Lifecycle lines, as the worker's and the applier's (`streams.runtime.lifecycle`): one
when ready (what it watches), one when the API server is lost and one when it is back, one when it stops.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from schemas.exceptions import ConfigError, KubeApiError
from schemas.node import NodeEvent
from schemas.pod import PodBound, PodDeleted, PodRequest
from streams.client import EyrieClient
from streams.core.decoders import dead_letter, decode_records
from streams.kube.api import KubeApi, KubeConfig, missing_permissions
from streams.kube.bridge import PERMISSIONS, Bridge
from streams.kube.translate import KubeRecord, Occupant, Rejected
from streams.runtime.lifecycle import PROBE_S, BrokerWatch, Lifecycle
from streams.runtime.logs import flush_repeats
from streams.settings import Settings

__all__ = [
    "FLUSH_S",
    "SOURCE_HEADER",
    "BridgeService",
    "Published",
    "read_published",
    "source_of",
]

SOURCE_HEADER: Final = "eyrie-source"
FLUSH_S: Final = 0.2
"""How often queued records are flushed: a delivery failure surfaces within this, plus Kafka's timeout."""
_PROBE_TIMEOUT_S: Final = 5.0


def source_of(cluster: str) -> bytes:
    """The `SOURCE_HEADER` of every record the bridge of `cluster` publishes."""
    return f"kube-bridge/{cluster}".encode()


# ------------------------------------------------------------------------------------- restart memory


@dataclass(slots=True)
class Published:
    """What earlier bridges of one cluster left on the topics: the last record of each node and pod, when
    it still stands (a deletion removes it). `requested`: pods for which a `PodRequest` was published."""

    nodes: dict[str, NodeEvent] = field(default_factory=dict)
    pods: dict[str, PodRequest | Occupant] = field(default_factory=dict)
    requested: set[str] = field(default_factory=set)
    read: int = 0

    def remember_into(self, bridge: Bridge) -> None:
        for event in self.nodes.values():
            bridge.remember(event)
        for uid, record in self.pods.items():
            bridge.remember(record, requested=uid in self.requested)


async def read_published(client: EyrieClient, cluster: str) -> Published:
    """Read node-events and pod-requests from the beginning to their current end and keep, per key, the
    last record this cluster's bridge published. Records of other publishers (``eyrie publish``, replays,
    another cluster's bridge) are left alone: this bridge must never delete what it did not publish."""
    source = source_of(cluster)
    published = Published()
    async for short, message in client.records(["node-events", "pod-requests"], raw=True):
        if dict(message.headers or ()).get(SOURCE_HEADER) != source:
            continue
        published.read += 1
        for decoded in decode_records(short, message.partition, message.offset, message.key, message.value):
            value = decoded.value
            if isinstance(value, NodeEvent):
                if value.type == "upsert" and value.node.cluster == cluster:
                    published.nodes[value.node.name] = value
                else:
                    published.nodes.pop(value.node.name, None)
            elif isinstance(value, PodRequest):
                published.pods[value.uid] = value
                published.requested.add(value.uid)
            elif isinstance(value, PodBound):
                published.pods[value.uid] = Occupant(value.pod, value.node)
            elif isinstance(value, PodDeleted):
                published.pods.pop(value.uid, None)
                published.requested.discard(value.uid)
    return published


# --------------------------------------------------------------------------------------------- service


class BridgeLifecycle(Lifecycle):
    """The bridge's lifecycle lines: the worker's (``ready``, ``stopped``) with its own ready line, and the
    API server lost and back."""

    def __init__(self, settings: Settings, web_port: int | None, server: str) -> None:
        super().__init__("bridge", settings, web_port)
        self.server = server
        self.api = BrokerWatch()

    def bridge_ready(self, service: BridgeService, published: Published) -> None:
        bridge = service.bridge
        assert bridge is not None
        selector = f" labelled {service.label_selector}" if service.label_selector else ""
        schedulers = ", ".join(f"{name} (profile {service.profiles[name]})" for name in service.schedulers)
        web = f"web port {self.web_port}" if self.web_port is not None else "no web server"
        self.log.info(
            "ready: bridge watches Nodes and Pods%s of %s (%s) as cluster %s for Kafka %s in %.1f s; places "
            "pods of %s; remembered %d nodes and %d pods from the topics; published %d records; %s",
            selector,
            self.server,
            service.where,
            service.cluster,
            self.settings.bootstrap_servers,
            time.monotonic() - self.started,
            schedulers,
            len(published.nodes),
            len(published.pods),
            sum(service.published.values()),
            web,
            extra=self._fields(
                "ready",
                api_server=self.server,
                broker=self.settings.bootstrap_servers,
                topic_prefix=self.settings.topic_prefix,
                cluster=service.cluster,
                label_selector=service.label_selector,
                profiles={name: service.profiles[name] for name in service.schedulers},
                remembered_nodes=len(published.nodes),
                remembered_pods=len(published.pods),
                published=dict(service.published),
                web_port=self.web_port,
            ),
        )

    def rejected(self, record: Rejected, error: str) -> None:
        # An event line, so the repeat filter never folds one object's rejection into another's.
        self.log.warning(
            "rejected: %s",
            error,
            extra=self._fields(
                "rejected",
                kind=record.kind,
                namespace=record.namespace,
                name=record.name,
                uid=record.uid,
                field=record.field,
            ),
        )

    def check_api(self, reachable: bool | None) -> None:
        change = self.api.observe(reachable, time.monotonic())
        if change is None:
            return
        event, seconds = change
        if event == "lost":
            self.log.warning(
                "API server lost: cannot reach %s; watching again once it is back",
                self.server,
                extra=self._fields("api_lost", api_server=self.server),
            )
        else:
            self.log.info(
                "API server back: %s answers again after %.1f s",
                self.server,
                seconds,
                extra=self._fields("api_back", api_server=self.server, lost_s=round(seconds, 1)),
            )


class BridgeService:
    """One bridge process: `run` until cancelled, or until an error it cannot retry (raised)."""

    def __init__(
        self,
        settings: Settings,
        kube: KubeConfig,
        where: str,
        *,
        schedulers: Sequence[str],
        profiles: Mapping[str, str],
        cluster: str,
        label_selector: str | None = None,
        web_port: int | None = None,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.where = where
        """How the API server was found (kubeconfig, local control plane, service account), for the logs."""
        self.schedulers = list(schedulers)
        self.profiles = dict(profiles)
        self.cluster = cluster
        self.label_selector = label_selector
        self.web_port = web_port
        self.lifecycle = BridgeLifecycle(settings, web_port, kube.server)
        self.headers = [(SOURCE_HEADER, source_of(cluster))]
        self.published: Counter[str] = Counter()
        self.bridge: Bridge | None = None
        self.api: KubeApi | None = None
        self.ready = False

    async def run(self) -> None:
        runner = await self._serve_web() if self.web_port is not None else None
        try:
            async with KubeApi(self.kube, instance=f"eyrie-bridge-{self.cluster}") as api:
                self.api = api
                missing = await missing_permissions(api, PERMISSIONS)
                if missing:
                    raise KubeApiError(
                        f"{self.where}: the account may not {', '.join(missing)} on {self.kube.server}, "
                        "which the bridge needs (grant the ClusterRole of deploy/kubernetes/01-rbac.yaml)",
                        status=403,
                        reason="Forbidden",
                    )
                async with EyrieClient(self.settings) as client:
                    published = await read_published(client, self.cluster)
                    self.bridge = Bridge(
                        api,
                        lambda record: self._publish(client, api, record),
                        schedulers=self.schedulers,
                        profiles=self.profiles,
                        cluster=self.cluster,
                        label_selector=self.label_selector,
                    )
                    published.remember_into(self.bridge)
                    async with asyncio.TaskGroup() as group:
                        group.create_task(self.bridge.run(), name="eyrie-bridge")
                        group.create_task(self._announce(published), name="eyrie-bridge-ready")
                        group.create_task(self._flush(client), name="eyrie-bridge-flush")
                        group.create_task(self._probe(api), name="eyrie-bridge-probe")
        except BaseExceptionGroup as group:
            # The first error of the loops is the one to report; the rest are its consequences.
            raise _first(group) from None
        finally:
            if runner is not None:
                await runner.cleanup()

    # ------------------------------------------------------------------------------------ publishing

    async def _publish(self, client: EyrieClient, api: KubeApi, record: KubeRecord) -> None:
        self.published[_kind(record)] += 1
        if isinstance(record, NodeEvent):
            await client.send("node-events", record.node.name, record, headers=self.headers)
        elif isinstance(record, PodRequest | PodDeleted):
            await client.send("pod-requests", record.uid, record, headers=self.headers)
        elif isinstance(record, Occupant):
            bound = PodBound(
                uid=record.uid,
                node=record.node,
                pod=record.pod,
                ts=max(time.time(), 0.0),
                gpu_cards=list(record.gpu_cards),
            )
            await client.send("pod-requests", record.uid, bound, headers=self.headers)
        else:
            await self._reject(client, api, record)

    async def _reject(self, client: EyrieClient, api: KubeApi, record: Rejected) -> None:
        """A dead letter naming the field and, for a pod, a Warning event on it: bad input from the cluster
        is reported where each audience looks, and the bridge goes on."""
        short = "pod-requests" if record.kind == "Pod" else "node-events"
        where = f"{record.namespace}/{record.name}" if record.namespace else record.name
        raw = {"kind": record.kind, "namespace": record.namespace, "name": record.name, "uid": record.uid}
        letter = dead_letter(
            self.settings.topic(short),
            None,
            None,
            (record.uid if record.kind == "Pod" else record.name).encode(),
            orjson.dumps(raw),
            f"{record.kind} {where} (uid {record.uid}): {record.message}",
        )
        await client.send("dead-letters", letter.topic, letter, headers=self.headers)
        self.lifecycle.rejected(record, letter.error)
        if record.kind != "Pod":
            return
        try:
            await api.create_event(
                namespace=record.namespace,
                name=record.name,
                uid=record.uid,
                reason="FailedScheduling",
                message=f"eyrie cannot place this pod: {record.message}",
                event_type="Warning",
            )
        except KubeApiError as exc:
            # Best effort, as kube-scheduler's events: the dead letter holds the same reason.
            self.lifecycle.log.error("cannot write the FailedScheduling event of Pod %s: %s", where, exc)

    # ---------------------------------------------------------------------------------------- loops

    async def _announce(self, published: Published) -> None:
        assert self.bridge is not None
        await self.bridge.pods_synced.wait()
        self.ready = True
        self.lifecycle.bridge_ready(self, published)

    async def _flush(self, client: EyrieClient) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            await client.flush()

    async def _probe(self, api: KubeApi) -> None:
        while True:
            self.lifecycle.check_api(await _answers(api))
            flush_repeats()
            await asyncio.sleep(PROBE_S)

    # ------------------------------------------------------------------------------------ web pages

    async def _serve_web(self) -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        registry = CollectorRegistry()
        registry.register(_Collector(self))
        app["registry"] = registry
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        host, port = self.settings.web_host, self.web_port
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            await runner.cleanup()
            raise ConfigError(f"--web-port: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        return runner

    async def _health(self, request: web.Request) -> web.Response:
        # 503 until the first lists are published; 200 after, "degraded" while the API server is away:
        # a restart would not bring it back.
        reachable = self.lifecycle.api.reachable
        status = "starting" if not self.ready else "ok" if reachable else "degraded"
        body = {
            "status": status,
            "role": "bridge",
            "cluster": self.cluster,
            "api_server": self.kube.server,
            "api_reachable": reachable,
            "published": dict(self.published),
        }
        return web.json_response(body, status=503 if status == "starting" else 200)

    async def _metrics(self, request: web.Request) -> web.Response:
        payload = generate_latest(request.app["registry"])
        return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})


class _Collector(Collector):
    def __init__(self, service: BridgeService) -> None:
        self.service = service

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        records = CounterMetricFamily(
            "eyrie_bridge_records", "Records the bridge published, by kind", labels=["kind"]
        )
        for kind, count in sorted(self.service.published.items()):
            records.add_metric([kind], count)
        yield records
        api = CounterMetricFamily(
            "eyrie_bridge_kube_api",
            "The API client's lists, relists, watches and reconnects",
            labels=["what"],
        )
        for what, count in sorted((self.service.api.counters if self.service.api else {}).items()):
            api.add_metric([what], count)
        yield api
        up = GaugeMetricFamily("eyrie_bridge_api_server_up", "Whether the API server answered the last probe")
        up.add_metric([], 1.0 if self.service.lifecycle.api.reachable else 0.0)
        yield up


def _kind(record: KubeRecord) -> str:
    return "PodBound" if isinstance(record, Occupant) else type(record).__name__


async def _answers(api: KubeApi) -> bool:
    """Whether the API server says it is ready (``/readyz``, which every account may read)."""
    try:
        status, _ = await asyncio.wait_for(api.request("GET", "/readyz"), _PROBE_TIMEOUT_S)
    except (KubeApiError, TimeoutError):
        return False
    return status == 200


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            return _first(error)
        if not isinstance(error, asyncio.CancelledError):
            return error
    return group
