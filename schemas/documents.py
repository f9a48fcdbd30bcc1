"""Files a user hands to ``eyrie publish``: JSON (an object or a list), JSON Lines, YAML (several documents),
Kubernetes Pod manifests and ``v1 List``s of them, scheduler profiles and KubeSchedulerConfigurations, or
recorded event-log lines. A pod request, a deletion (``kind: PodDeleted``) and a pod bound by someone
else (``kind: PodBound``) all go to pod-requests, keyed by their uid. Each document becomes (topic, key,
model), or an `InvalidInput` naming the file, the document and the field."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from schemas.codec import TOPIC_MODELS, decode_json, model_from_mapping, pod_event_from_mapping
from schemas.eventlog import open_text
from schemas.events import MetricSample
from schemas.exceptions import InvalidInput
from schemas.manifest import is_pod_manifest, manifest_warnings, pod_from_manifest
from schemas.node import NodeEvent

__all__ = ["Document", "classify", "is_profile_document", "load_documents"]

_SCHEDULER_CONFIGURATION = "KubeSchedulerConfiguration"


@dataclass(frozen=True, slots=True)
class Document:
    topic: str
    key: str | None
    value: BaseModel | dict[str, Any]
    warnings: tuple[str, ...] = ()
    """What the source held that the value leaves out (`manifest_warnings`), each naming its field."""


def _raw_documents(path: Path) -> Iterator[tuple[str, Any]]:
    name = path.name
    suffixes = "".join(path.suffixes[-2:]).removesuffix(".gz")
    with open_text(path) as stream:
        if suffixes.endswith((".yaml", ".yml")):
            try:
                for index, document in enumerate(yaml.safe_load_all(stream), start=1):
                    if document is not None:
                        yield f"{name} (document {index})", document
            except yaml.YAMLError as exc:
                raise InvalidInput(f"{name}: not valid YAML: {exc}".replace("\n", " ")) from None
            return
        if suffixes.endswith((".jsonl", ".ndjson")):
            for number, line in enumerate(stream, start=1):
                if line.strip():
                    yield f"{name} (line {number})", _json(line, f"{name} (line {number})")
            return
        text = stream.read()
    document = _json(text, name)
    if isinstance(document, list):
        for index, item in enumerate(document):
            yield f"{name} [{index}]", item
    else:
        yield name, document


def _json(text: str, where: str) -> Any:
    try:
        return decode_json(text)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}") from None


def classify(document: Any, where: str) -> Iterator[Document]:
    """Tell what a document is by its shape (see the module docstring), then validate it."""
    try:
        if isinstance(document, dict) and document.get("kind") == "List" and "items" in document:
            for index, item in enumerate(document.get("items") or []):
                yield from classify(item, f"{where} item {index}")
            return
        if is_pod_manifest(document):
            pod = pod_from_manifest(document)
            warnings = tuple(f"{where}: {warning}" for warning in manifest_warnings(document))
            yield Document("pod-requests", pod.uid, pod, warnings)
        elif isinstance(document, dict) and {"ts", "topic", "value"} <= set(document):
            topic = document["topic"]
            if topic not in TOPIC_MODELS:
                raise InvalidInput(f"unknown topic {topic!r}", field="topic")
            yield Document(topic, document.get("key"), TOPIC_MODELS[topic](document["value"], prefix="value"))
        elif isinstance(document, dict) and document.get("kind") == "PodBound":
            # Before the node event's shape: a pod bound elsewhere names a node too.
            bound = pod_event_from_mapping(document)
            yield Document("pod-requests", bound.uid, bound)
        elif isinstance(document, dict) and "type" in document and "node" in document:
            event = model_from_mapping(NodeEvent, document)
            yield Document("node-events", event.node.name, event)
        elif isinstance(document, dict) and "values" in document and "node" in document:
            sample = model_from_mapping(MetricSample, document)
            yield Document("metrics", sample.node, sample)
        elif isinstance(document, dict) and "uid" in document:
            pod_event = pod_event_from_mapping(document)
            yield Document("pod-requests", pod_event.uid, pod_event)
        elif is_profile_document(document):
            yield from _profiles(document)
        else:
            raise InvalidInput(
                "cannot tell what this document is (expected a Pod manifest, a PodRequest with uid, "
                "a PodBound with kind, a NodeEvent with type and node, a MetricSample with node and values, "
                "a scheduler profile with schedulerName or a KubeSchedulerConfiguration with profiles, or an "
                "event-log line)"
            )
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}") from None


def is_profile_document(document: object) -> bool:
    """A scheduler profile (``schedulerName``) or a KubeSchedulerConfiguration (``profiles``)."""
    return isinstance(document, dict) and (
        "schedulerName" in document
        or document.get("kind") == _SCHEDULER_CONFIGURATION
        or ("profiles" in document and set(document) <= {"apiVersion", "kind", "profiles"})
    )


def _profiles(document: dict[str, Any]) -> Iterator[Document]:
    """Each profile as a record of the config topic, keyed by its name. Only the shape is checked here; the
    scheduling framework validates the profile (`eyrie publish` and `eyrie profiles publish` have it do so
    before sending anything)."""
    items: Any = [document]
    where = ""
    if "schedulerName" not in document:
        extra = sorted(set(document) - {"apiVersion", "kind", "profiles"})
        if extra:
            raise InvalidInput(f"unknown field of a {_SCHEDULER_CONFIGURATION}", field=extra[0])
        items, where = document.get("profiles"), "profiles"
        if not isinstance(items, list) or not items:
            raise InvalidInput("expected a non-empty list of profiles", field="profiles")
    for index, item in enumerate(items):
        field = f"{where}[{index}]." if where else ""
        name = item.get("schedulerName") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name:
            raise InvalidInput(
                "required: a non-empty string naming the profile", field=f"{field}schedulerName"
            )
        yield Document("config", name, item)


def load_documents(path: str | Path) -> Iterator[Document]:
    path = Path(path)
    if not path.exists():
        raise InvalidInput(f"{path}: no such file")
    for where, document in _raw_documents(path):
        yield from classify(document, where)
