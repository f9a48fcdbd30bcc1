"""The one wire codec every topic uses: JSON via orjson, validation via pydantic.

``bench/codec.py`` measures this path against pydantic's own ``model_dump_json``/``model_validate_json``;
the faster one per direction is the one used here (see the README for the figures).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from schemas.events import Binding, BindingResult, DeadLetter, MetricSample
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent
from schemas.pod import PodDeleted, PodRequest

__all__ = [
    "TOPIC_MODELS",
    "decode",
    "decode_json",
    "decode_topic_value",
    "encode",
    "from_validation_error",
    "model_from_mapping",
    "pod_event_from_mapping",
    "to_jsonable",
]

M = TypeVar("M", bound=BaseModel)

MAX_DEPTH = 32
"""Deeper JSON is rejected before validation: no legitimate event nests this far, hostile input does."""


def from_validation_error(error: ValidationError, *, prefix: str | None = None) -> InvalidInput:
    """pydantic's multi-line report → one `InvalidInput` naming the first bad field."""
    first = error.errors(include_url=False)[0]
    path = [str(part) for part in first["loc"]]
    cause = (first.get("ctx") or {}).get("error")
    message = first["msg"].removeprefix("Value error, ")
    if isinstance(cause, InvalidInput) and cause.field:
        # A nested validator (quantities) already names the resource; join it onto pydantic's path.
        path.append(cause.field)
        message = str(cause).removeprefix(f"{cause.field}: ")
    if first["type"] == "missing":
        message = "field required"
    elif first["type"] == "extra_forbidden":
        message = "unknown field"
    if prefix:
        path.insert(0, prefix)
    field = ".".join(path) or None
    extra = error.error_count() - 1
    if extra:
        message += f" (and {extra} more error{'s' if extra > 1 else ''})"
    return InvalidInput(message, field=field)


def encode(model: BaseModel) -> bytes:
    return orjson.dumps(model.model_dump(mode="json"))


def to_jsonable(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json")


def _depth_ok(value: object, limit: int = MAX_DEPTH) -> bool:
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return True


def decode_json(raw: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON; garbage, non-finite numbers and absurd nesting are `InvalidInput`, never a crash."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"not valid JSON: {exc}") from None
    if isinstance(value, dict | list) and not _depth_ok(value):
        raise InvalidInput(f"JSON nested deeper than {MAX_DEPTH} levels")
    return value


def model_from_mapping(model: type[M], data: object, *, prefix: str | None = None) -> M:
    if not isinstance(data, Mapping):
        raise InvalidInput(
            f"expected a JSON object for {model.__name__}, got {type(data).__name__}", field=prefix
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, prefix=prefix) from None
    except (OverflowError, ValueError) as exc:  # e.g. int too large for a float field
        raise InvalidInput(str(exc), field=prefix) from None


def decode(model: type[M], raw: bytes | bytearray | memoryview | str) -> M:
    return model_from_mapping(model, decode_json(raw))


def pod_event_from_mapping(data: object, *, prefix: str | None = None) -> PodRequest | PodDeleted:
    """The pod-requests topic carries both kinds; a deletion has ``kind: PodDeleted`` or is just {uid, ts}."""
    if isinstance(data, Mapping) and (data.get("kind") == "PodDeleted" or set(data) == {"uid", "ts"}):
        return model_from_mapping(PodDeleted, data, prefix=prefix)
    return model_from_mapping(PodRequest, data, prefix=prefix)


def _config_document(data: object, *, prefix: str | None = None) -> dict[str, Any]:
    # Profiles are validated by the scheduling framework when they load; here only the shape is checked.
    if not isinstance(data, dict):
        raise InvalidInput("a profile document must be a JSON object", field=prefix)
    return data


TOPIC_MODELS: dict[str, Callable[..., Any]] = {
    "metrics": partial(model_from_mapping, MetricSample),
    "node-events": partial(model_from_mapping, NodeEvent),
    "pod-requests": pod_event_from_mapping,
    "bindings": partial(model_from_mapping, Binding),
    "binding-results": partial(model_from_mapping, BindingResult),
    "dead-letters": partial(model_from_mapping, DeadLetter),
    "config": _config_document,
}
"""Short topic name (without the configurable prefix) → ``(data, prefix=None) -> model``."""


def decode_topic_value(topic: str, raw: bytes | bytearray | memoryview | str) -> Any:
    try:
        parse = TOPIC_MODELS[topic]
    except KeyError:
        raise InvalidInput(
            f"unknown topic {topic!r} (expected one of {', '.join(TOPIC_MODELS)})", field="topic"
        ) from None
    return parse(decode_json(raw))
