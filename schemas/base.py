"""The base model every event shares, and the small constrained types the models are built from."""

from __future__ import annotations

from typing import Annotated, ClassVar, Final

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

__all__ = [
    "MAX_TIMESTAMP",
    "Event",
    "LabelKey",
    "LabelValue",
    "Name",
    "Timestamp",
]


class Event(BaseModel):
    """Frozen, strict about unknown fields (a typo such as ``reqeusts`` is an error, not a silent default)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, allow_inf_nan=False)

    schema_version: ClassVar[int] = 1
    """Bumped on any incompatible change of the model's JSON form; exported with its JSON Schema."""


Name = Annotated[str, StringConstraints(min_length=1, max_length=253)]
"""An object name or uid: non-empty and, like Kubernetes names, at most 253 characters."""

LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=317)]
LabelValue = Annotated[str, StringConstraints(max_length=63)]

MAX_TIMESTAMP: Final = 253_402_300_799.0
"""9999-12-31T23:59:59Z: later times are garbage, and one of them would move a window's head past every real
sample (and overflow the integer bucket arithmetic)."""

Timestamp = Annotated[float, Field(ge=0.0, le=MAX_TIMESTAMP, allow_inf_nan=False)]
"""Seconds (Unix time for live data, trace-relative for replays)."""
