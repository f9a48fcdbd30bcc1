"""The one wire codec every topic uses: JSON through pydantic-core (serialise and validate in Rust).

``bench/codec.py`` measures this path against orjson + ``model_validate`` in the same run; pydantic-core
is faster in both directions (README: "Codec"), so it is the one used here. orjson still parses the
documents and event-log lines that arrive as text and are validated from Python objects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

import orjson
from pydantic import BaseModel, Discriminator, Tag, TypeAdapter, ValidationError

from schemas.events import Binding, BindingResult, DeadLetter, MetricSample
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent
from schemas.pod import PodBound, PodDeleted, PodRequest

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

_UNION_TAGS = {"request", "deleted", "bound", "binding"}
"""Tags of the topics' tagged unions (`_POD_EVENT`, `_BINDING_EVENT`): pydantic puts them first in an error's
path, where they name no field of the record."""


def _shown(part: str, limit: int = 64) -> str:
    """A path element as an error shows it: a hostile dict key can be a megabyte long, or hold a newline."""
    if not part.isprintable():
        part = "".join(char if char.isprintable() else repr(char)[1:-1] for char in part)
    return part if len(part) <= limit else part[:limit] + "…"


def from_validation_error(error: ValidationError, *, prefix: str | None = None) -> InvalidInput:
    """pydantic's multi-line report → one `InvalidInput` naming the first bad field."""
    first = error.errors(include_url=False, include_input=False)[0]  # inputs can be megabytes
    path = [_shown(str(part)) for part in first["loc"]]
    if path and path[0] in _UNION_TAGS:
        path = path[1:]
    cause = (first.get("ctx") or {}).get("error")
    message = first["msg"].removeprefix("Value error, ")
    if isinstance(cause, InvalidInput) and cause.field:
        # A nested validator (quantities) already names the resource; join it onto pydantic's path.
        path.append(cause.field)
        message = str(cause).removeprefix(f"{cause.field}: ")
    kind = first["type"]
    if kind == "missing":
        message = "field required"
    elif kind == "extra_forbidden":
        message = "unknown field"
    elif kind == "json_invalid":
        message = "not valid JSON: " + message.removeprefix("Invalid JSON: ")
    elif kind in ("model_type", "dict_type") and not path:
        message = "expected a JSON object"
    if prefix:
        path.insert(0, prefix)
    extra = error.error_count() - 1
    if extra:
        message += f" (and {extra} more error{'s' if extra > 1 else ''})"
    return InvalidInput(message, field=".".join(path) or None)


def encode(model: BaseModel) -> bytes:
    return model.__pydantic_serializer__.to_json(model)


def to_jsonable(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json")


def decode_json(raw: bytes | bytearray | str) -> Any:
    """Parse JSON text into Python objects (files, event-log lines); garbage is `InvalidInput`."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"not valid JSON: {exc}") from None


def _wrap_errors(validate: Callable[[Any], Any], data: Any, prefix: str | None) -> Any:
    try:
        return validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, prefix=prefix) from None
    except (OverflowError, ValueError) as exc:  # e.g. an integer too large for a float field
        raise InvalidInput(" ".join(str(exc).split()), field=prefix) from None


def model_from_mapping(model: type[M], data: object, *, prefix: str | None = None) -> M:
    if not isinstance(data, Mapping):
        raise InvalidInput(
            f"expected a JSON object for {model.__name__}, got {type(data).__name__}", field=prefix
        )
    result: M = _wrap_errors(model.model_validate, data, prefix)
    return result


def decode(model: type[M], raw: bytes | bytearray | str) -> M:
    result: M = _wrap_errors(model.model_validate_json, raw, None)
    return result


def _pod_event_kind(value: Any) -> str:
    # A deletion says ``kind: PodDeleted`` or is exactly {uid, ts}; a pod bound elsewhere says
    # ``kind: PodBound``; everything else is a request.
    if isinstance(value, dict):
        if value.get("kind") == "PodBound":
            return "bound"
        return "deleted" if value.get("kind") == "PodDeleted" or value.keys() == {"uid", "ts"} else "request"
    if isinstance(value, PodBound):
        return "bound"
    return "deleted" if isinstance(value, PodDeleted) else "request"


_POD_EVENT: TypeAdapter[PodRequest | PodDeleted | PodBound] = TypeAdapter(
    Annotated[
        Annotated[PodRequest, Tag("request")]
        | Annotated[PodDeleted, Tag("deleted")]
        | Annotated[PodBound, Tag("bound")],
        Discriminator(_pod_event_kind),
    ]
)


def _binding_kind(value: Any) -> str:
    if isinstance(value, dict):
        kind = value.get("kind")
        return "deleted" if kind == "PodDeleted" else "bound" if kind == "PodBound" else "binding"
    if isinstance(value, PodBound):
        return "bound"
    return "deleted" if isinstance(value, PodDeleted) else "binding"


_BINDING_EVENT: TypeAdapter[Binding | PodDeleted | PodBound] = TypeAdapter(
    Annotated[
        Annotated[Binding, Tag("binding")]
        | Annotated[PodDeleted, Tag("deleted")]
        | Annotated[PodBound, Tag("bound")],
        Discriminator(_binding_kind),
    ]
)
"""The bindings topic also carries releases (`PodDeleted`) of pods placement had bound, and the pods bound
by others (`PodBound`) that placement counted: in the partition of their node, like that node's bindings,
so the applier books them in the order placement saw them."""


def pod_event_from_mapping(data: object, *, prefix: str | None = None) -> PodRequest | PodDeleted | PodBound:
    """The pod-requests topic carries requests, deletions and pods bound by others."""
    result: PodRequest | PodDeleted | PodBound = TOPIC_MODELS["pod-requests"](data, prefix=prefix)
    return result


def _config_document(data: object, *, prefix: str | None = None) -> dict[str, Any]:
    # Profiles are validated by the scheduling framework when they load; here only the shape is checked.
    if not isinstance(data, dict):
        raise InvalidInput("a profile document must be a JSON object", field=prefix)
    return data


_TOPIC_ADAPTERS: dict[str, TypeAdapter[Any]] = {
    "metrics": TypeAdapter(MetricSample),
    "node-events": TypeAdapter(NodeEvent),
    "pod-requests": _POD_EVENT,
    "bindings": _BINDING_EVENT,
    "binding-results": TypeAdapter(BindingResult),
    "dead-letters": TypeAdapter(DeadLetter),
}
"""The one list of which model each topic carries; bytes and parsed JSON are both validated through it."""


def _from_mapping(adapter: TypeAdapter[Any]) -> Callable[..., Any]:
    def parse(data: object, *, prefix: str | None = None) -> Any:
        if not isinstance(data, Mapping):
            raise InvalidInput(f"expected a JSON object, got {type(data).__name__}", field=prefix)
        return _wrap_errors(adapter.validate_python, data, prefix)

    return parse


TOPIC_MODELS: dict[str, Callable[..., Any]] = {
    **{topic: _from_mapping(adapter) for topic, adapter in _TOPIC_ADAPTERS.items()},
    "config": _config_document,
}
"""Short topic name (without the configurable prefix) → ``(data, prefix=None) -> model`` for parsed JSON."""


def decode_topic_value(topic: str, raw: bytes | bytearray | str) -> Any:
    """Validate a record's bytes as the topic's model, straight from JSON."""
    adapter = _TOPIC_ADAPTERS.get(topic)
    if adapter is not None:
        return _wrap_errors(adapter.validate_json, raw, None)
    if topic == "config":
        return _config_document(decode_json(raw))
    raise InvalidInput(f"unknown topic {topic!r} (expected one of {', '.join(TOPIC_MODELS)})", field="topic")
