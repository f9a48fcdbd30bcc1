"""An asyncio client for the part of the Kubernetes API that eyrie uses, over aiohttp.

It reads a kubeconfig (bearer token, token file or client certificate; the cluster's CA) or the in-cluster
service account, and offers:

- `KubeApi.list_and_watch`: the reflector loop of client-go in miniature. A paginated list, then a watch
  from the list's resourceVersion with bookmarks; a watch that ends is resumed from the last version seen;
  a version the server no longer has (410 Gone, as a status or as an ERROR event) or does not have yet
  (``ResourceVersionTooLarge``) makes it list again; a lost connection or a 5xx/429 reconnects after a
  capped exponential backoff with seeded jitter. It yields each list as a `Listed` and each change as a
  `WatchEvent`.
- `KubeApi.bind`: POST a v1 Binding to ``pods/NAME/binding``; the outcome is `BindOutcome`.
- `KubeApi.create_event` (events.k8s.io/v1, which ``kubectl describe pod`` shows) and
  `KubeApi.set_pod_condition` (a strategic-merge patch of ``pods/NAME/status``), what kube-scheduler
  writes for a pod it placed or could not place.

A reply the caller cannot use raises `KubeApiError`; outcomes a scheduler must expect (already bound, gone)
are values, not errors.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import random
import socket
import ssl
import tempfile
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import aiohttp
import orjson
import yaml

from schemas.exceptions import ControlPlaneError, KubeApiError

__all__ = [
    "EVENTS",
    "NAMESPACES",
    "NODES",
    "PODS",
    "REPLICATION_CONTROLLERS",
    "REPLICA_SETS",
    "SERVICES",
    "STATEFUL_SETS",
    "Backoff",
    "BindOutcome",
    "BindStatus",
    "KubeApi",
    "KubeConfig",
    "Listed",
    "Resource",
    "WatchEvent",
    "binding_outcome",
    "is_expired",
    "missing_permissions",
]

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "eyrie"
_SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_LIST_PAGE = 500
_REQUEST_TIMEOUT_S = 30.0
_CONNECT_TIMEOUT_S = 10.0
# client-go picks each watch's server-side timeout at random in [5, 10) min so that a fleet of clients does
# not reconnect in step; the same here, from the seeded generator.
_WATCH_TIMEOUT_S = (300.0, 600.0)
# The server sends a bookmark about once a minute, so a read that waits longer than the watch's own
# timeout plus this slack means a dead connection, not a quiet one.
_WATCH_READ_SLACK_S = 60.0
_MAX_OBJECT_BYTES = 64 * 1024 * 1024
"""Longest watch line accepted: etcd stores objects of at most 1.5 MiB, so this is garbage or an attack."""
_TOKEN_REREAD_S = 60.0
_QUICK_WATCH_S = 1.0
_EVENT_NOTE_BYTES = 1024  # events.k8s.io/v1 refuses a longer note
_EVENT_FIELD_CHARS = 128  # reportingInstance and action


# ------------------------------------------------------------------------------------------ config


@dataclass(frozen=True, slots=True)
class KubeConfig:
    """Where the API server is and how to authenticate to it. PEM texts are kept in memory; a token file
    is re-read while running because projected service-account tokens rotate."""

    server: str
    ca_pem: str | None = None
    insecure: bool = False
    token: str | None = None
    token_file: Path | None = None
    client_cert_pem: str | None = None
    client_key_pem: str | None = None

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | Path) -> KubeConfig:
        """The current context of `kubeconfig`, which may be a KUBECONFIG list: the first file naming a
        current context wins, as kubectl picks it."""
        for part in str(kubeconfig).split(os.pathsep):
            if not part.strip():
                continue
            path = Path(part).expanduser()
            try:
                config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise ControlPlaneError(f"kubeconfig {path}: cannot read it: {exc}") from None
            current = config.get("current-context") if isinstance(config, dict) else None
            if current:
                return _config_from(path, config, str(current))
        raise ControlPlaneError(f"kubeconfig {kubeconfig}: no current-context")

    @classmethod
    def in_cluster(cls, root: Path = _SERVICE_ACCOUNT) -> KubeConfig:
        """The pod's service account, as client-go's InClusterConfig reads it."""
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise ControlPlaneError("not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set")
        try:
            ca = (root / "ca.crt").read_text(encoding="ascii")
        except OSError as exc:
            raise ControlPlaneError(f"in-cluster CA {root / 'ca.crt'}: {exc}") from None
        server_host = f"[{host}]" if ":" in host else host
        return cls(server=f"https://{server_host}:{port}", ca_pem=ca, token_file=root / "token")

    def ssl_context(self) -> ssl.SSLContext:
        if self.insecure:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif self.ca_pem:
            context = ssl.create_default_context(cadata=self.ca_pem)
        else:
            context = ssl.create_default_context()
        if self.client_cert_pem and self.client_key_pem:
            # The ssl module loads a key pair from files only: a private directory, removed at once.
            with tempfile.TemporaryDirectory(prefix="eyrie-kube-") as tmp:
                cert, key = Path(tmp) / "client.crt", Path(tmp) / "client.key"
                for path, text in ((cert, self.client_cert_pem), (key, self.client_key_pem)):
                    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(descriptor, "w", encoding="ascii") as handle:
                        handle.write(text)
                try:
                    context.load_cert_chain(cert, key)
                except ssl.SSLError as exc:
                    raise ControlPlaneError(f"client certificate or key unusable: {exc}") from None
        return context


def _named(config: dict[str, Any], kind: str, name: str, path: Path) -> dict[str, Any]:
    for entry in config.get(kind) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(kind.removesuffix("s"))
            if isinstance(body, dict):
                return body
    raise ControlPlaneError(f"kubeconfig {path}: {kind}: no entry named {name!r}")


def _pem(entry: dict[str, Any], data_key: str, file_key: str, base: Path) -> str | None:
    if data := entry.get(data_key):
        return base64.b64decode(str(data)).decode("ascii")
    if file := entry.get(file_key):
        return (base.parent / str(file)).expanduser().read_text(encoding="ascii")
    return None


def _config_from(path: Path, config: dict[str, Any], current: str) -> KubeConfig:
    context = _named(config, "contexts", current, path)
    cluster = _named(config, "clusters", str(context.get("cluster")), path)
    user = _named(config, "users", str(context.get("user")), path) if context.get("user") else {}
    if "exec" in user or "auth-provider" in user:
        raise ControlPlaneError(
            f"kubeconfig {path}: user of context {current!r} needs a credential plugin (exec or "
            "auth-provider), which eyrie does not run; give it a token or a client certificate"
        )
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise ControlPlaneError(f"kubeconfig {path}: cluster of context {current!r} has no server")
    try:
        ca = _pem(cluster, "certificate-authority-data", "certificate-authority", path)
        cert = _pem(user, "client-certificate-data", "client-certificate", path)
        key = _pem(user, "client-key-data", "client-key", path)
    except (OSError, ValueError) as exc:
        raise ControlPlaneError(f"kubeconfig {path}: cannot read a certificate or key: {exc}") from None
    if (cert is None) != (key is None):
        raise ControlPlaneError(f"kubeconfig {path}: a client certificate needs its key, and a key its cert")
    token_file = user.get("tokenFile")
    return KubeConfig(
        server=server,
        ca_pem=ca,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        token=str(user["token"]) if user.get("token") else None,
        token_file=(path.parent / str(token_file)).expanduser() if token_file else None,
        client_cert_pem=cert,
        client_key_pem=key,
    )


# ---------------------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class Resource:
    """A collection eyrie lists and watches, across all namespaces."""

    kind: str
    path: str


NODES = Resource("Node", "/api/v1/nodes")
PODS = Resource("Pod", "/api/v1/pods")
NAMESPACES = Resource("Namespace", "/api/v1/namespaces")
SERVICES = Resource("Service", "/api/v1/services")
REPLICATION_CONTROLLERS = Resource("ReplicationController", "/api/v1/replicationcontrollers")
REPLICA_SETS = Resource("ReplicaSet", "/apis/apps/v1/replicasets")
STATEFUL_SETS = Resource("StatefulSet", "/apis/apps/v1/statefulsets")
EVENTS = Resource("Event", "/apis/events.k8s.io/v1/events")
"""Not watched by eyrie; its API server reads straight from etcd (no watch cache), which makes it the
collection on which a 410 Gone can be provoked by compacting etcd."""


@dataclass(frozen=True, slots=True)
class Listed:
    """Every object of a collection at one resourceVersion (each with its ``kind`` and ``apiVersion``,
    which list replies leave out of their items)."""

    items: list[dict[str, Any]]
    resource_version: str


WatchType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: WatchType
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        return str(self.object.get("metadata", {}).get("resourceVersion", ""))


BindStatus = Literal["bound", "conflict", "gone"]


@dataclass(frozen=True, slots=True)
class BindOutcome:
    """``bound``: the pod is on the node. ``conflict``: it was bound already (to this node or another).
    ``gone``: no such pod, or a new pod under the same name (the uid differs). `reason` and `message` are
    the server's."""

    status: BindStatus
    reason: str = ""
    message: str = ""


def _status_object(body: bytes) -> dict[str, Any]:
    """The reply's ``Status`` object, or {} when the body is empty or not one."""
    if not body.strip():
        return {}
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) and parsed.get("kind") == "Status" else {}


def _error(what: str, status: int, body: bytes) -> KubeApiError:
    reply = _status_object(body)
    message = str(reply.get("message") or body[:300].decode("utf-8", "replace").strip() or "no body")
    reason = str(reply.get("reason") or "")
    label = f"HTTP {status} {reason}" if reason else f"HTTP {status}"
    return KubeApiError(f"{what}: {label}: {message}", status=status, reason=reason)


def binding_outcome(status: int, body: bytes, what: str = "bind") -> BindOutcome:
    """Read the reply to a pods/binding POST. Any 2xx is success whatever the body: the server answers
    201 with a ``Status`` (not the Pod), and generated clients that expect a Pod fail on that reply even
    though the binding was made."""
    if 200 <= status < 300:
        return BindOutcome("bound")
    reply = _status_object(body)
    reason, message = str(reply.get("reason") or ""), str(reply.get("message") or "")
    if status == 404:
        return BindOutcome("gone", reason, message)
    if status == 409:
        # The binding carries the pod's uid as a precondition: its failure means the name now belongs
        # to another pod, so the one eyrie decided for is gone.
        if "Precondition failed: UID" in message:
            return BindOutcome("gone", reason, message)
        return BindOutcome("conflict", reason, message)
    raise _error(what, status, body)


def is_expired(status: Mapping[str, Any]) -> bool:
    """Whether a ``Status`` (an ERROR event's object or an error reply) means that the requested
    resourceVersion cannot be served: gone from history (410, "too old resource version") or not reached
    yet (``ResourceVersionTooLarge``, after the server restored an older etcd). client-go lists again on
    both."""
    if status.get("code") == 410 or status.get("reason") in ("Expired", "Gone"):
        return True
    if "too old resource version" in str(status.get("message", "")).lower():
        return True
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    return isinstance(causes, list) and any(
        isinstance(cause, dict) and cause.get("reason") == "ResourceVersionTooLarge" for cause in causes
    )


class _Expired(KubeApiError):
    """The watch's resourceVersion cannot be served: list again."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=410, reason="Expired")


def _retriable(error: BaseException) -> bool:
    if isinstance(error, KubeApiError):
        return error.status in {0, 429} or error.status >= 500
    return isinstance(error, aiohttp.ClientError | TimeoutError | OSError)


# ---------------------------------------------------------------------------------------- backoff


class Backoff:
    """Capped exponential delays, each shortened by up to `jitter` of itself at random: the n-th is in
    ``[(1 - jitter) d, d]`` with ``d = min(cap, initial * factor**n)``. The generator is seeded so a test
    or a replay sees the same delays."""

    def __init__(
        self,
        *,
        initial: float = 0.5,
        cap: float = 30.0,
        factor: float = 2.0,
        jitter: float = 0.5,
        seed: int | None = None,
    ) -> None:
        if not (0 < initial <= cap and factor >= 1.0 and 0.0 <= jitter < 1.0):
            raise ValueError("backoff needs 0 < initial <= cap, factor >= 1 and 0 <= jitter < 1")
        self.initial, self.cap, self.factor, self.jitter = initial, cap, factor, jitter
        self._rng = random.Random(seed)
        self.attempts = 0

    def next(self) -> float:
        delay = min(self.cap, self.initial * self.factor ** min(self.attempts, 64))
        self.attempts += 1
        return delay * (1.0 - self.jitter * self._rng.random())

    def reset(self) -> None:
        self.attempts = 0

    def uniform(self, low: float, high: float) -> float:
        """A draw from the same seeded generator (the watch timeouts)."""
        return self._rng.uniform(low, high)


# -------------------------------------------------------------------------------------------- client


@dataclass
class _Token:
    value: str | None
    read_at: float = field(default=-float("inf"))


class KubeApi:
    """One connection pool to one API server. Use as ``async with KubeApi(config) as api:``.

    `counters` tallies what the loops did (``lists``, ``relists``, ``watches``, ``reconnects``,
    ``bookmarks``), for logs and tests.
    """

    def __init__(
        self,
        config: KubeConfig,
        *,
        seed: int | None = None,
        backoff: Backoff | None = None,
        instance: str | None = None,
        request_timeout: float = _REQUEST_TIMEOUT_S,
    ) -> None:
        self.config = config
        self.backoff = backoff if backoff is not None else Backoff(seed=seed)
        self.instance = (instance or f"eyrie-{socket.gethostname()}")[:_EVENT_FIELD_CHARS]
        """The events' reportingInstance: which eyrie process wrote them."""
        self.request_timeout = request_timeout
        self.counters: Counter[str] = Counter()
        self._token = _Token(config.token)
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | Path, **options: Any) -> KubeApi:
        return cls(KubeConfig.from_kubeconfig(kubeconfig), **options)

    async def __aenter__(self) -> KubeApi:
        self._open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self.config.ssl_context())
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.request_timeout, connect=_CONNECT_TIMEOUT_S),
                json_serialize=lambda value: orjson.dumps(value).decode(),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": f"eyrie ({self.instance})"}
        if self.config.token_file is not None and time.monotonic() - self._token.read_at > _TOKEN_REREAD_S:
            try:
                self._token.value = self.config.token_file.read_text(encoding="utf-8").strip() or None
            except OSError as exc:
                raise KubeApiError(f"token file {self.config.token_file}: {exc}") from None
            self._token.read_at = time.monotonic()
        if self._token.value:
            headers["Authorization"] = f"Bearer {self._token.value}"
        if content_type is not None:
            headers["Content-Type"] = content_type
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        """One request; its status and body, for error statuses too. A failure to get a reply at all
        (connection, TLS, timeout) raises `KubeApiError` with status 0."""
        session = self._open()
        data = orjson.dumps(body) if body is not None else None
        try:
            async with session.request(
                method,
                self.config.server + path,
                params=params,
                data=data,
                headers=self._headers(content_type if data is not None else None),
            ) as response:
                return response.status, await response.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise KubeApiError(f"{method} {path}: no reply from {self.config.server}: {exc!r}") from exc

    async def _json(self, method: str, path: str, what: str, **options: Any) -> dict[str, Any]:
        status, body = await self.request(method, path, **options)
        if not 200 <= status < 300:
            raise _error(what, status, body)
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise KubeApiError(f"{what}: HTTP {status} with a body that is not JSON", status=status) from None
        if not isinstance(parsed, dict):
            raise KubeApiError(f"{what}: HTTP {status} with a JSON {type(parsed).__name__}", status=status)
        return parsed

    # ------------------------------------------------------------------------------- list and watch

    async def list(
        self, resource: Resource, *, label_selector: str | None = None, field_selector: str | None = None
    ) -> Listed:
        """The whole collection, in pages; the resourceVersion is the first page's, as the server keeps
        one snapshot for a paginated list. A continue token that expired mid-way restarts the list
        unpaginated, as client-go's pager does."""
        params = _selectors(label_selector, field_selector)
        items: list[dict[str, Any]] = []
        resource_version = ""
        token = ""
        paged = True
        while True:
            query = dict(params)
            if paged:
                query["limit"] = str(_LIST_PAGE)
                if token:
                    query["continue"] = token
            status, body = await self.request("GET", resource.path, params=query)
            if status == 410 and token:
                items, resource_version, token, paged = [], "", "", False
                continue
            if not 200 <= status < 300:
                raise _error(f"list {resource.path}", status, body)
            try:
                page = orjson.loads(body)
            except orjson.JSONDecodeError:
                raise KubeApiError(f"list {resource.path}: a reply that is not JSON", status=status) from None
            if not isinstance(page, dict):
                raise KubeApiError(f"list {resource.path}: a reply that is not a list object", status=status)
            metadata = page.get("metadata") or {}
            resource_version = resource_version or str(metadata.get("resourceVersion") or "")
            api_version = str(page.get("apiVersion") or "v1")
            for item in page.get("items") or []:
                # Items of a list omit what they are; translation wants whole objects.
                items.append({"kind": resource.kind, "apiVersion": api_version, **item})
            token = str(metadata.get("continue") or "") if paged else ""
            if not token:
                break
        self.counters["lists"] += 1
        return Listed(items, resource_version)

    async def watch(
        self,
        resource: Resource,
        resource_version: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_s: float | None = None,
    ) -> AsyncGenerator[WatchEvent | str, None]:
        """One watch from `resource_version` until the server ends it: each change as a `WatchEvent`, each
        bookmark as its resourceVersion (a str). A version the server cannot serve raises `KubeApiError`
        with status 410."""
        seconds = timeout_s if timeout_s is not None else self.backoff.uniform(*_WATCH_TIMEOUT_S)
        params = _selectors(label_selector, field_selector) | {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(max(1, int(seconds))),
        }
        session = self._open()
        timeout = aiohttp.ClientTimeout(
            total=None, connect=_CONNECT_TIMEOUT_S, sock_read=seconds + _WATCH_READ_SLACK_S
        )
        self.counters["watches"] += 1
        async with session.get(
            self.config.server + resource.path, params=params, headers=self._headers(), timeout=timeout
        ) as response:
            if response.status != 200:
                body = await response.read()
                if is_expired(_status_object(body)) or response.status == 410:
                    raise _Expired(body.decode("utf-8", "replace"))
                raise _error(f"watch {resource.path}", response.status, body)
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                if len(buffer) > _MAX_OBJECT_BYTES:
                    raise KubeApiError(f"watch {resource.path}: a line over {_MAX_OBJECT_BYTES} bytes")
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _watch_item(resource, line)

    async def list_and_watch(
        self,
        resource: Resource,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout_s: float | None = None,
    ) -> AsyncIterator[Listed | WatchEvent]:
        """List, then watch from there, forever (see the module's docstring). With `resource_version`, the
        first watch starts there without a list (a resumed consumer that kept its state). Errors that
        retrying cannot fix (401, 403, a bad selector) end the loop by raising `KubeApiError`."""
        version = resource_version
        while True:
            try:
                if version is None:
                    listed = await self.list(
                        resource, label_selector=label_selector, field_selector=field_selector
                    )
                    version = listed.resource_version
                    self.backoff.reset()
                    yield listed
                watch = self.watch(
                    resource,
                    version,
                    label_selector=label_selector,
                    field_selector=field_selector,
                    timeout_s=watch_timeout_s,
                )
                started, delivered = time.monotonic(), False
                # Closed here, not whenever the collector finds it: it holds a connection.
                async with contextlib.aclosing(watch) as events:
                    async for item in events:
                        delivered = True
                        self.backoff.reset()
                        if isinstance(item, str):
                            self.counters["bookmarks"] += 1
                            version = item or version
                            continue
                        version = item.resource_version or version
                        yield item
                if not delivered and time.monotonic() - started < _QUICK_WATCH_S:
                    # A server (or proxy) that ends every watch at once would otherwise be asked again
                    # in a tight loop.
                    self.counters["empty_watches"] += 1
                    await asyncio.sleep(self.backoff.next())
            except _Expired as expired:
                log.info("watch %s at %s expired, listing again: %s", resource.path, version, expired)
                self.counters["relists"] += 1
                version = None
            except (KubeApiError, aiohttp.ClientError, TimeoutError, OSError) as error:
                if not _retriable(error):
                    raise
                delay = self.backoff.next()
                self.counters["reconnects"] += 1
                log.warning("watch %s: %s; reconnecting in %.2f s", resource.path, error, delay)
                await asyncio.sleep(delay)

    # ------------------------------------------------------------------------------------- writes

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str] | None = None
    ) -> BindOutcome:
        """Bind the pod to `node`. The uid is a precondition: a pod recreated under the same name is not
        bound by a decision made for its predecessor. `annotations` are set on the pod by the same request
        (the API server copies a Binding's annotations onto the pod as it sets the node)."""
        metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
        if annotations:
            metadata["annotations"] = dict(annotations)
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{_segment(namespace)}/pods/{_segment(name)}/binding"
        status, body = await self.request("POST", path, body=binding)
        return binding_outcome(status, body, f"bind {namespace}/{name} to {node}")

    async def create_event(
        self,
        *,
        namespace: str,
        name: str,
        uid: str,
        reason: str,
        message: str,
        event_type: Literal["Normal", "Warning"] | None = None,
        action: str = "Scheduling",
        node: str | None = None,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Post an events.k8s.io/v1 Event about a pod, as kube-scheduler does: reason ``Scheduled``
        (Normal, `node` as the related object) or ``FailedScheduling`` (Warning). Returns the Event."""
        when = now or datetime.now(UTC)
        kind: str = event_type or ("Warning" if reason.startswith("Failed") else "Normal")
        # kube-scheduler's naming: the object's name and the time in hex, unique per pod and moment.
        suffix = f".{int(when.timestamp() * 1e9):x}"
        event: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name[: 253 - len(suffix)] + suffix, "namespace": namespace},
            "eventTime": when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.instance,
            "action": action[:_EVENT_FIELD_CHARS],
            "reason": reason[:_EVENT_FIELD_CHARS],
            "note": _truncate_utf8(message, _EVENT_NOTE_BYTES),
            "type": kind,
            "regarding": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": namespace,
                "name": name,
                "uid": uid,
            },
        }
        if node is not None:
            event["related"] = {"apiVersion": "v1", "kind": "Node", "name": node}
        path = f"/apis/events.k8s.io/v1/namespaces/{_segment(namespace)}/events"
        return await self._json("POST", path, f"event {reason} for {namespace}/{name}", body=event)

    async def set_pod_condition(
        self,
        namespace: str,
        name: str,
        *,
        message: str,
        uid: str | None = None,
        condition: str = "PodScheduled",
        status: Literal["True", "False", "Unknown"] = "False",
        reason: str = "Unschedulable",
        now: datetime | None = None,
    ) -> bool:
        """Set one condition on the pod's status (by default PodScheduled=False, Unschedulable, as
        kube-scheduler writes for a pod it cannot place). False when the pod is gone, or, given `uid`, when
        the name now belongs to another pod (the patch's uid then fails the server's immutability check)."""
        when = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch: dict[str, Any] = {
            "status": {
                "conditions": [
                    {
                        "type": condition,
                        "status": status,
                        "reason": reason,
                        "message": message,
                        "lastTransitionTime": when,
                        "lastProbeTime": None,
                    }
                ]
            }
        }
        if uid is not None:
            patch["metadata"] = {"uid": uid}
        path = f"/api/v1/namespaces/{_segment(namespace)}/pods/{_segment(name)}/status"
        answer, body = await self.request(
            "PATCH", path, body=patch, content_type="application/strategic-merge-patch+json"
        )
        if 200 <= answer < 300:
            return True
        if answer == 404 or (answer == 422 and _names_field(body, "metadata.uid")):
            return False
        raise _error(f"set {condition}={status} on {namespace}/{name}", answer, body)


def _watch_item(resource: Resource, line: bytes) -> WatchEvent | str:
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise KubeApiError(f"watch {resource.path}: a line that is not JSON: {line[:200]!r}") from None
    kind = event.get("type") if isinstance(event, dict) else None
    obj = event.get("object") if isinstance(event, dict) else None
    if not isinstance(obj, dict):
        raise KubeApiError(f"watch {resource.path}: an event without an object: {line[:200]!r}")
    if kind == "BOOKMARK":
        return str((obj.get("metadata") or {}).get("resourceVersion") or "")
    if kind == "ERROR":
        if is_expired(obj):
            raise _Expired(str(obj.get("message", "")))
        raise KubeApiError(
            f"watch {resource.path}: {obj.get('reason', '')}: {obj.get('message', '')}",
            status=int(obj.get("code") or 0),
            reason=str(obj.get("reason") or ""),
        )
    if kind not in ("ADDED", "MODIFIED", "DELETED"):
        raise KubeApiError(f"watch {resource.path}: unknown event type {kind!r}")
    return WatchEvent(kind, obj)


def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    params = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params


def _segment(name: str) -> str:
    return quote(name, safe="")


def _truncate_utf8(text: str, limit: int) -> str:
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    return encoded[: limit - 3].decode("utf-8", "ignore") + "..."


def _names_field(body: bytes, name: str) -> bool:
    details = _status_object(body).get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    return isinstance(causes, list) and any(
        isinstance(cause, dict) and cause.get("field") == name for cause in causes
    )


async def missing_permissions(api: KubeApi, permissions: Iterable[tuple[str, str, str, str]]) -> list[str]:
    """The `permissions` the API server says this account lacks, as ``verb resource[/sub] (group)``: one
    SelfSubjectAccessReview each, which every authenticated account may ask. Raises `KubeApiError` when
    the server cannot be asked."""
    missing: list[str] = []
    for verb, group, resource, subresource in permissions:
        attributes = {"verb": verb, "group": group, "resource": resource}
        if subresource:
            attributes["subresource"] = subresource
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        status, body = await api.request(
            "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=review
        )
        if not 200 <= status < 300:
            detail = " ".join(body[:300].decode("utf-8", "replace").split())
            raise KubeApiError(f"access review: HTTP {status}: {detail}", status=status)
        reply = orjson.loads(body)
        if not (isinstance(reply, dict) and (reply.get("status") or {}).get("allowed") is True):
            target = f"{resource}/{subresource}" if subresource else resource
            missing.append(f"{verb} {target}" + (f" ({group})" if group else ""))
    return missing
