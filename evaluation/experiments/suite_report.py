"""Writing the evaluation report: results.md (both tables), results.csv (one row per profile), PNG plots,
and the portrait experiment's own files in ``portrait/``."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: never needs a display
import matplotlib.pyplot as plt
import numpy as np

from evaluation.experiments.report import write_portrait_report
from evaluation.experiments.suite import (
    CHECKPOINT_DEMAND,
    RESOURCES,
    GpuResult,
    SuiteResult,
)

__all__ = ["gpu_table", "portrait_table", "write_suite_report"]

_LABELS = {"cpu": "cpu", "memory": "memory", "nvidia.com/gpu": "GPU"}
_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b2", "#937860", "#da8bc3", "#8c8c8c")


def _pct(value: float) -> str:
    return f"{value * 100:.1f} %"


def _count(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _at_checkpoint(result: GpuResult) -> list[str]:
    found = result.checkpoint()
    if found is None:
        return ["–", "–"]
    return [
        f"{found['unplaced']:,.0f}",
        f"{found['idle_gpus_partly_used']:,.0f} ({_pct(found['idle_gpu_share'])})",
    ]


def gpu_table(results: list[GpuResult], *, deletions: bool, seconds: bool = True) -> str:
    over = "node-hours over allocatable" if deletions else "nodes over allocatable"
    end = "hourly mean" if deletions else "end"
    heads = [
        "profile",
        "placed",
        "unschedulable (GPU pods)",
        f"at {CHECKPOINT_DEMAND * 100:.0f} % GPU demand: unplaced",
        f"at {CHECKPOINT_DEMAND * 100:.0f} %: idle GPUs on partly used nodes (of free)",
        f"{end}: GPUs allocated",
        f"{end}: idle GPUs on partly used nodes (of free)",
        "CPU-only pods on GPU nodes",
        *(f"{_LABELS[r]} std / max−min" for r in RESOURCES),
        over,
    ]
    if seconds:
        heads.append("seconds")
    lines = ["| " + " | ".join(heads) + " |", "|---" * len(heads) + "|"]
    for result in results:
        cells = [
            result.profile,
            f"{result.placed:,} / {result.pods:,}",
            f"{result.unschedulable:,} ({result.unschedulable_gpu:,})",
            *_at_checkpoint(result),
            _count(result.gpus_allocated),
            f"{_count(result.idle_gpus_partly_used)} ({_pct(result.idle_gpu_share)})",
            f"{result.cpu_pods_on_gpu_nodes:,}",
            *(f"{_pct(result.std[r])} / {_pct(result.range[r])}" for r in RESOURCES),
            _count(result.over_allocatable),
        ]
        if seconds:
            cells.append(f"{result.seconds:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


_PORTRAIT_COLUMNS = (
    ("pods_placed", "pods placed"),
    ("cores_placed", "cores placed"),
    ("node_hours_over_capacity", "node-hours > capacity"),
    ("node_hours_over_80", "node-hours > 80 %"),
    ("peak_node_hour_util", "busiest node-hour"),
    ("mean_util_std", "std of node mean util"),
    ("mean_util_range", "max−min of node mean util"),
    ("peak_util_std", "std of node peak util"),
    ("low_hours_share", "node-hours < 20 %"),
    ("high_hours_share", "node-hours > 80 %"),
)
_PORTRAIT_PERCENT = (
    "peak_node_hour_util",
    "mean_util_std",
    "mean_util_range",
    "peak_util_std",
    "low_hours_share",
    "high_hours_share",
)


def portrait_table(result: SuiteResult) -> str:
    """The portrait experiment's figures per profile, means over its seeds."""
    heads = ["profile", *(label for _, label in _PORTRAIT_COLUMNS)]
    lines = ["| " + " | ".join(heads) + " |", "|---" * len(heads) + "|"]
    pods = {portrait.profile: portrait.pods for portrait in result.bitbrains}
    for profile, metrics in result.portrait_means().items():
        cells = [profile]
        for key, _ in _PORTRAIT_COLUMNS:
            value = metrics[key]
            # Means over seeds: a count to one decimal, whole when it is whole.
            shown = f"{value:g}" if float(value).is_integer() else f"{value:.1f}"
            if key == "pods_placed":
                cells.append(f"{shown} / {pods[profile]}")
            elif key in _PORTRAIT_PERCENT:
                cells.append(_pct(value))
            else:
                cells.append(shown)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _markdown(result: SuiteResult, command: str) -> str:
    experiment = result.experiment
    lines = [
        "# Evaluation report",
        "",
        f"- command: `{command}`",
        *(f"- {key}: {value}" for key, value in result.context.items()),
        "- wall time: " + ", ".join(f"{part} {seconds:.1f} s" for part, seconds in result.seconds.items()),
        "",
        "## Placement on the Alibaba GPU 2023 trace",
        "",
        gpu_table(result.gpu, deletions=experiment.deletions).rstrip(),
        "",
        f"At {CHECKPOINT_DEMAND * 100:.0f} % GPU demand: the cluster after the first multiple of 100 pods "
        "whose GPU requests reach that share of the cluster's GPUs (the same pods for every profile; the end "
        "state is saturated). Idle GPUs on partly used nodes: free GPUs on nodes with at least one GPU "
        "allocated, and their share of all free GPUs. Utilisation is requests over allocatable per node at "
        "the end; std and max−min are over the nodes that have the resource (GPU: GPU nodes only). A "
        "GPU-sharing pod asks for a whole `nvidia.com/gpu`, so GPUs are counted whole. The trace has no "
        "usage: `trimaran`, `portrait` and `balanced` run without windows or portraits. Seconds: wall time "
        "of the profile's replay.",
        "",
    ]
    if result.bitbrains:
        lines += [
            "## Portraits on Bitbrains (the portrait experiment, real usage replayed)",
            "",
            portrait_table(result).rstrip(),
            "",
            "Means over the seeds in the Bitbrains line above. Utilisation is a node-hour's dominant "
            "resource, max(cpu, memory), of the replayed real usage; node-hours < 20 % and > 80 % are "
            "shares of all node-hours, empty nodes included. The experiment's own table (each seed and the "
            "range), CSV and plots are in `portrait/`.",
            "",
        ]
    return "\n".join(lines)


def _csv(result: SuiteResult, path: Path) -> None:
    gpu_keys = list(result.gpu[0].metrics()) if result.gpu else []
    portraits = result.portrait_means()
    portrait_keys = list(next(iter(portraits.values()))) if portraits else []
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["profile", *(f"gpu_{k}" for k in gpu_keys), *(f"bitbrains_{k}" for k in portrait_keys)]
        )
        for gpu in result.gpu:
            metrics: dict[str, Any] = gpu.metrics()
            row: list[Any] = [gpu.profile, *(metrics[k] for k in gpu_keys)]
            found = portraits.get(gpu.profile)
            row += [found[k] if found else "" for k in portrait_keys]
            writer.writerow(row)


def _bars(result: SuiteResult, path: Path) -> None:
    panels: list[tuple[str, list[float]]] = [
        ("unschedulable pods", [float(r.unschedulable) for r in result.gpu]),
        (
            f"idle GPUs on partly used nodes\nat {CHECKPOINT_DEMAND * 100:.0f} % GPU demand",
            [(r.checkpoint() or {}).get("idle_gpus_partly_used", 0.0) for r in result.gpu],
        ),
        ("idle GPUs on partly used nodes\n(end)", [r.idle_gpus_partly_used for r in result.gpu]),
        *(
            (f"{_LABELS[res]} utilisation std (%)", [r.std[res] * 100 for r in result.gpu])
            for res in RESOURCES
        ),
    ]
    if result.bitbrains:
        over = sum(p.node_hours_over_capacity for p in result.bitbrains)
        panels.append(
            (
                f"Bitbrains, seed {result.bitbrains[0].seed}: busiest node-hour (%)\n"
                f"node-hours > capacity: {over} in all",
                [float(p.utilization.max(initial=0.0)) * 100 for p in result.bitbrains],
            )
        )
    names = [r.profile for r in result.gpu]
    colours = [_COLOURS[i % len(_COLOURS)] for i in range(len(names))]
    figure, axes = plt.subplots(1, len(panels), figsize=(2.8 * len(panels), 3.6))
    for axis, (title, values) in zip(np.atleast_1d(axes), panels, strict=True):
        shown = names if len(values) == len(names) else [p.profile for p in result.bitbrains]
        axis.bar(shown, values, color=colours[: len(shown)])
        axis.set_title(title, fontsize=9)
        axis.tick_params(axis="x", labelrotation=60, labelsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _utilisation(result: SuiteResult, path: Path) -> None:
    """Per resource, each profile's per-node utilisation sorted: a flat line is an even cluster, a step is
    packing (1,523 nodes are too many to tell apart one by one)."""
    figure, axes = plt.subplots(1, len(RESOURCES), figsize=(5.0 * len(RESOURCES), 3.8), sharey=True)
    for j, (axis, resource) in enumerate(zip(np.atleast_1d(axes), RESOURCES, strict=True)):
        for i, gpu in enumerate(result.gpu):
            values = gpu.node_utilisation[:, j]
            ordered = np.sort(values[~np.isnan(values)]) * 100
            axis.plot(np.arange(1, len(ordered) + 1), ordered, label=gpu.profile, color=_COLOURS[i % 8])
        axis.axhline(100, color="grey", linewidth=0.8)
        axis.set_title(f"{_LABELS[resource]} requested / allocatable per node", fontsize=10)
        axis.set_xlabel("nodes having it, sorted")
        axis.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("utilisation (%)")
    np.atleast_1d(axes)[-1].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _fill(result: SuiteResult, path: Path) -> None:
    """Arrival mode, as the cluster fills: idle GPUs on partly used nodes and pods left unplaced, against
    the GPUs the pods so far ask for."""
    figure, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for i, gpu in enumerate(result.gpu):
        if not len(gpu.curve) or gpu.gpus_total == 0:
            continue
        demand = gpu.curve[:, 1] / gpu.gpus_total * 100
        colour = _COLOURS[i % len(_COLOURS)]
        axes[0].plot(demand, gpu.curve[:, 4], label=gpu.profile, color=colour)
        axes[1].plot(demand, gpu.curve[:, 2], label=gpu.profile, color=colour)
    for axis, title in zip(
        axes, ("idle GPUs on partly used nodes", "pods left unplaced (cumulative)"), strict=True
    ):
        axis.axvline(CHECKPOINT_DEMAND * 100, color="grey", linewidth=0.8, linestyle=":")
        axis.axvline(100, color="grey", linewidth=0.8)
        axis.set_xlabel("GPUs asked for by the pods so far (% of the cluster's)")
        axis.set_title(title, fontsize=10)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_suite_report(result: SuiteResult, out: Path, command: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    table = out / "results.md"
    table.write_text(_markdown(result, command))
    written.append(table)
    csv_path = out / "results.csv"
    _csv(result, csv_path)
    written.append(csv_path)
    bars = out / "metrics.png"
    _bars(result, bars)
    written.append(bars)
    util = out / "gpu_utilisation.png"
    _utilisation(result, util)
    written.append(util)
    if not result.experiment.deletions:
        fill = out / "gpu_fill.png"
        _fill(result, fill)
        written.append(fill)
    if result.bitbrains:
        context = {key: value for key, value in result.context.items() if key == "Bitbrains"}
        written += write_portrait_report(result.bitbrains, out / "portrait", context, result.bitbrains_runs)
    return written
