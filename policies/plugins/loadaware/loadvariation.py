"""LoadVariationRiskBalancing (scheduler-plugins Trimaran): prefer nodes whose load is low *and* steady.

Per resource r in {cpu, memory} with window data: μ = clamp((mean + pod request)/allocatable, 0, 1),
σ = clamp(std/allocatable, 0, 1), σ' = clamp(margin·σ^(1/sensitivity), 0, 1), risk = (μ + σ')/2,
score_r = (1 − risk)·100; node score = round(min over resources with data) (upstream takes the max when only
one has data, the other scoring 0). ``variant: kep`` scores the Trimaran KEP's older form:
S = min(μ + σ', 1) with μ = (mean + request)/allocatable, U = (1 − S)·100.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray
from policies.plugins.loadaware.common import Rows, RowTable, round_half_away
from policies.plugins.noderesources.common import StrictArgs
from policies.snapshot import MEASURED, NODES, Snapshot
from policies.usage import metric_scale

__all__ = ["NAME", "Args", "LoadVariationRiskBalancing", "new"]

NAME = "LoadVariationRiskBalancing"
_RESOURCES = (
    ("cpu", 0, metric_scale("cpu")),
    ("memory", 1, metric_scale("memory")),
)  # name, window column, scale

FloatArray = npt.NDArray[np.float64]


class Args(StrictArgs):
    safe_variance_margin: Annotated[float, Field(ge=0.0, le=1e6, alias="safeVarianceMargin")] = 1.0
    safe_variance_sensitivity: Annotated[float, Field(ge=0.0, le=1e6, alias="safeVarianceSensitivity")] = 1.0
    variant: Literal["upstream", "kep"] = "upstream"


_COLUMNS = 5
"""Per resource, the columns of `LoadVariationRiskBalancing._rows`."""


class LoadVariationRiskBalancing:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.margin = args.safe_variance_margin
        self.sensitivity = args.safe_variance_sensitivity
        self.variant = args.variant
        with np.errstate(divide="ignore"):
            self.exponent = 1.0 / self.sensitivity if self.sensitivity > 0 else np.inf
        # Everything but the pod's request changes only with the node or its window. np.power: arrays only.
        self._rows = RowTable(self._derive, NODES, MEASURED, scalar=False)
        self._plain = False
        """Every row scores on both resources (so a node's score is the smaller of the two)."""

    def _derive(self, snapshot: Snapshot, rows: Rows) -> tuple[Any, ...]:
        """Per resource: the window mean clamped to [0, allocatable]; allocatable (1 where there is none);
        σ' = clamp(margin·clamp(std/allocatable, 0, 1)^(1/sensitivity), 0, 1); whether the row has window
        data; and whether its score counts (window data and allocatable, else it is 0)."""
        usage = snapshot.usage
        result = []
        for resource, window, scale in _RESOURCES:
            capacity = snapshot.allocatable[rows, snapshot.column[resource]].astype(np.float64)
            positive = capacity > 0
            safe = np.where(positive, capacity, 1.0)
            used = np.clip(usage.window_mean[rows, window] * scale, 0.0, capacity)
            deviation = np.clip(usage.window_std[rows, window] * scale, 0.0, capacity)
            sigma = np.clip(deviation / safe, 0.0, 1.0)
            sigma = np.clip(np.power(sigma, self.exponent) * self.margin, 0.0, 1.0)
            has = usage.window_has[rows, window]
            result += [used, safe, sigma, has, has & positive]
        return tuple(result)

    def _resource_score(self, resource: int, nodes: IntArray, request: float) -> FloatArray:
        """The resource's score on the nodes, before `kept` applies."""
        used, safe, sigma = self._rows.columns[resource * _COLUMNS : resource * _COLUMNS + 3]
        mu = used[nodes]
        mu += max(request, 0.0)
        mu /= safe[nodes]
        if self.variant == "kep":
            mu += sigma[nodes]
            np.minimum(mu, 1.0, out=mu)
        else:
            np.clip(mu, 0.0, 1.0, out=mu)
            mu += sigma[nodes]
            mu /= 2.0
        score: FloatArray = np.subtract(1.0, mu, out=mu)
        score *= MAX_NODE_SCORE
        return score

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        snapshot, vector = ctx.snapshot, ctx.info.vector
        if self._rows.refresh(snapshot):
            columns = self._rows.columns
            self._plain = bool((columns[_COLUMNS - 1] & columns[2 * _COLUMNS - 1]).all())
        scores = []
        for i, (resource, _, _) in enumerate(_RESOURCES):
            column = snapshot.column[resource]
            request = float(vector[column]) if column < len(vector) else 0.0
            scores.append(self._resource_score(i, nodes, request))
        cpu, memory = scores
        if self._plain:
            return round_half_away(np.minimum(cpu, memory))
        # Upstream scores a resource without window data (or allocatable) 0, and takes the larger of the two
        # when only one has data.
        columns = self._rows.columns
        cpu_has, cpu_kept = columns[3:_COLUMNS]
        memory_has, memory_kept = columns[_COLUMNS + 3 : 2 * _COLUMNS]
        cpu = np.where(cpu_kept[nodes], cpu, 0.0)
        memory = np.where(memory_kept[nodes], memory, 0.0)
        both = cpu_has[nodes] & memory_has[nodes]
        total = np.where(both, np.minimum(cpu, memory), np.maximum(cpu, memory))
        return round_half_away(total)


def new(args: Args | None, handle: object) -> LoadVariationRiskBalancing:
    return LoadVariationRiskBalancing(args or Args())
