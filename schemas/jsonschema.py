"""JSON Schema export: one file per wire model, for producers written in other languages."""

from __future__ import annotations

from pathlib import Path

import orjson
from pydantic import BaseModel

from schemas.events import Binding, BindingResult, DeadLetter, MetricSample
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodBound, PodDeleted, PodRequest

__all__ = ["WIRE_MODELS", "export_schemas", "schema_of"]

WIRE_MODELS: tuple[type[BaseModel], ...] = (
    MetricSample,
    NodeSpec,
    NodeEvent,
    PodRequest,
    PodDeleted,
    PodBound,
    Binding,
    BindingResult,
    DeadLetter,
)


def schema_of(model: type[BaseModel]) -> dict[str, object]:
    schema = model.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"eyrie/{model.__name__}/v{getattr(model, 'schema_version', 1)}"
    schema["x-schema-version"] = getattr(model, "schema_version", 1)
    return schema


def export_schemas(directory: str | Path) -> list[Path]:
    """Write ``<Model>.schema.json`` for every wire model; returns the paths written."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for model in WIRE_MODELS:
        path = target / f"{model.__name__}.schema.json"
        path.write_bytes(orjson.dumps(schema_of(model), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        written.append(path)
    return written
