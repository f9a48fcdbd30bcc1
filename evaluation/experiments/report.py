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

__all__ = ["write_portrait_report"]

_COLUMNS = (
    ("pods_placed", "pods placed"),
    ("cores_placed", "cores placed"),
    ("node_hours_over_capacity", "node-hours > capacity"),
    ("node_hours_over_80", "node-hours > 80 %"),
    ("peak_util_std", "std of node peak util"),
    ("low_load_share", "nodes < 20 %"),
    ("high_load_share", "nodes > 80 %"),
)


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
            elif key.endswith("share"):
                cells.append(f"{value:.0%}")
            else:
                cells.append(f"{value}")
        rows.append(f"| {result.profile} | " + " | ".join(cells) + " |")
    return "\n".join([header, rule, *rows]) + "\n"


def write_portrait_report(results: Sequence[ProfileResult], out: Path, context: dict[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    table = out / "results.md"
    lines = ["# Portrait experiment", "", *(f"- {key}: {value}" for key, value in context.items()), ""]
    table.write_text("\n".join(lines) + "\n" + _markdown(results))
    written.append(table)

    csv_path = out / "results.csv"
    with csv_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["profile", "pods", *(key for key, _ in _COLUMNS)])
        for result in results:
            metrics = result.metrics()
            writer.writerow([result.profile, result.pods, *(metrics[key] for key, _ in _COLUMNS)])
    written.append(csv_path)

    heat = out / "utilization_heatmap.png"
    figure, axes = plt.subplots(len(results), 1, figsize=(12, 2.2 * len(results) + 0.8), sharex=True)
    axes_list = np.atleast_1d(axes)
    # One colour scale for every profile, up to the highest utilisation seen (at least 5 %), so that a
    # lightly loaded cluster still shows its pattern; the colour bar says where the top is.
    top = max(0.05, *(float(r.utilization.max(initial=0.0)) for r in results))
    for axis, result in zip(axes_list, results, strict=True):
        image = axis.imshow(result.utilization, aspect="auto", cmap="magma", vmin=0.0, vmax=top)
        axis.yaxis.get_major_locator().set_params(integer=True)
        axis.set_title(f"{result.profile}: {result.pods_placed}/{result.pods} pods placed", fontsize=10)
        axis.set_ylabel("node")
    axes_list[-1].set_xlabel("replay hour")
    figure.colorbar(image, ax=list(axes_list), label="utilisation (dominant resource)")
    figure.savefig(heat, dpi=110)
    plt.close(figure)
    written.append(heat)

    bars = out / "metrics.png"
    figure, axes = plt.subplots(1, len(_COLUMNS), figsize=(3.0 * len(_COLUMNS), 3.4))
    names = [r.profile for r in results]
    for axis, (key, label) in zip(np.atleast_1d(axes), _COLUMNS, strict=True):
        values = [r.metrics()[key] for r in results]
        axis.bar(names, values, color=["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b2"][: len(names)])
        axis.set_title(label, fontsize=9)
        axis.tick_params(axis="x", labelrotation=45, labelsize=8)
    figure.tight_layout()
    figure.savefig(bars, dpi=110)
    plt.close(figure)
    written.append(bars)
    return written
