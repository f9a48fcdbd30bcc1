"""The demo's report: outcome counts, end-state utilisation per node, throughput and latency, as a text table,
PNG plots and one JSON object.

The end state is what the applied pods hold: each applied pod's requests are added to its node and divided by
the node's allocatable. Deleted pods still count unless `summarize` is told which were deleted (`deleted`,
e.g. `deleted_uids` of the replayed log), since a decision stream alone does not say whether a pod is gone.
"""

from __future__ import annotations

import io
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich.console import Console
from rich.table import Table

from schemas.eventlog import read_events
from schemas.exceptions import InvalidInput
from schemas.node import NodeSpec
from schemas.pod import PodDeleted
from schemas.quantity import parse_quantity

__all__ = [
    "OUTCOMES",
    "RESOURCES",
    "DemoSummary",
    "ResourceSpread",
    "deleted_uids",
    "render_table",
    "summarize",
    "write_plots",
]

RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
"""The resources the report measures, in base units (cpu in millicores, memory in bytes, GPUs in cards)."""

OUTCOMES = ("applied", "unschedulable", "conflict", "rejected", "pending")
"""Decision statuses (those of ``eyrie decisions``), in the order the table and the bar chart show them."""


@dataclass(frozen=True, slots=True)
class ResourceSpread:
    """One resource's end-state utilisation over the nodes that have any of it allocatable."""

    nodes: int
    cluster: float  # Σ allocated / Σ allocatable
    mean: float
    std: float  # population standard deviation across nodes
    max_minus_min: float
    min: float
    max: float


@dataclass(frozen=True, slots=True)
class DemoSummary:
    pods: int  # distinct pods with a decision
    placed: int  # status applied
    unschedulable: int
    conflicts: int
    rejected: int
    pending: int
    released: int  # applied pods that `deleted` says are gone, so they hold nothing at the end
    utilisation: dict[str, dict[str, float]]  # resource → node → allocated / allocatable
    spread: dict[str, ResourceSpread]  # resource → spread (absent when no node has the resource)
    decisions_per_s: float
    wall_seconds: float
    latencies_ms: tuple[float, ...] = ()
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def outcomes(self) -> dict[str, int]:
        """Status → pods, in `OUTCOMES` order."""
        counts = (self.placed, self.unschedulable, self.conflicts, self.rejected, self.pending)
        return dict(zip(OUTCOMES, counts, strict=True))

    def to_json(self) -> dict[str, Any]:
        """The summary for one JSON line: counts, rates, percentiles and per-resource spreads, rounded for
        reading. Per-node values and raw latencies stay out (hundreds of numbers); the plots show them."""

        def rounded(value: float | None, digits: int) -> float | None:
            return None if value is None else round(value, digits)

        return {
            "pods": self.pods,
            "placed": self.placed,
            "unschedulable": self.unschedulable,
            "conflicts": self.conflicts,
            "rejected": self.rejected,
            "pending": self.pending,
            "released": self.released,
            "decisions_per_s": round(self.decisions_per_s, 2),
            "wall_seconds": round(self.wall_seconds, 3),
            "latency_ms": {
                "count": len(self.latencies_ms),
                "p50": rounded(self.p50_ms, 3),
                "p90": rounded(self.p90_ms, 3),
                "p99": rounded(self.p99_ms, 3),
            },
            "utilisation": {
                resource: {
                    "nodes": spread.nodes,
                    "cluster": round(spread.cluster, 4),
                    "mean": round(spread.mean, 4),
                    "std": round(spread.std, 4),
                    "max_minus_min": round(spread.max_minus_min, 4),
                    "min": round(spread.min, 4),
                    "max": round(spread.max, 4),
                }
                for resource, spread in self.spread.items()
            },
            "notes": list(self.notes),
        }


# --- summarising ---------------------------------------------------------------------------------------


def _amount(raw: object, resource: str, uid: str) -> int:
    # Integers are base units already (what `Resources` holds); strings are Kubernetes notation ("2500m",
    # "1Gi"), which is how a serialised Binding writes cpu. A bare int must not go through parse_quantity,
    # which would read cpu 4000 as 4000 cores.
    if isinstance(raw, bool):
        raise InvalidInput(f"expected a quantity, got {raw!r}", field=f"{uid}.requests.{resource}")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float) and raw.is_integer():
        return int(raw)
    if isinstance(raw, str):
        return parse_quantity(raw, resource, field=f"{uid}.requests.{resource}")
    raise InvalidInput(
        f"expected a base-unit integer or a quantity string, got {raw!r}", field=f"{uid}.requests.{resource}"
    )


def _latest(decisions: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    # A followed stream has one object per result, so a pod can appear several times; its last one counts.
    latest: dict[str, Mapping[str, Any]] = {}
    for decision in decisions:
        uid = decision.get("uid")
        if not isinstance(uid, str) or not uid:
            raise InvalidInput(f"a decision without a uid: {dict(decision)!r:.120}", field="uid")
        latest.pop(uid, None)  # re-inserted, so the dict's order is the order of last decisions
        latest[uid] = decision
    return latest


def _spread(values: Sequence[float], allocated: float, allocatable: float) -> ResourceSpread:
    array = np.asarray(values, dtype=np.float64)
    return ResourceSpread(
        nodes=len(values),
        cluster=allocated / allocatable,
        mean=float(array.mean()),
        std=float(array.std()),
        max_minus_min=float(array.max() - array.min()),
        min=float(array.min()),
        max=float(array.max()),
    )


def summarize(
    nodes: Sequence[NodeSpec],
    decisions: Sequence[Mapping[str, Any]],
    *,
    published_at: Mapping[str, float] | None = None,
    decided_at: Mapping[str, float] | None = None,
    wall_seconds: float,
    requests: Mapping[str, Mapping[str, Any]] | None = None,
    deleted: Set[str] | None = None,
) -> DemoSummary:
    """Count outcomes and measure the end state.

    `decisions` are ``eyrie decisions`` objects (``uid``, ``node``, ``cluster``, ``status``, ``reasons``,
    optionally ``requests``); a pod appearing several times counts once, with its last decision. A pod's
    requests come from its decision, else from `requests` (uid → {resource: amount}); amounts are base-unit
    integers or Kubernetes quantity strings. Applied pods in `deleted` hold nothing at the end.
    `decisions_per_s` is the number of pods with a decision (any status: ``pending`` too, placement has
    decided it) over `wall_seconds`. Latency is `decided_at` − `published_at` (seconds, same clock) for every
    pod in both; percentiles interpolate linearly between the sorted latencies.
    """
    if not math.isfinite(wall_seconds) or wall_seconds <= 0:
        raise InvalidInput(
            f"must be a positive number of seconds, got {wall_seconds!r}", field="wall_seconds"
        )
    latest = _latest(decisions)
    deleted = deleted or frozenset()
    by_name = {node.name: node for node in nodes}
    allocated: dict[str, Counter[str]] = {node.name: Counter() for node in nodes}
    statuses: Counter[str] = Counter()
    released = 0
    without_requests: list[str] = []
    unknown_nodes: list[str] = []
    for uid, decision in latest.items():
        status = str(decision.get("status"))
        statuses[status] += 1
        if status != "applied":
            continue
        if uid in deleted:
            released += 1
            continue
        node = decision.get("node")
        if node not in by_name:
            unknown_nodes.append(uid)
            continue
        asked = decision.get("requests")
        if asked is None and requests is not None:
            asked = requests.get(uid)
        if asked is None:
            without_requests.append(uid)
            continue
        for resource in RESOURCES:
            if resource in asked:
                allocated[node][resource] += _amount(asked[resource], resource, uid)

    utilisation: dict[str, dict[str, float]] = {}
    spread: dict[str, ResourceSpread] = {}
    for resource in RESOURCES:
        holders = [node for node in nodes if node.allocatable.get(resource, 0) > 0]
        if not holders:
            continue
        per_node = {
            node.name: allocated[node.name][resource] / node.allocatable[resource] for node in holders
        }
        utilisation[resource] = per_node
        spread[resource] = _spread(
            list(per_node.values()),
            sum(allocated[node.name][resource] for node in holders),
            sum(node.allocatable[resource] for node in holders),
        )

    latencies: list[float] = []
    if published_at is not None and decided_at is not None:
        latencies = [
            (decided_at[uid] - published_at[uid]) * 1000.0 for uid in published_at if uid in decided_at
        ]
    percentiles: list[float | None] = [None, None, None]
    if latencies:
        percentiles = [float(value) for value in np.percentile(latencies, [50, 90, 99])]

    notes: list[str] = []
    unknown_statuses = sorted(set(statuses) - set(OUTCOMES))
    if unknown_statuses:
        count = sum(statuses[status] for status in unknown_statuses)
        notes.append(f"{count} pods with an unknown status ({', '.join(unknown_statuses)}), not counted")
    if without_requests:
        notes.append(f"{len(without_requests)} applied pods without requests (first {without_requests[0]})")
    if unknown_nodes:
        notes.append(
            f"{len(unknown_nodes)} applied pods on nodes not in the node list (first {unknown_nodes[0]})"
        )
    negative = sum(1 for latency in latencies if latency < 0)
    if negative:
        notes.append(f"{negative} negative latencies: published_at and decided_at are not on one clock")

    return DemoSummary(
        pods=len(latest),
        placed=statuses["applied"],
        unschedulable=statuses["unschedulable"],
        conflicts=statuses["conflict"],
        rejected=statuses["rejected"],
        pending=statuses["pending"],
        released=released,
        utilisation=utilisation,
        spread=spread,
        decisions_per_s=len(latest) / wall_seconds,
        wall_seconds=wall_seconds,
        latencies_ms=tuple(latencies),
        p50_ms=percentiles[0],
        p90_ms=percentiles[1],
        p99_ms=percentiles[2],
        notes=tuple(notes),
    )


def deleted_uids(path: str | Path) -> set[str]:
    """The uids a recorded event log deletes (``PodDeleted``): what a full replay of it has released."""
    return {event.value.uid for event in read_events(path) if isinstance(event.value, PodDeleted)}


# --- rendering -----------------------------------------------------------------------------------------


def _ms_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f} ms"


def render_table(summary: DemoSummary) -> str:
    """The summary as plain text: an outcome table and a utilisation table (rich, rendered without colour)."""
    outcomes = Table(title="Placement outcomes", title_justify="left")
    outcomes.add_column("measure")
    outcomes.add_column("value", justify="right")
    outcomes.add_row("pods decided", str(summary.pods))
    for status, count in summary.outcomes.items():
        share = f" ({count / summary.pods:.1%})" if summary.pods else ""
        outcomes.add_row(status, f"{count}{share}")
    if summary.released:
        outcomes.add_row("applied, then deleted", str(summary.released))
    outcomes.add_row("decisions / s", f"{summary.decisions_per_s:.1f}")
    outcomes.add_row("wall time", f"{summary.wall_seconds:.1f} s")
    outcomes.add_row(
        "latency, publish → applied, p50 / p90 / p99",
        " / ".join(map(_ms_text, (summary.p50_ms, summary.p90_ms, summary.p99_ms))),
    )

    resources = Table(title="Utilisation at the end (allocated / allocatable)", title_justify="left")
    resources.add_column("resource")
    for name in ("nodes", "cluster", "mean", "std", "max − min", "min", "max"):
        resources.add_column(name, justify="right")
    for resource, spread in summary.spread.items():
        resources.add_row(
            resource,
            str(spread.nodes),
            f"{spread.cluster:.1%}",
            f"{spread.mean:.1%}",
            f"{spread.std:.3f}",
            f"{spread.max_minus_min:.1%}",
            f"{spread.min:.1%}",
            f"{spread.max:.1%}",
        )

    console = Console(file=io.StringIO(), record=True, width=100, color_system=None)
    console.print(outcomes)
    console.print(resources)
    for note in summary.notes:
        console.print(f"note: {note}", highlight=False)
    # rich pads every line to the console width; trailing blanks only get in the way of logs and diffs.
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def _save(figure: Figure, path: Path) -> Path:
    # A canvas of its own per figure: no pyplot state, so plotting works in threads and never needs a display.
    FigureCanvasAgg(figure)
    figure.savefig(path, dpi=110)
    return path


def write_plots(summary: DemoSummary, out_dir: str | Path) -> list[Path]:
    """``utilisation.png`` (per-node utilisation, each resource sorted high to low), ``latency.png`` (only
    with latencies) and ``outcomes.png`` in `out_dir` (created if needed); returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    figure = Figure(figsize=(9, 4.5), layout="constrained")
    axis = figure.add_subplot()
    for resource, per_node in summary.utilisation.items():
        ranked = sorted(per_node.values(), reverse=True)
        axis.plot(
            range(len(ranked)), [100 * value for value in ranked], drawstyle="steps-mid", label=resource
        )
    axis.set_xlabel("nodes, sorted by utilisation of each resource")
    axis.set_ylabel("allocated / allocatable (%)")
    axis.set_title("Per-node utilisation at the end")
    if summary.utilisation:
        axis.legend()
    axis.grid(alpha=0.3)
    written.append(_save(figure, out / "utilisation.png"))

    if summary.latencies_ms:
        figure = Figure(figsize=(9, 4.5), layout="constrained")
        axis = figure.add_subplot()
        axis.hist(
            summary.latencies_ms, bins=min(50, max(5, len(summary.latencies_ms) // 10)), color="#4c72b0"
        )
        for label, value, style in (
            ("p50", summary.p50_ms, "-"),
            ("p90", summary.p90_ms, "--"),
            ("p99", summary.p99_ms, ":"),
        ):
            if value is not None:
                axis.axvline(value, color="#c44e52", linestyle=style, label=f"{label} {value:.1f} ms")
        axis.set_xlabel("publish → decision latency (ms)")
        axis.set_ylabel("pods")
        axis.set_title("Decision latency")
        axis.legend()
        written.append(_save(figure, out / "latency.png"))

    figure = Figure(figsize=(7, 4.5), layout="constrained")
    axis = figure.add_subplot()
    colours = ["#55a868", "#c44e52", "#dd8452", "#8172b2", "#937860"]
    bars = axis.bar(list(summary.outcomes), list(summary.outcomes.values()), color=colours)
    axis.bar_label(bars)
    axis.set_ylabel("pods")
    axis.set_title(f"Outcomes of {summary.pods} pods")
    written.append(_save(figure, out / "outcomes.png"))
    return written
