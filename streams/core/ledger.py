"""The applier's ledger: which pod is committed to which node, and how much of each node is allocated.

The ledger's record is two string-keyed mappings of bytes, one entry per node and one per pod uid, encoded
with orjson. The Faust applier agent passes two Tables with changelogs, so every write is replicated to
Kafka and a restarted applier recovers the ledger by replaying them; tests pass plain dicts. Bytes rather
than objects because a Table stores what it is given: a mutable dict held in a Table and changed in place
would never reach the changelog, whereas every change here is an explicit ``mapping[key] = bytes``
assignment, which is exactly one changelog record. Nothing here imports Faust or Kafka, so the rules can be
tested, property-checked and timed in isolation.

Node entry: ``{"allocatable": {resource: int}, "cordoned": bool}``. Pod entry: ``{"node": str | None,
"requests": {resource: int}, "attempt": int, "state": "bound" | "released" | "deleted", "at": float}``, and
``"reported": float`` (the report's ts) on a pod the ledger booked from a `PodBound`. Amounts are base units
(cpu in millicores), as in ``schemas.quantity``. A deleted pod's entry keeps only its node and attempt (its
requests are empty): all it answers is whether a late binding is the one committed before the deletion.

A node's allocation is not written anywhere: it is the sum of the pods bound to it, kept in memory and
recounted from the pod entries when the ledger is built and by `Ledger.recount` (the applier calls it once
its tables are recovered). So a commit or a release is one write, of the pod's entry, and no crash between
two writes can leave a node counting a pod that has no entry (or the reverse).

Rules (see ``Ledger.apply``): a binding commits only while it fits the node's allocatable under the hard
limits, a uid is booked on at most one node however often its binding is delivered, and a deleted uid is
not booked again while it is remembered (`Ledger.forget_deleted` forgets it after a retention). A pod bound
by someone else (`Ledger.book`) is booked whatever room it leaves: it runs there, and bindings that would
over-commit the node with it are refused.

A deleted pod's entry stays in the pod mapping only until the applier's consumer has committed the
deletion, and a minute more by default (`Ledger.settle`): until then a crash could deliver again a
binding of an earlier attempt, on another bindings partition, after the deletion, and only the entry
refuses it. Then the entry leaves the mapping (a tombstone in the changelog, which compaction drops) and
the uid is remembered in memory alone until `forget_deleted`. The mapping, its changelog and a recovering
applier's reading hold the live pods plus about a minute of deletions, not every deletion of the
retention.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, MutableMapping
from typing import Final, Literal, NotRequired, TypedDict

import orjson

from schemas.events import Binding, BindingResult, BindingStatus
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodBound

__all__ = [
    "CARD_RESOURCE",
    "NODES_TABLE",
    "PODS",
    "PODS_TABLE",
    "REASON_ALREADY_BOUND",
    "REASON_NODE_NOT_FOUND",
    "REASON_POD_DELETED",
    "REASON_STALE_ATTEMPT",
    "REASON_TOO_MANY_PODS",
    "Ledger",
    "NodeEntry",
    "PodEntry",
    "PodState",
    "already_bound",
    "bound_node",
    "card_allocatable",
    "card_requests",
    "insufficient",
]

NODES_TABLE: Final = "ledger-nodes"
PODS_TABLE: Final = "ledger-pods"
"""The applier's tables holding the two mappings; each has a changelog topic that `eyrie nodes` reads."""

PODS: Final = "pods"
"""The pod-count resource: counted by the ledger itself (one per bound pod), never taken from requests."""

REASON_NODE_NOT_FOUND: Final = "node not found"
REASON_POD_DELETED: Final = "pod deleted"
REASON_STALE_ATTEMPT: Final = "stale attempt"
REASON_TOO_MANY_PODS: Final = "Too many pods"
REASON_ALREADY_BOUND: Final = "pod already bound to node {node}"
"""A template: ``already_bound(node)`` fills it in."""

PodState = Literal["bound", "released", "deleted"]

# kube-scheduler's fitsRequest reports pods, then cpu, memory and ephemeral storage, then the scalar
# resources; those come from a Go map, so in no fixed order, and here sorted to keep results reproducible.
_REASON_ORDER: Final = {"cpu": 0, "memory": 1, "ephemeral-storage": 2}


class NodeEntry(TypedDict):
    allocatable: dict[str, int]
    cordoned: bool


class PodEntry(TypedDict):
    node: str | None
    requests: dict[str, int]
    attempt: int
    state: PodState
    at: float
    reported: NotRequired[float]
    """The ts of the latest `PodBound` booked for the pod (`Ledger.book`)."""


def insufficient(resource: str) -> str:
    """kube-scheduler's wording, so a conflict reads like the filter that would have refused the node."""
    return f"Insufficient {resource}"


def already_bound(node: str) -> str:
    return REASON_ALREADY_BOUND.format(node=node)


_ALREADY_BOUND_PREFIX: Final = REASON_ALREADY_BOUND.split("{node}")[0]


def bound_node(reasons: Iterable[str]) -> str | None:
    """The node a ``rejected`` result says the pod is bound to (`already_bound`'s reason), if it says so."""
    for reason in reasons:
        if reason.startswith(_ALREADY_BOUND_PREFIX):
            return reason[len(_ALREADY_BOUND_PREFIX) :]
    return None


CARD_RESOURCE: Final = "gpu-card/{card}"
"""The ledger's resource for one GPU card, in milli: a node with cards has each as its own resource, and a
GPU pod requests its milli of each card it holds, so the ordinary room check refuses over-booking a card
("Insufficient gpu-card/1") and releases free it, with no GPU-specific rule."""


def card_allocatable(spec: NodeSpec) -> dict[str, int]:
    """The node's cards as `CARD_RESOURCE` amounts."""
    if spec.gpus is None:
        return {}
    return {CARD_RESOURCE.format(card=card): spec.gpus.milli_per_card for card in range(spec.gpus.count)}


def card_requests(cards: Iterable[int], milli: int) -> dict[str, int]:
    """A GPU pod's hold on its cards as `CARD_RESOURCE` amounts."""
    return {CARD_RESOURCE.format(card=card): milli for card in cards} if milli > 0 else {}


def _reason_key(resource: str) -> tuple[int, str]:
    return (_REASON_ORDER.get(resource, len(_REASON_ORDER)), resource)


def _shortfalls(
    allocatable: dict[str, int], allocated: dict[str, int], requests: dict[str, int]
) -> list[str]:
    reasons: list[str] = []
    limit = allocatable.get(PODS)
    if limit is not None and allocated.get(PODS, 0) + 1 > limit:
        reasons.append(REASON_TOO_MANY_PODS)
    # A resource the node does not list has nothing allocatable, so any positive request of it fails; a
    # zero request is skipped, as kube-scheduler skips it, so a node already over a shrunk allocatable can
    # still take pods that do not ask for that resource.
    short = [
        resource
        for resource, amount in requests.items()
        if allocated.get(resource, 0) + amount > allocatable.get(resource, 0)
    ]
    if short:
        short.sort(key=_reason_key)
        reasons.extend(insufficient(resource) for resource in short)
    return reasons


def _add(allocated: dict[str, int], requests: dict[str, int]) -> None:
    for resource, amount in requests.items():
        if amount > 0:
            allocated[resource] = allocated.get(resource, 0) + amount
    allocated[PODS] = allocated.get(PODS, 0) + 1


def _booked(requests: dict[str, int]) -> dict[str, int]:
    # Only positive amounts are booked: zeros change nothing, and the pod count is the ledger's own.
    return {resource: amount for resource, amount in requests.items() if amount > 0 and resource != PODS}


class Ledger:
    """The authoritative allocation of every node, on two byte mappings (see the module docstring).

    Not safe for concurrent writers: the applier must be the only writer of both mappings, which holds when
    one applier instance owns the whole set of nodes (one bindings partition per cluster shard).
    """

    __slots__ = ("_allocated", "_deleted", "_gone", "_gone_order", "_nodes", "_pods")

    def __init__(self, nodes: MutableMapping[str, bytes], pods: MutableMapping[str, bytes]) -> None:
        self._nodes = nodes
        self._pods = pods
        self._allocated: dict[str, dict[str, int]] = {}
        self._deleted: deque[tuple[float, str]] = deque()
        """(when, uid) of the deleted pods' entries in the mapping, oldest first, for `settle`."""
        self._gone: dict[str, tuple[str | None, int, float]] = {}
        """Settled deletions, uid → (node, attempt, when), held in memory only, for `forget_deleted`."""
        self._gone_order: deque[tuple[float, str]] = deque()
        self.recount()

    def recount(self) -> int:
        """Count every node's allocation again from the pod entries (the mappings may have been filled
        behind the ledger's back, as a Faust table is by its changelog on recovery). Returns how many pods
        are bound."""
        sums: dict[str, dict[str, int]] = {}
        deleted: list[tuple[float, str]] = []
        bound = 0
        for uid, raw in list(self._pods.items()):
            pod: PodEntry = orjson.loads(raw)
            if pod["state"] == "deleted":
                deleted.append((pod["at"], uid))
            if pod["state"] != "bound" or pod["node"] is None:
                continue
            bound += 1
            _add(sums.setdefault(pod["node"], {PODS: 0}), pod["requests"])
        self._allocated = sums
        self._deleted = deque(sorted(deleted))
        return bound

    def settle(self, before: float) -> int:
        """Move the entries of pods deleted before `before` out of the mapping into memory; returns how
        many. The applier calls it once its consumer committed every deletion made before `before` (and
        they are the setting ``deleted_settle_s`` old): a binding of an earlier attempt that
        a crash could deliver again after its deletion is then committed too (it was answered before the
        attempt that followed it was even sent), so the entry is needed in the mapping no longer. Each
        removal is a tombstone in the table's changelog: what a recovering applier reads then follows the
        live pods, not every pod deleted within the retention."""
        settled = 0
        while self._deleted and self._deleted[0][0] < before:
            at, uid = self._deleted.popleft()
            pod = self._deleted_entry(uid, at)
            if pod is None:
                continue
            del self._pods[uid]
            self._gone[uid] = (pod["node"], pod["attempt"], at)
            self._gone_order.append((at, uid))
            settled += 1
        return settled

    def forget_deleted(self, before: float) -> int:
        """Forget the pods deleted at or before `before`, in the mapping or settled; returns how many. A
        deleted pod is remembered only to refuse a binding still in flight for it, and would otherwise be
        for ever: the ledger would grow with every pod ever placed. A binding for the uid after this is a
        new pod's."""
        dropped = 0
        while self._deleted and self._deleted[0][0] <= before:
            at, uid = self._deleted.popleft()
            if self._deleted_entry(uid, at) is not None:
                del self._pods[uid]
                dropped += 1
        while self._gone_order and self._gone_order[0][0] <= before:
            at, uid = self._gone_order.popleft()
            gone = self._gone.get(uid)
            if gone is not None and gone[2] == at:
                del self._gone[uid]
                dropped += 1
        return dropped

    def deleted_held(self) -> tuple[int, int]:
        """Deleted pods remembered: (entries in the mapping, settled ones held in memory only)."""
        return len(self._deleted), len(self._gone)

    # ------------------------------------------------------------------------------------------ nodes

    def upsert_node(self, spec: NodeSpec) -> None:
        """Add a node or replace its allocatable. What is already allocated stays allocated even when the
        new allocatable is smaller: the pods are running there. Such a node takes no new commit of the
        exceeded resource (nor any commit, if the pod count is exceeded) until releases make room."""
        # The spec is the node's whole published state, and Kubernetes' cordon is spec.unschedulable.
        entry = NodeEntry(
            allocatable=dict(spec.allocatable) | card_allocatable(spec), cordoned=spec.unschedulable
        )
        self._nodes[spec.name] = orjson.dumps(entry)

    def remove_node(self, name: str, now: float) -> list[str]:
        """Forget the node. Returns the uids committed there, in uid order; each is marked released (not
        deleted), so placement may bind it again elsewhere with a later attempt."""
        if self._nodes.pop(name, None) is None:
            return []
        self._allocated.pop(name, None)
        # A scan of the pod entries: node removal is rare, and an index of each node's pods would cost every
        # commit. The byte test skips decoding pods bound elsewhere; orjson writes keys in insertion order
        # without spaces, so the marker is exact.
        marker = b'"node":' + orjson.dumps(name)
        released: list[str] = []
        for uid, raw in list(self._pods.items()):
            if marker not in raw:
                continue
            pod: PodEntry = orjson.loads(raw)
            if pod["state"] != "bound" or pod["node"] != name:
                continue
            pod["state"] = "released"
            pod["at"] = now
            self._pods[uid] = orjson.dumps(pod)
            released.append(uid)
        released.sort()
        return released

    def apply_node_event(self, event: NodeEvent, now: float) -> None:
        """A node event as the applier takes it: upsert, delete, or (un)cordon."""
        if event.type == "upsert":
            self.upsert_node(event.node)
        elif event.type == "delete":
            self.remove_node(event.node.name, now)
        else:
            self.set_cordoned(event.node.name, event.type == "cordon")

    def set_cordoned(self, name: str, value: bool) -> None:
        """Record the cordon; unknown nodes are ignored.

        A cordon does not stop commits. Placement already filters cordoned nodes (NodeUnschedulable), so a
        binding for a cordoned node was decided before the cordon was seen, and Kubernetes' pods/binding
        subresource, the applier's optional target, accepts it too: refusing here would make the ledger
        and the API server disagree. The flag is kept for reporting.
        """
        raw = self._nodes.get(name)
        if raw is None:
            return
        entry: NodeEntry = orjson.loads(raw)
        if entry["cordoned"] != value:
            entry["cordoned"] = value
            self._nodes[name] = orjson.dumps(entry)

    # ------------------------------------------------------------------------------------------- pods

    def apply(self, binding: Binding, now: float) -> BindingResult:
        """Commit the binding if it may be, and say what happened.

        - The uid already bound: to the same node, ``applied`` again and nothing changes (a binding
          redelivered after a crash); to another node, ``rejected``.
        - The uid deleted: ``rejected``, unless this same binding (node and attempt) was committed before
          the deletion: then ``applied`` again, the answer it first had. Not bound and ``attempt`` below
          the last one seen: ``rejected``.
        - The node unknown (placement may learn of a node before the applier does), or the requests not
          fitting the node's room: ``conflict``, nothing changes, and placement queues the pod again.
        - Otherwise ``applied``: the requests and one pod are added to the node's allocation.

        ``binding.node_version`` is not compared. Placement's version counts placement's own assumes and
        forgets, and the ledger sees commits and releases: two histories of different events, so equal
        numbers would prove nothing and different numbers do not mean the room is gone. Room is always
        checked.
        """
        uid = binding.uid
        pod = self._entry(uid)
        if pod is not None:
            state = pod["state"]
            if state == "bound":
                if pod["node"] == binding.node:
                    return self._result(binding, now, "applied")
                return self._result(binding, now, "rejected", [already_bound(str(pod["node"]))])
            if state == "deleted":
                if pod["node"] == binding.node and pod["attempt"] == binding.attempt:
                    # This very binding was committed before the pod went: redelivered after a crash (the
                    # tables run ahead of the committed input offset), it gets its first answer again.
                    return self._result(binding, now, "applied")
                return self._result(binding, now, "rejected", [REASON_POD_DELETED])
            if binding.attempt < pod["attempt"]:
                return self._result(binding, now, "rejected", [REASON_STALE_ATTEMPT])

        raw_node = self._nodes.get(binding.node)
        if raw_node is None:
            return self._result(binding, now, "conflict", [REASON_NODE_NOT_FOUND])
        node: NodeEntry = orjson.loads(raw_node)
        requests = _booked(binding.requests) | card_requests(binding.gpu_cards, binding.gpu_milli)
        allocated = self._allocated.setdefault(binding.node, {PODS: 0})
        reasons = _shortfalls(node["allocatable"], allocated, requests)
        if reasons:
            return self._result(binding, now, "conflict", reasons)
        self._pods[uid] = orjson.dumps(
            PodEntry(node=binding.node, requests=requests, attempt=binding.attempt, state="bound", at=now)
        )
        _add(allocated, requests)
        return self._result(binding, now, "applied")

    def book(self, bound: PodBound, now: float) -> bool:
        """Book a pod bound by someone else on its node, whatever room it leaves; returns whether the ledger
        changed. Idempotent per uid: a report of the pod as it is booked changes nothing; of other requests
        (a resize), they replace the booked ones; of another node, the pod moves there and frees the node
        it was on (placement's binding of the uid, which the API server did not follow). A deleted uid is
        not booked again, as its bindings are not; nor is a report older than the one booked, which placement
        sends on two partitions when the pod moves (`streams.core.shard.Counted`). The node need not be
        known yet: its allocation counts the pod from the moment it is."""
        uid, node = bound.uid, bound.node
        gpu_milli = bound.pod.gpu.milli if bound.pod.gpu is not None else 0
        requests = _booked(bound.pod.effective_requests) | card_requests(bound.gpu_cards, gpu_milli)
        attempt = 0
        pod = self._entry(uid)
        if pod is not None:
            if pod["state"] == "deleted" or bound.ts < pod.get("reported", -1.0):
                return False
            if pod["state"] == "bound" and pod["node"] == node and pod["requests"] == requests:
                if pod.get("reported", -1.0) < bound.ts:
                    pod["reported"] = bound.ts
                    self._pods[uid] = orjson.dumps(pod)
                return False
            if pod["state"] == "bound" and pod["node"] is not None:
                self._release(pod["node"], pod["requests"])
            attempt = pod["attempt"]  # a binding of placement's still in flight stays as stale as it was
        entry = PodEntry(node=node, requests=requests, attempt=attempt, state="bound", at=now)
        entry["reported"] = bound.ts
        self._pods[uid] = orjson.dumps(entry)
        _add(self._allocated.setdefault(node, {PODS: 0}), requests)
        return True

    def delete(self, uid: str, now: float) -> str | None:
        """Release the pod's allocation and remember the uid as deleted, so a binding that arrives later
        (placement may still have one in flight) is rejected. Returns the node it was bound to, or None
        when it was not bound; an unknown uid is recorded all the same."""
        pod = self._entry(uid)
        if pod is None:
            tombstone = PodEntry(node=None, requests={}, attempt=0, state="deleted", at=now)
            self._pods[uid] = orjson.dumps(tombstone)
            self._deleted.append((now, uid))
            return None
        if pod["state"] == "deleted":
            return None
        released_from = pod["node"] if pod["state"] == "bound" else None
        if released_from is not None:
            self._release(released_from, pod["requests"])
        # What a deleted entry must still answer is whether a binding is the one committed before the
        # deletion (its node and attempt): its requests and report would only be carried, in the table and
        # its changelog, for as long as the entry is kept, and every pod ever placed passes through here.
        tombstone = PodEntry(node=pod["node"], requests={}, attempt=pod["attempt"], state="deleted", at=now)
        self._pods[uid] = orjson.dumps(tombstone)
        self._deleted.append((now, uid))
        return released_from

    def release(self, uid: str, now: float) -> str | None:
        """Undo a commit that the applier's target refused (Kubernetes' pods/binding found the pod bound
        elsewhere): the entry is marked released, as `remove_node` marks its pods, and the node's room is
        freed, so a later attempt may commit the pod again. Returns the node it was bound to, or None when it
        was not bound (nothing changes)."""
        raw = self._pods.get(uid)
        if raw is None:
            return None
        pod: PodEntry = orjson.loads(raw)
        if pod["state"] != "bound" or pod["node"] is None:
            return None
        pod["state"] = "released"
        pod["at"] = now
        self._pods[uid] = orjson.dumps(pod)
        self._release(pod["node"], pod["requests"])
        return pod["node"]

    # -------------------------------------------------------------------------------------- reporting

    def allocated(self, node: str) -> dict[str, int]:
        """The node's allocation, ``pods`` included; empty for an unknown node."""
        if node not in self._nodes:
            return {}
        return dict(self._allocated.get(node, {PODS: 0}))

    def node_names(self) -> list[str]:
        return sorted(self._nodes.keys())

    # -------------------------------------------------------------------------------------- internals

    def _entry(self, uid: str) -> PodEntry | None:
        """The uid's entry, a settled deletion's rebuilt from memory."""
        raw = self._pods.get(uid)
        if raw is not None:
            entry: PodEntry = orjson.loads(raw)
            return entry
        gone = self._gone.get(uid)
        if gone is None:
            return None
        return PodEntry(node=gone[0], requests={}, attempt=gone[1], state="deleted", at=gone[2])

    def _deleted_entry(self, uid: str, at: float) -> PodEntry | None:
        """The uid's entry in the mapping if it is still the deletion made at `at`."""
        raw = self._pods.get(uid)
        if raw is None:
            return None
        pod: PodEntry = orjson.loads(raw)
        return pod if pod["state"] == "deleted" and pod["at"] == at else None

    def _release(self, name: str, requests: dict[str, int]) -> None:
        allocated = self._allocated.get(name)
        if allocated is None:
            # remove_node releases every pod of the node it forgets, so a bound pod always has its node.
            return
        for resource, amount in requests.items():
            left = allocated.get(resource, 0) - amount
            if left > 0:
                allocated[resource] = left
            else:
                allocated.pop(resource, None)  # an allocation lists what is in use, as a new node's does
        allocated[PODS] = max(allocated.get(PODS, 0) - 1, 0)

    @staticmethod
    def _result(
        binding: Binding, now: float, status: BindingStatus, reasons: list[str] | None = None
    ) -> BindingResult:
        # The result names the binding's node even when rejecting for another: it answers this binding,
        # and placement uses it to drop the assume it made on that node.
        return BindingResult(
            uid=binding.uid,
            namespace=binding.namespace,
            name=binding.name,
            node=binding.node,
            cluster=binding.cluster,
            status=status,
            reasons=reasons or [],
            at=now,
            attempt=binding.attempt,
        )
