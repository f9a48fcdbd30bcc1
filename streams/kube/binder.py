"""Kubernetes as the applier's target: what kube-scheduler's binding cycle writes, for eyrie's decisions.

The applier books a binding in its ledger first (`streams.core.ledger`), then `Binder.bind` POSTs it to the
pod's ``binding`` subresource and says what the API server made of it (`Answer`):

- 2xx: ``applied``, and a ``Scheduled`` event ("Successfully assigned ns/name to node").
- 409 because the pod is bound already: the pod is read. Bound to this very node, the binding is eyrie's own
  (a crash between the POST and the ledger's commit made the applier send it again): ``applied``. Bound
  elsewhere (another scheduler won): ``conflict`` with the server's reason, and the ledger releases the
  booking so the node's room is free again.
- 404, or a 409 on the uid precondition (a new pod took the name): ``rejected``; the ledger forgets the pod
  as deleted.
- No reply, a 5xx or a 429: asked again after a capped exponential backoff with seeded jitter, for as long
  as it takes. Nothing is dropped, and nothing is bound twice: a POST that reached the server before its
  reply was lost comes back as "already bound to this node", which is ``applied``. Bad credentials and
  missing permissions (401, 403) are retried too, loudly: an operator can fix them, and a pod must not be
  lost meanwhile. Any other refusal (400, 422) cannot succeed however often it is sent: ``rejected``.

`Binder.unschedulable` takes placement's ``unschedulable`` verdicts and gives the pod what kube-scheduler
gives it: a ``FailedScheduling`` event and ``PodScheduled=False`` (reason ``Unschedulable``). Only when the
reasons change (a pod waiting on a full cluster is not told the same thing every retry), never for a pod that
is bound, gone, or already carries the same condition (an applier that restarted and reads verdicts again),
and at a bounded rate. Events and conditions are written by `Binder.run`, in the background, so a slow or
throttled API server costs the binding path nothing: they are best effort, as in Kubernetes, and at most
`MAX_PENDING` wait (one per pod, the newest), the oldest dropped beyond it. The applier acknowledges a batch
of verdicts once their notices are written (`Binder.written`), so one killed with notices waiting reads those
verdicts again rather than leave their pods unexplained.

Nothing here imports Faust or Kafka: the applier agent holds a `Binder`, tests drive one against a real API
server.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import orjson

from schemas.events import Binding, BindingResult
from schemas.exceptions import ControlPlaneError, KubeApiError
from schemas.gpu import GPU_INDEX, format_gpu_index
from streams.core.ledger import Ledger
from streams.kube.api import Backoff, KubeApi, KubeConfig, missing_permissions

__all__ = [
    "MAX_PENDING",
    "PERMISSIONS",
    "Answer",
    "Binder",
    "Notice",
    "TokenBucket",
    "check_access",
    "failed_scheduling_message",
    "resolve_kube_config",
]

log = logging.getLogger(__name__)

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MAX_PENDING = 10_000
"""Events and conditions waiting to be written, one per pod. Beyond it the oldest is dropped (and counted):
the binding path must never wait for them, nor memory grow with an API server that does not answer."""
_TOLD_KEPT = 100_000
"""Pods whose last unschedulable reasons are remembered (the least recently told forgotten first): enough
for every pending pod of a large cluster, bounded for one that never drains."""

_WRITTEN_POLL_S = 0.05

PERMISSIONS: tuple[tuple[str, str, str, str], ...] = (
    # (verb, API group, resource, subresource): what `check_access` asks the API server about.
    ("create", "", "pods", "binding"),
    ("get", "", "pods", ""),
    ("patch", "", "pods", "status"),
    ("create", "events.k8s.io", "events", ""),
)

Release = Literal["none", "released", "deleted"]


@dataclass(frozen=True, slots=True)
class Answer:
    """What the API server made of a binding, and what the ledger is to do with the booking: keep it
    (``none``), free the node's room for another attempt (``released``), or forget the pod (``deleted``)."""

    status: Literal["applied", "conflict", "rejected"]
    reasons: tuple[str, ...] = ()
    release: Release = "none"


@dataclass(frozen=True, slots=True)
class Notice:
    """An event (and, for ``FailedScheduling``, the pod's condition) waiting to be written."""

    reason: Literal["Scheduled", "FailedScheduling"]
    uid: str
    namespace: str
    name: str
    message: str
    node: str | None = None
    reasons: tuple[str, ...] = ()


def failed_scheduling_message(reasons: tuple[str, ...] | list[str]) -> str:
    """kube-scheduler's wording where it fits. Placement's reasons count nodes per reason ("2 Insufficient
    cpu"); a verdict does not say how many nodes there were, so the "0/N nodes" prefix cannot be given."""
    if not reasons:
        return "eyrie found no node for the pod."
    return f"eyrie found no node for the pod: {', '.join(reasons)}."


class TokenBucket:
    """At most `rate` takes a second on average, `burst` at once: kube-scheduler's client defaults (50, 100)
    bound what eyrie writes besides its bindings."""

    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate > 0 and burst >= 1")
        self.rate, self.burst, self._clock = rate, float(burst), clock
        self._tokens, self._at = float(burst), clock()

    def wait_s(self) -> float:
        """Seconds until a token is free (0: take it now)."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.rate

    async def take(self) -> None:
        while (delay := self.wait_s()) > 0:
            await asyncio.sleep(delay)
        self._tokens -= 1.0


class Binder:
    """Bindings to one API server, and what the pods are told (see the module's docstring).

    `counters` tallies ``bound``, ``replayed`` (already bound here: eyrie's own earlier POST), ``conflicts``,
    ``gone``, ``refused``, ``retries``, and for notices ``scheduled_events``, ``failed_scheduling``,
    ``notices_repeated``, ``notices_skipped`` (pod bound or gone), ``notices_dropped``, ``notices_failed``.
    """

    def __init__(
        self,
        api: KubeApi,
        *,
        seed: int = 0,
        backoff: Backoff | None = None,
        notices_per_s: float = 50.0,
        notice_burst: int = 100,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self.api = api
        # Two generators from one seed: binds and notices retry independently, each reproducibly.
        self.backoff = backoff if backoff is not None else Backoff(initial=0.2, cap=10.0, seed=seed)
        self._notice_backoff = Backoff(initial=self.backoff.initial, cap=self.backoff.cap, seed=seed + 1)
        self.bucket = TokenBucket(notices_per_s, notice_burst)
        self.max_pending = max_pending
        self.counters: Counter[str] = Counter()
        self._pending: dict[str, Notice] = {}  # insertion-ordered: the oldest is written first
        self._writing: str | None = None  # the uid whose notice `run` is writing now
        self._told: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    # ------------------------------------------------------------------------------------- binding

    async def bind(self, binding: Binding) -> Answer:
        """POST the binding until the API server gives an answer (see the module's docstring)."""
        namespace, name = binding.namespace, binding.name
        if not namespace or not name:
            self.counters["refused"] += 1
            return Answer(
                "rejected", ("the binding names no pod (Kubernetes binds by namespace and name)",), "released"
            )
        what = f"{namespace}/{name}"
        while True:
            try:
                answer = await self._bind_once(binding, namespace, name)
            except KubeApiError as error:
                if not _worth_retrying(error):
                    self.counters["refused"] += 1
                    log.warning("binding %s to %s refused: %s", what, binding.node, error)
                    return Answer("rejected", (str(error),), "released")
                delay = self.backoff.next()
                self.counters["retries"] += 1
                level = logging.ERROR if error.status in (401, 403) else logging.WARNING
                log.log(
                    level, "binding %s to %s: %s; trying again in %.2f s", what, binding.node, error, delay
                )
                await asyncio.sleep(delay)
                continue
            self.backoff.reset()
            return answer

    async def _bind_once(self, binding: Binding, namespace: str, name: str) -> Answer:
        # The GPU cards go with the binding itself, so no pod is ever on its node without them.
        cards = {GPU_INDEX: format_gpu_index(binding.gpu_cards)} if binding.gpu_cards else None
        outcome = await self.api.bind(namespace, name, binding.uid, binding.node, cards)
        if outcome.status == "bound":
            self.counters["bound"] += 1
            self._scheduled(binding, namespace, name)
            return Answer("applied")
        if outcome.status == "gone":
            self.counters["gone"] += 1
            return Answer(
                "rejected", (_server_reason(outcome.reason, outcome.message, "pod gone"),), "deleted"
            )
        pod = await self._read_pod(namespace, name)
        holder = _spec(pod).get("nodeName") if pod is not None else None
        if pod is None or _uid(pod) != binding.uid:
            self.counters["gone"] += 1  # deleted, or the name taken by a new pod, since the POST
            return Answer("rejected", (f"pod {namespace}/{name} gone",), "deleted")
        if holder == binding.node:
            # eyrie's own binding, POSTed before a crash or a lost reply: the answer it should have had.
            self.counters["replayed"] += 1
            return Answer("applied")
        self.counters["conflicts"] += 1
        return Answer("conflict", (_server_reason(outcome.reason, outcome.message, "conflict"),), "released")

    async def answer(self, binding: Binding, result: BindingResult, ledger: Ledger) -> BindingResult:
        """The applier's step after its ledger said ``applied``: bind, and on a refusal undo the booking
        and turn the result into the API server's answer."""
        if result.status != "applied":
            return result
        answer = await self.bind(binding)
        if answer.release == "deleted":
            ledger.delete(binding.uid, time.time())
        elif answer.release == "released":
            ledger.release(binding.uid, time.time())
        if answer.status == "applied":
            return result
        return result.model_copy(update={"status": answer.status, "reasons": list(answer.reasons)})

    async def _read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        status, body = await self.api.request("GET", _pod_path(namespace, name))
        if status == 404:
            return None
        if not 200 <= status < 300:
            raise KubeApiError(f"get pod {namespace}/{name}: HTTP {status}", status=status)
        try:
            pod = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise KubeApiError(
                f"get pod {namespace}/{name}: a reply that is not JSON", status=status
            ) from None
        return pod if isinstance(pod, dict) else None

    # ------------------------------------------------------------------------------------- notices

    def _scheduled(self, binding: Binding, namespace: str, name: str) -> None:
        self._told.pop(binding.uid, None)
        self._queue(
            Notice(
                "Scheduled",
                binding.uid,
                namespace,
                name,
                f"Successfully assigned {namespace}/{name} to {binding.node}",
                node=binding.node,
            )
        )

    def unschedulable(self, result: BindingResult) -> bool:
        """Queue what the pod is to be told about placement's ``unschedulable`` verdict; False when there is
        nothing new to tell (other results, a verdict without a pod name, the same reasons as last time)."""
        if result.status != "unschedulable" or not result.namespace or not result.name:
            return False
        reasons = tuple(result.reasons)
        waiting = self._pending.get(result.uid)
        if self._told.get(result.uid) == reasons or (waiting is not None and waiting.reasons == reasons):
            self.counters["notices_repeated"] += 1
            return False
        if waiting is not None and waiting.reason == "Scheduled":
            return False  # bound meanwhile: the verdict is older than the binding
        self._queue(
            Notice(
                "FailedScheduling",
                result.uid,
                result.namespace,
                result.name,
                failed_scheduling_message(reasons),
                reasons=reasons,
            )
        )
        return True

    def _queue(self, notice: Notice) -> None:
        if notice.uid not in self._pending and len(self._pending) >= self.max_pending:
            oldest = next(iter(self._pending))
            del self._pending[oldest]
            self.counters["notices_dropped"] += 1
            if (
                self.counters["notices_dropped"] in (1, 10, 100)
                or self.counters["notices_dropped"] % 1000 == 0
            ):
                log.warning(
                    "%d events not written: more than %d waited for the API server",
                    self.counters["notices_dropped"],
                    self.max_pending,
                )
        self._pending[notice.uid] = notice  # a pod's newer notice takes its older one's place in line
        self._idle.clear()
        self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def written(self, uids: Collection[str]) -> None:
        """Until no notice of `uids` waits or is being written: each written, skipped, given up, or dropped
        (a newer notice of the pod in its place is waited for too). The applier acknowledges placement's
        verdicts only then, so the committed offsets never pass a verdict whose notice a crash would lose:
        the next applier reads it again, and `_write` does not tell a pod the same thing twice."""
        while any(uid in self._pending or uid == self._writing for uid in uids):
            await asyncio.sleep(_WRITTEN_POLL_S)

    async def drained(self) -> None:
        """Until every queued notice is written or given up (tests, and a clean shutdown)."""
        await self._idle.wait()

    async def run(self) -> None:
        """Write queued notices, oldest first, within the rate, until cancelled; then close the client."""
        try:
            while True:
                if not self._pending:
                    self._idle.set()
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                await self.bucket.take()
                uid = next(iter(self._pending))
                notice = self._pending.pop(uid)
                self._writing = uid
                try:
                    await self._write(notice)
                    self._notice_backoff.reset()
                except KubeApiError as error:
                    if not _retriable(error):
                        self.counters["notices_failed"] += 1
                        log.warning(
                            "%s for %s/%s not written: %s",
                            notice.reason,
                            notice.namespace,
                            notice.name,
                            error,
                        )
                        continue
                    # Back in line unless the pod has a newer notice meanwhile, after a pause.
                    self._pending.setdefault(uid, notice)
                    delay = self._notice_backoff.next()
                    log.warning(
                        "%s for %s/%s: %s; trying again in %.2f s",
                        notice.reason,
                        notice.namespace,
                        notice.name,
                        error,
                        delay,
                    )
                    await asyncio.sleep(delay)
                finally:
                    self._writing = None
        finally:
            await self.api.close()

    async def _write(self, notice: Notice) -> None:
        if notice.reason == "Scheduled":
            await self.api.create_event(
                namespace=notice.namespace,
                name=notice.name,
                uid=notice.uid,
                reason="Scheduled",
                message=notice.message,
                node=notice.node,
            )
            self.counters["scheduled_events"] += 1
            return
        pod = await self._read_pod(notice.namespace, notice.name)
        if pod is None or _uid(pod) != notice.uid or _spec(pod).get("nodeName"):
            self.counters["notices_skipped"] += 1  # gone, replaced, or bound since the verdict
            return
        if _has_condition(pod, notice.message):
            # Told before (by an applier that has restarted since): the same event again would be noise.
            self.counters["notices_repeated"] += 1
            self._remember(notice)
            return
        if not await self.api.set_pod_condition(
            notice.namespace, notice.name, uid=notice.uid, message=notice.message
        ):
            self.counters["notices_skipped"] += 1
            return
        await self.api.create_event(
            namespace=notice.namespace,
            name=notice.name,
            uid=notice.uid,
            reason="FailedScheduling",
            message=notice.message,
        )
        self.counters["failed_scheduling"] += 1
        self._remember(notice)

    def _remember(self, notice: Notice) -> None:
        self._told[notice.uid] = notice.reasons
        self._told.move_to_end(notice.uid)
        while len(self._told) > _TOLD_KEPT:
            self._told.popitem(last=False)


# ---------------------------------------------------------------------------------------- helpers


def _retriable(error: KubeApiError) -> bool:
    return error.status in (0, 429) or error.status >= 500


def _worth_retrying(error: KubeApiError) -> bool:
    """A binding is retried on anything that may pass later: network, overload, and credentials or RBAC
    an operator is fixing."""
    return _retriable(error) or error.status in (401, 403)


def _server_reason(reason: str, message: str, fallback: str) -> str:
    if reason and message:
        return f"{reason}: {message}"
    return message or reason or fallback


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod.get("spec")
    return spec if isinstance(spec, dict) else {}


def _uid(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata")
    return str(metadata.get("uid") or "") if isinstance(metadata, dict) else ""


def _has_condition(pod: Mapping[str, Any], message: str) -> bool:
    status = pod.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    return isinstance(conditions, list) and any(
        isinstance(c, dict)
        and c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        and c.get("message") == message
        for c in conditions
    )


# ------------------------------------------------------------------------------------- configuration


def resolve_kube_config(
    kubeconfig: str | None, *, env: Mapping[str, str] | None = None, root: Path = SERVICE_ACCOUNT
) -> tuple[KubeConfig, str]:
    """The API server's address and credentials: `kubeconfig` (the setting or ``--kubeconfig``), else
    ``KUBECONFIG``, else the pod's service account. With it, what was used, for messages."""
    env = os.environ if env is None else env
    if kubeconfig and kubeconfig.strip():
        return KubeConfig.from_kubeconfig(kubeconfig), f"kubeconfig {kubeconfig}"
    if env.get("KUBECONFIG", "").strip():
        return KubeConfig.from_kubeconfig(env["KUBECONFIG"]), f"KUBECONFIG {env['KUBECONFIG']}"
    if not (root / "token").is_file():
        raise ControlPlaneError(
            "no kubeconfig: give --kubeconfig (or EYRIE_KUBECONFIG, or KUBECONFIG), or run in a pod with a "
            f"service account ({root} has no token)"
        )
    return KubeConfig.in_cluster(root), f"service account {root}"


async def check_access(api: KubeApi) -> list[str]:
    """The `PERMISSIONS` this account lacks (`streams.kube.api.missing_permissions`)."""
    return await missing_permissions(api, PERMISSIONS)
