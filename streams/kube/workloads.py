"""kube-scheduler's DefaultSelector: the selector PodTopologySpread's default constraints count with.

kube-scheduler gives a pod without topology spread constraints of its own the default ones (hostname maxSkew
3 and zone maxSkew 5, ScheduleAnyway, by default), counting the pods that a selector derived from the pod's
Services and controller matches (``helper.DefaultSelector``, v1.36):

- the selectors of the Services in the pod's namespace whose selector matches the pod's labels, merged into
  one set of labels (a Service without a selector selects nothing; one with an empty selector matches every
  pod and adds nothing);
- the pod's controller (its ownerReference with ``controller: true``), looked up by name in the pod's
  namespace whatever its uid: a ReplicationController (``v1``) merges its selector into that set (its
  values win where keys clash); a ReplicaSet or StatefulSet (``apps/v1``) adds its selector's
  requirements, which the pod must match as well (a nil, empty or invalid selector adds none);
- nothing selects or owns the pod (or all of it is empty): no selector, and no default constraints apply.

The result is a `schemas.pod.LabelSelector`: the merged labels as ``match_labels``, a ReplicaSet's or
StatefulSet's requirements as ``match_expressions`` (its ``matchLabels`` as ``In`` one value), so that the
selector means what upstream's does whatever keys repeat. It travels with the pod as
``PodRequest.default_spread_selector``; the plugin never sees a Service.

`Workloads` keeps the Services, ReplicationControllers, ReplicaSets and StatefulSets of a cluster by
namespace and name, as a list-and-watch delivers them (the bridge) or a ``kubectl get -o yaml`` list holds
them (``eyrie explain``). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from schemas.pod import LabelSelector, LabelSelectorRequirement

__all__ = [
    "WORKLOAD_KINDS",
    "Workloads",
    "controller_of",
    "default_selector",
]

WORKLOAD_KINDS: Final = ("Service", "ReplicationController", "ReplicaSet", "StatefulSet")
"""The kinds DefaultSelector reads."""

_CONTROLLER_KINDS: Final = {
    ("", "v1", "ReplicationController"),
    ("apps", "v1", "ReplicaSet"),
    ("apps", "v1", "StatefulSet"),
}


def _group_version(api_version: str) -> tuple[str, str] | None:
    """schema.ParseGroupVersion: "" and "/" are the empty group version; more than one slash is an error."""
    if api_version in ("", "/"):
        return "", ""
    parts = api_version.split("/")
    if len(parts) == 1:
        return "", parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    return None


def controller_of(metadata: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the pod's controller when it is a ReplicationController, ReplicaSet or StatefulSet of
    the group versions DefaultSelector knows; None otherwise. The controller is the first ownerReference with
    ``controller: true`` (metav1.GetControllerOf)."""
    for reference in metadata.get("ownerReferences") or ():
        if not isinstance(reference, Mapping) or reference.get("controller") is not True:
            continue
        parsed = _group_version(str(reference.get("apiVersion") or ""))
        if parsed is None:
            return None
        kind = str(reference.get("kind") or "")
        if (*parsed, kind) not in _CONTROLLER_KINDS:
            return None
        return kind, str(reference.get("name") or "")
    return None


def _string_map(value: object) -> dict[str, str] | None:
    if not isinstance(value, Mapping):
        return None
    return {str(k): str(v) for k, v in value.items()}


def _requirements(selector: object) -> tuple[LabelSelectorRequirement, ...]:
    """metav1.LabelSelectorAsSelector(selector).Requirements(): a nil, empty or invalid selector gives
    none (upstream adds nothing when the conversion fails or selects nothing)."""
    if not isinstance(selector, Mapping):
        return ()
    try:
        parsed = LabelSelector.model_validate(
            {
                "match_labels": selector.get("matchLabels") or {},
                "match_expressions": [
                    {"key": e.get("key"), "operator": e.get("operator"), "values": e.get("values") or []}
                    for e in selector.get("matchExpressions") or ()
                    if isinstance(e, Mapping)
                ],
            }
        )
    except ValidationError:
        return ()
    equal = [
        LabelSelectorRequirement(key=key, operator="In", values=[value])
        for key, value in parsed.match_labels.items()
    ]
    return (*equal, *parsed.match_expressions)


def default_selector(
    labels: Mapping[str, str],
    services: Iterable[Mapping[str, str]],
    controller: Mapping[str, str] | tuple[LabelSelectorRequirement, ...] | None,
) -> LabelSelector | None:
    """helper.DefaultSelector from its parts: the selectors of the Services of the pod's namespace, and what
    its controller contributes (a ReplicationController's selector map, a ReplicaSet's or StatefulSet's
    requirements, None when it has no known controller). None when the result selects nothing (Empty)."""
    merged: dict[str, str] = {}
    for selector in services:
        # A Service selects the pods whose labels hold all of its selector's (an empty one: every pod).
        if all(labels.get(key) == value for key, value in selector.items()):
            merged.update(selector)
    expressions: tuple[LabelSelectorRequirement, ...] = ()
    if isinstance(controller, tuple):
        expressions = controller
    elif controller is not None:
        merged.update(controller)
    if not merged and not expressions:
        return None
    return LabelSelector(match_labels=merged, match_expressions=list(expressions))


@dataclass(slots=True)
class Workloads:
    """The objects DefaultSelector reads, by namespace and name: Service selectors (those without one are
    not kept: they select nothing), ReplicationController selectors, ReplicaSet and StatefulSet
    requirements."""

    services: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    controllers: dict[str, dict[str, dict[str, dict[str, str] | tuple[LabelSelectorRequirement, ...]]]] = (
        field(default_factory=dict)
    )
    """kind → namespace → name → what the controller contributes."""

    @classmethod
    def of(cls, objects: Iterable[Mapping[str, Any]]) -> Workloads:
        workloads = cls()
        for obj in objects:
            workloads.apply(obj)
        return workloads

    def replace(self, kind: str, objects: Iterable[Mapping[str, Any]]) -> None:
        """Forget every object of `kind` and take `objects` (a relist)."""
        if kind == "Service":
            self.services = {}
        else:
            self.controllers.pop(kind, None)
        for obj in objects:
            self.apply(obj, kind=kind)

    def apply(self, obj: Mapping[str, Any], *, kind: str | None = None, deleted: bool = False) -> None:
        """Take an added or modified object (or forget a deleted one). Objects of other kinds are ignored."""
        kind = kind or str(obj.get("kind") or "")
        if kind not in WORKLOAD_KINDS:
            return
        metadata = obj.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "default")
        name = str(metadata.get("name") or "")
        spec = obj.get("spec") or {}
        if kind == "Service":
            selector = None if deleted else _string_map(spec.get("selector"))
            found = self.services.setdefault(namespace, {})
            if selector is None:
                found.pop(name, None)
            else:
                found[name] = selector
            return
        by_name = self.controllers.setdefault(kind, {}).setdefault(namespace, {})
        if deleted:
            by_name.pop(name, None)
        elif kind == "ReplicationController":
            by_name[name] = _string_map(spec.get("selector")) or {}
        else:
            by_name[name] = _requirements(spec.get("selector"))

    def __len__(self) -> int:
        return sum(len(names) for names in self.services.values()) + sum(
            len(names) for namespaces in self.controllers.values() for names in namespaces.values()
        )

    def selector_for(self, metadata: Mapping[str, Any]) -> LabelSelector | None:
        """DefaultSelector for the pod whose ``metadata`` (namespace, labels, ownerReferences) is given."""
        namespace = str(metadata.get("namespace") or "default")
        labels = _string_map(metadata.get("labels")) or {}
        controller: dict[str, str] | tuple[LabelSelectorRequirement, ...] | None = None
        owner = controller_of(metadata)
        if owner is not None:
            kind, name = owner
            controller = self.controllers.get(kind, {}).get(namespace, {}).get(name)
        return default_selector(labels, self.services.get(namespace, {}).values(), controller)
