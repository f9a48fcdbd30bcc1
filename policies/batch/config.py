"""Batch mode in a profile: ``mode: batch`` with ``batch_size``, ``batch_wait``, ``algorithm`` and optional
``batch_args`` (the optimiser's settings). Validated when the profile loads.

```yaml
schedulerName: tbesk
mode: batch            # single (default): one pod per cycle
batch_size: 100        # place as soon as this many pods are queued...
batch_wait: 1.0        # ...or this many seconds (on the scheduler's clock) after the first of them
algorithm: tbesk       # tbesk | bes | orders (the profile's own plugins in the best of a few orders)
batch_args:
  population: 30
  iterations: 100
  seed: 0              # mixed with the batch's pod uids: same batch, same assignment
  objective: score     # score: Σ S_N (the paper's) | z: Z_avg of the cluster after the batch
  local_search: false  # finish with single-pod moves that lower Σ Z(i)
  resources: [cpu, memory, bandwidth, disk]
  critical_load: 0.8   # or per resource: {cpu: 0.7, memory: 0.9, ...}
  weights: {mu: {compressible: {cpu: 0.4, ...}, ...}, nu: {...}}   # default: DEFAULT_MU, DEFAULT_NU
```
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from policies.batch.bes import ALGORITHMS, BesParams
from policies.batch.model import (
    DEFAULT_CRITICAL_LOAD,
    RESOURCES,
    ClassWeights,
    Objective,
    class_weights,
)
from schemas.codec import from_validation_error
from schemas.exceptions import ConfigError, InvalidInput
from schemas.quantity import validate_resource_name

__all__ = ["BATCH_KEYS", "MODES", "BatchAlgorithm", "BatchArgs", "BatchConfig", "parse_batch"]

MODES: Final = ("single", "batch")
BATCH_KEYS: Final = ("mode", "batch_size", "batch_wait", "algorithm", "batch_args")
"""The profile document keys this module reads."""

WeightTable = dict[str, dict[str, float] | list[float]]
"""Per class: weights by resource name, or a list in the order of `resources`."""


class BatchArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    population: Annotated[int, Field(ge=2, le=10_000)] = 30
    iterations: Annotated[int, Field(ge=0, le=100_000)] = 100
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    objective: Objective = "score"
    local_search: bool = False
    resources: list[str] = Field(default_factory=lambda: list(RESOURCES), min_length=1)
    critical_load: (
        Annotated[float, Field(gt=0.0, le=1.0)] | dict[str, Annotated[float, Field(gt=0.0, le=1.0)]]
    ) = DEFAULT_CRITICAL_LOAD
    weights: dict[Literal["mu", "nu"], WeightTable] | None = None

    @field_validator("resources")
    @classmethod
    def _names(cls, resources: list[str]) -> list[str]:
        for name in resources:
            validate_resource_name(name, field="resources")
        if len(set(resources)) != len(resources):
            raise ValueError("a resource is named twice")
        return resources

    @model_validator(mode="after")
    def _consistent(self) -> BatchArgs:
        if isinstance(self.critical_load, dict):
            extra = set(self.critical_load) - set(self.resources)
            if extra:
                raise ValueError(f"critical_load: {sorted(extra)[0]!r} is not one of the resources")
        self.class_weights(tuple(self.resources))  # weights must be valid for the configured resources
        return self

    def critical(self, resources: tuple[str, ...]) -> list[float]:
        if isinstance(self.critical_load, dict):
            return [self.critical_load.get(name, DEFAULT_CRITICAL_LOAD) for name in resources]
        return [self.critical_load] * len(resources)

    def class_weights(self, resources: tuple[str, ...]) -> ClassWeights:
        """Weights for a batch whose model has `resources`: the model's defaults, or the configured ones. A
        configured resource the cluster lacks is dropped and each row renormalised; a resource the model has
        that the weights do not name (an extended resource a pod requests) weighs 0."""
        if self.weights is None:
            return class_weights(resources)
        tables: dict[str, WeightTable] = {}
        for which in ("mu", "nu"):
            table = self.weights.get(which)
            if table is None:
                raise InvalidInput("missing (give both mu and nu)", field=f"weights.{which}")
            tables[which] = table
        configured = class_weights(self.resources, tables["mu"], tables["nu"])  # validates sums
        present = tuple(name for name in resources if name in self.resources)
        if present == tuple(self.resources) and present == resources:
            return configured
        rows = []
        for matrix in (configured.mu, configured.nu):
            result = np.zeros((matrix.shape[0], len(resources)))
            for j, name in enumerate(resources):
                if name in self.resources:
                    result[:, j] = matrix[:, self.resources.index(name)]
            total = result.sum(axis=1, keepdims=True)
            np.divide(result, total, out=result, where=total > 0)
            rows.append(result)
        return ClassWeights(rows[0], rows[1])

    def params(self) -> BesParams:
        return BesParams(population=self.population, iterations=self.iterations)


BatchAlgorithm = Literal["bes", "tbesk", "orders"]
"""BES and TBESK optimise the batch model (`policies.batch.bes`); ``orders`` places the batch with the
profile's own plugins in the best of a few queue orders (`policies.batch.orders`)."""


@dataclass(frozen=True, slots=True)
class BatchConfig:
    batch_size: int
    batch_wait: float
    algorithm: BatchAlgorithm
    args: BatchArgs


class _Document(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["single", "batch"] = "single"
    batch_size: Annotated[int, Field(ge=1, le=100_000)] | None = None
    batch_wait: Annotated[float, Field(ge=0.0, le=86_400.0, allow_inf_nan=False)] | None = None
    algorithm: BatchAlgorithm | None = None
    batch_args: BatchArgs | None = None


DEFAULT_BATCH_SIZE: Final = 100
DEFAULT_BATCH_WAIT: Final = 1.0


def parse_batch(document: Mapping[str, Any]) -> BatchConfig | None:
    """The batch settings of a profile document (None for one-by-one placement). Raises ConfigError naming
    the field."""
    raw = {key: document[key] for key in BATCH_KEYS if key in document}
    try:
        parsed = _Document.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(str(from_validation_error(exc))) from None
    except InvalidInput as exc:
        raise ConfigError(f"batch_args: {exc}") from None
    if parsed.mode == "single":
        given = [key for key in BATCH_KEYS[1:] if key in raw]
        if given:
            raise ConfigError(f"{given[0]}: only with mode: batch")
        return None
    algorithm = parsed.algorithm or "tbesk"
    assert algorithm in (*ALGORITHMS, "orders")
    return BatchConfig(
        batch_size=parsed.batch_size if parsed.batch_size is not None else DEFAULT_BATCH_SIZE,
        batch_wait=parsed.batch_wait if parsed.batch_wait is not None else DEFAULT_BATCH_WAIT,
        algorithm=algorithm,
        args=parsed.batch_args or BatchArgs(),
    )
