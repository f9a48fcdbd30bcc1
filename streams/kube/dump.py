"""A cluster as ``kubectl get nodes,pods -A -o yaml`` prints it → the nodes and the pods running on them.

`eyrie explain --nodes` reads such a dump so that an operator can ask why a pod would go where it goes in
their own cluster. The objects are converted as the watch bridge converts them (`streams.kube.translate`):
a Pod with ``spec.nodeName`` that has not terminated occupies that node; pods not bound yet, and finished
ones, occupy nothing. Namespace objects in the same list (``kubectl get nodes,pods,namespaces``) give the
namespace labels that inter-pod affinity's ``namespaceSelector`` matches; Services, ReplicationControllers,
ReplicaSets and StatefulSets (``kubectl get nodes,pods,namespaces,services,rc,rs,sts -A -o yaml``) give each
pod, bound or to explain, the selector PodTopologySpread's default constraints count with
(``default_spread_selector``, `streams.kube.workloads`), as the watch bridge does.

Anything that cannot be read is an error naming the item and field, never skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodRequest
from streams.kube.translate import Occupant, Rejected, node_record, pod_record
from streams.kube.workloads import WORKLOAD_KINDS, Workloads

__all__ = ["ClusterDump", "is_kube_list", "read_cluster_dump"]

_ITEM_KINDS = ("Node", "Pod", "Namespace", *WORKLOAD_KINDS)
_LIST_KINDS = ("List", *(f"{kind}List" for kind in _ITEM_KINDS))


@dataclass(slots=True)
class ClusterDump:
    nodes: list[NodeSpec] = field(default_factory=list)
    occupants: list[Occupant] = field(default_factory=list)
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    workloads: Workloads = field(default_factory=Workloads)

    def with_default_selector(self, pod: PodRequest, metadata: dict[str, Any] | None = None) -> PodRequest:
        """The pod with its DefaultSelector from the dump's Services and controllers, when it names none:
        from `metadata` (the Pod object's: its ownerReferences name its controller), else from its
        namespace and labels alone (Services only)."""
        if pod.default_spread_selector is not None or not len(self.workloads):
            return pod
        found = self.workloads.selector_for(
            metadata if metadata is not None else {"namespace": pod.namespace, "labels": pod.labels}
        )
        return pod if found is None else pod.model_copy(update={"default_spread_selector": found})

    def with_namespace_labels(self, pod: PodRequest) -> PodRequest:
        """The pod with its namespace's labels, when the dump has that namespace and the pod names none."""
        labels = self.namespace_labels.get(pod.namespace)
        if labels is None or pod.namespace_labels:
            return pod
        return pod.model_copy(update={"namespace_labels": labels})


def is_kube_list(document: object) -> bool:
    return (
        isinstance(document, dict)
        and document.get("kind") in _LIST_KINDS
        and isinstance(document.get("items"), list)
    )


def _refusal(index: int, rejected: Rejected) -> InvalidInput:
    where = f"items[{index}]" + (f".{rejected.field}" if rejected.field else "")
    return InvalidInput(f"{where}: {rejected.kind} {rejected.name!r}: {rejected.reason}", field=where)


def read_cluster_dump(document: dict[str, Any]) -> ClusterDump:
    """Nodes, the pods bound to them, namespace labels and the Services and controllers DefaultSelector reads
    from a Kubernetes ``List``; `InvalidInput` naming ``items[i].<field>`` for an item that cannot be read, a
    kind that is none of those, or a pod bound to a node the list does not have."""
    dump = ClusterDump()
    default_kind = {f"{kind}List": kind for kind in _ITEM_KINDS}.get(document["kind"])
    pods: list[tuple[int, dict[str, Any]]] = []
    for index, item in enumerate(document["items"]):
        if not isinstance(item, dict):
            raise InvalidInput(f"items[{index}]: expected an object", field=f"items[{index}]")
        kind = item.get("kind") or default_kind
        if kind == "Node":
            record = node_record(item, now=0.0)
            if isinstance(record, Rejected):
                raise _refusal(index, record)
            assert isinstance(record, NodeEvent)
            dump.nodes.append(record.node)
        elif kind == "Pod":
            pods.append((index, item))
        elif kind == "Namespace":
            metadata = item.get("metadata") or {}
            labels = metadata.get("labels") or {}
            dump.namespace_labels[str(metadata.get("name") or "")] = {
                str(k): str(v) for k, v in labels.items()
            }
        elif kind in WORKLOAD_KINDS:
            dump.workloads.apply(item, kind=kind)
        else:
            raise InvalidInput(
                f"items[{index}].kind: {kind!r} is not a Node, Pod, Namespace, Service, "
                "ReplicationController, ReplicaSet or StatefulSet",
                field=f"items[{index}].kind",
            )
    names = {node.name for node in dump.nodes}
    for index, item in pods:
        found = pod_record(item, schedulers=(), now=0.0)
        if isinstance(found, Rejected):
            raise _refusal(index, found)
        if not isinstance(found, Occupant):
            continue  # not bound yet, or finished: it holds nothing
        if found.node not in names:
            raise InvalidInput(
                f"items[{index}].spec.nodeName: pod {found.pod.uid!r} runs on {found.node!r}, which the "
                "list has no Node for",
                field=f"items[{index}].spec.nodeName",
            )
        pod = dump.with_default_selector(dump.with_namespace_labels(found.pod), item.get("metadata") or {})
        dump.occupants.append(Occupant(pod, found.node, found.gpu_cards))
    return dump
