"""Writing an experiment's results: a markdown table, a CSV and PNG plots (matplotlib, headless)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: never needs a display
import matplotlib.pyplot as plt
import numpy as np

from evaluation.experiments.portrait import ProfileResult

__all__ = ["across_seeds", "write_portrait_report"]

_COLUMNS = (
    ("pods_placed", "pods placed"),
    ("cores_placed", "cores placed"),
    ("memory_placed", "memory placed (GiB)"),
    ("node_hours_over_capacity", "node-hours > capacity"),
    ("node_hours_over_80", "node-hours > 80 %"),
    ("peak_util_std", "std of node peak util"),
    ("low_load_share", "nodes < 20 %"),
    ("high_load_share", "nodes > 80 %"),
    ("low_hours_share", "node-hours < 20 %"),
    ("high_hours_share", "node-hours > 80 %"),
    ("busiest_node_hour", "busiest node-hour"),
)
_PERCENT = ("low_load_share", "high_load_share", "busiest_node_hour")
_FINE_PERCENT = ("low_hours_share", "high_hours_share")
"""Shares of some 1,300 node-hours: a tenth of a percent is about one node-hour."""


def _percent(key: str, value: float) -> str:
    return f"{value:.1%}" if key in _FINE_PERCENT else f"{value:.0%}"


def across_seeds(runs: Sequence[Sequence[ProfileResult]]) -> dict[str, dict[str, float]]:
    """Per profile, every metric's mean over the seeds' runs (each run: one result per profile)."""
    collected: dict[str, list[dict[str, Any]]] = {}
    for results in runs:
        for result in results:
            collected.setdefault(result.profile, []).append(result.metrics())
    return {
        profile: {key: round(float(np.mean([m[key] for m in rows])), 4) for key in rows[0]}
        for profile, rows in collected.items()
    }


def _cell(key: str, value: float) -> str:
    if key in _PERCENT or key in _FINE_PERCENT:
        return _percent(key, value)
    if key == "peak_util_std":
        return f"{value:.3f}"
    return f"{value:g}" if float(value).is_integer() else f"{value:.1f}"


def _seeds_markdown(runs: Sequence[Sequence[ProfileResult]]) -> str:
    """Mean over the seeds, and the range (min–max) where the seeds disagree."""
    header = "| profile | " + " | ".join(label for _, label in _COLUMNS) + " |"
    rule = "|---" * (len(_COLUMNS) + 1) + "|"
    rows = []
    for profile, means in across_seeds(runs).items():
        values = [r.metrics() for results in runs for r in results if r.profile == profile]
        cells = []
        for key, _ in _COLUMNS:
            low, high = min(v[key] for v in values), max(v[key] for v in values)
            cell = _cell(key, means[key])
            if low != high:
                cell += f" ({_cell(key, low)}–{_cell(key, high)})"
            cells.append(cell)
        rows.append(f"| {profile} | " + " | ".join(cells) + " |")
    return "\n".join([header, rule, *rows]) + "\n"


def _markdown(results: Sequence[ProfileResult]) -> str:
    header = "| profile | " + " | ".join(label for _, label in _COLUMNS) + " |"
    rule = "|---" * (len(_COLUMNS) + 1) + "|"
    rows = []
    for result in results:
        metrics = result.metrics()
        cells = []
        for key, _ in _COLUMNS:
            value = metrics[key]
            if key == "pods_placed":
                cells.append(f"{value} / {result.pods}")
            elif key in _PERCENT or key in _FINE_PERCENT:
                cells.append(_percent(key, value))
            else:
                cells.append(f"{value}")
        rows.append(f"| {result.profile} | " + " | ".join(cells) + " |")
    return "\n".join([header, rule, *rows]) + "\n"


def write_portrait_report(
    results: Sequence[ProfileResult],
    out: Path,
    context: dict[str, Any],
    runs: Sequence[Sequence[ProfileResult]] = (),
) -> list[Path]:
    """The table, CSV and plots of `results` (one seed's run); with `runs` (every seed's, `results` among
    them) the table leads with the mean and range over the seeds, then each seed's, and the CSV has them all;
    the plots stay those of `results`."""
    out.mkdir(parents=True, exist_ok=True)
    runs = runs or [results]
    written = []
    table = out / "results.md"
    lines = ["# Portrait experiment", "", *(f"- {key}: {value}" for key, value in context.items()), ""]
    if len(runs) > 1:
        lines += [f"## Mean over {len(runs)} seeds (min–max)", "", _seeds_markdown(runs)]
        lines += [
            part
            for each in runs
            for part in (f"## Seed {each[0].seed}" if each else "## Seed", "", _markdown(each))
        ]
        table.write_text("\n".join(lines))
    else:
        table.write_text("\n".join(lines) + "\n" + _markdown(results))
    written.append(table)

    csv_path = out / "results.csv"
    with csv_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["seed", "profile", "pods", *(key for key, _ in _COLUMNS)])
        for each in runs:
            for result in each:
                metrics = result.metrics()
                writer.writerow(
                    [result.seed, result.profile, result.pods, *(metrics[key] for key, _ in _COLUMNS)]
                )
    written.append(csv_path)

    heat = out / "utilization_heatmap.png"
    figure, axes = plt.subplots(len(results), 1, figsize=(12, 2.2 * len(results) + 0.8), sharex=True)
    axes_list = np.atleast_1d(axes)
    # One colour scale for every profile, up to the highest utilisation seen (at least 5 %), so that a
    # lightly loaded cluster still shows its pattern, and at most 100 %: one node-hour at several times its
    # capacity would otherwise darken every other cell; over capacity shows as the top colour.
    top = min(1.0, max(0.05, *(float(r.utilization.max(initial=0.0)) for r in results)))
    for axis, result in zip(axes_list, results, strict=True):
        image = axis.imshow(result.utilization, aspect="auto", cmap="magma", vmin=0.0, vmax=top)
        axis.yaxis.get_major_locator().set_params(integer=True)
        axis.set_title(
            f"{result.profile} (seed {result.seed}): {result.pods_placed}/{result.pods} pods placed",
            fontsize=10,
        )
        axis.set_ylabel("node")
    axes_list[-1].set_xlabel("replay hour")
    figure.colorbar(image, ax=list(axes_list), label="utilisation (dominant resource)")
    figure.savefig(heat, dpi=110)
    plt.close(figure)
    written.append(heat)

    bars = out / "metrics.png"
    figure, axes = plt.subplots(1, len(_COLUMNS), figsize=(2.6 * len(_COLUMNS), 3.4))
    names = [r.profile for r in results]
    for axis, (key, label) in zip(np.atleast_1d(axes), _COLUMNS, strict=True):
        values = [r.metrics()[key] for r in results]
        axis.bar(names, values, color=[f"C{i}" for i in range(len(names))])
        axis.set_title(label, fontsize=9)
        axis.tick_params(axis="x", labelrotation=45, labelsize=8)
    figure.tight_layout()
    figure.savefig(bars, dpi=110)
    plt.close(figure)
    written.append(bars)
    return written
