"""Alibaba cluster-trace-gpu-v2023 (the "openb" traces of the FGD scheduler simulator, Weng et al. ATC'23).

* Node list ``openb_node_list_all_node.csv``: ``sn, cpu_milli, memory_mib, gpu, model``. Each node becomes a
  ``node-events`` upsert at ts 0 with capacity = allocatable = {cpu: cpu_milli millicores, memory:
  memory_mib × 2^20 bytes, nvidia.com/gpu: gpu (only when > 0), pods: 110 (Kubernetes' default)}, the
  label ``gpu-model: <model>`` when the model is given, and ``gpus`` = {count: gpu, model: model} (per-card
  accounting, docs/gpu-sharing.md) when gpu > 0.
* Pod list ``openb_pod_list_<NAME>.csv``: ``name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos,
  pod_phase, creation_time, deletion_time, scheduled_time``. Each pod becomes a ``PodRequest`` at its
  creation time (uid = name, requests {cpu, memory, nvidia.com/gpu for whole cards}, ``gpu`` = {milli:
  gpu_milli, count: num_gpu, models: gpu_spec} when num_gpu > 0, ``created_at``) and a
  ``PodDeleted`` at its deletion time when that is given and later than the creation time.
  ``scheduled_time`` is not used: when a pod gets placed is what eyrie decides.

Mapping decisions:

* ``qos`` (LS, BE, Burstable, Guaranteed) is kept as the label ``qos``; ``Guaranteed`` pods also get limits
  equal to their requests, so eyrie derives the Guaranteed QoS class as Kubernetes would. The others keep
  requests only (Burstable): Alibaba's BE pods still reserve what they ask for in the simulator.
* ``pod_phase`` (the phase the pod ended in) is kept as the label ``pod-phase`` for analysis.
* GPUs, as the FGD simulator reads the trace: a pod with ``num_gpu`` = 1 and ``gpu_milli`` < 1000 takes a
  share of one card; its ``gpu`` request says so, and it requests no ``nvidia.com/gpu`` (a whole-unit
  extended resource would hold the whole card); it also carries the label ``gpu-milli: "<gpu_milli>"``
  for analysis. A pod with ``gpu_milli`` = 1000 takes ``num_gpu`` whole cards: ``gpu`` and
  ``nvidia.com/gpu: num_gpu`` both say so, which NodeResourcesFit and GpuShareFit agree on. Cards are only
  accounted per card by profiles with the GpuShareFit filter (``gpu-share``); others see whole cards only.
  Any other combination (``gpu_milli`` 0, or a share of several cards) is a bad row. A pod with ``num_gpu``
  = 0 requests no GPU whatever ``gpu_milli`` says.
* ``gpu_spec`` (allowed models, ``|``-separated) becomes ``gpu.models``, a required node affinity
  ``gpu-model In [...]``,
  which the NodeAffinity plugin enforces, and the label ``gpu-spec`` with ``|`` turned into ``_`` (``|`` is
  not allowed in a label value); the label is omitted when it still is not a valid label value.
* Pod lists without time columns (the ``multigpuNN`` lists) are arrival sequences: every pod is created at
  ts 0, in file order, and none is deleted.

Ordering: the node events come first (ts 0). Pods are read in creation order: a file sorted by
creation_time is streamed; otherwise its sorted runs are merged, or (many runs, e.g. the ``gpushareNN``
lists) an in-memory sort of (time, offset, line) triples orders it, 24 bytes a pod (see
`evaluation.traces.common.ordered_rows`). Deletions wait in a heap keyed by (deletion time, creation order)
and are emitted before any creation at the same or a later time, so the heap holds only the pods alive at
the current time. Duplicate pod names are not detected (that would need a set of every name).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from evaluation.traces.common import (
    ConversionSummary,
    ProgressFn,
    Report,
    RowError,
    TraceEvent,
    csv_rows,
    non_negative,
    ordered_rows,
    require_file,
    scan_runs,
    split_csv,
    timestamp,
    write_log,
)
from schemas.exceptions import InvalidInput
from schemas.gpu import GPU_RESOURCE, MAX_CARDS, MILLI_PER_CARD, GpuCards, GpuRequest
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import NodeSelectorRequirement, NodeSelectorTerm, PodDeleted, PodRequest
from schemas.quantity import MAX_QUANTITY, Resources

__all__ = [
    "DEFAULT_PODS",
    "GPU_RESOURCE",
    "NODE_LIST",
    "convert_alibaba_gpu2023",
    "iter_alibaba_gpu2023",
    "pod_list_path",
]

DEFAULT_PODS = "default"
NODE_LIST = "openb_node_list_all_node.csv"
MAX_PODS_PER_NODE = 110
"""Kubernetes' default kubelet ``maxPods``; the trace gives none."""

GPU_MODEL_LABEL = "gpu-model"
_MIB = 1 << 20
_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
_POD_REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
_QOS = frozenset({"LS", "BE", "Burstable", "Guaranteed"})
# Kubernetes' label value syntax: empty, or alphanumerics at both ends with [-_.] allowed inside; ≤ 63.
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_POD_NAMES = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")


def pod_list_path(src: str | Path, pods: str = DEFAULT_PODS) -> Path:
    """``SRC/openb_pod_list_<pods>.csv`` for a folder, `src` itself for a file."""
    path = Path(src)
    if path.is_dir():
        if not _POD_NAMES.match(pods):
            raise InvalidInput(f"not a pod list name: {pods!r}", field="pods")
        return require_file(path / f"openb_pod_list_{pods}.csv", f"pod list {pods!r}", field="pods")
    if path.is_file():
        return path
    raise InvalidInput(f"no such file or directory: {path}", field="src")


def _whole(text: str, what: str, unit: int = 1) -> int:
    """A whole number of `unit`s, within what a quantity can hold (models built from `Resources` skip the
    quantity checks, so an absurd value must stop here rather than make the log unreadable)."""
    value = non_negative(text, what)
    if not value.is_integer():
        raise RowError(f"{what}: not a whole number: {text.strip()!r}")
    if value * unit > MAX_QUANTITY:
        raise RowError(f"{what}: too large: {text.strip()!r}")
    return int(value) * unit


def _label_value(text: str) -> str | None:
    return text if len(text) <= 63 and _LABEL_VALUE.match(text) else None


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where each named column is, and how many columns a row must have."""

    index: dict[str, int]
    width: int


def _layout(path: Path, required: tuple[str, ...], field: str) -> _Layout:
    with path.open("rb") as stream:
        header = split_csv(stream.readline().decode("utf-8", errors="replace"))
    index = {name.strip(): position for position, name in enumerate(header)}
    missing = [name for name in required if name not in index]
    if missing:
        raise InvalidInput(f"{path.name}: the header lacks {', '.join(missing)}", field=field)
    return _Layout(index, len(header))


def _node(fields: list[str], layout: _Layout) -> NodeSpec:
    if len(fields) != layout.width:
        raise RowError(f"expected {layout.width} columns, got {len(fields)}")
    column = layout.index
    gpus = _whole(fields[column["gpu"]], "gpu")
    capacity = Resources(
        cpu=_whole(fields[column["cpu_milli"]], "cpu_milli"),
        memory=_whole(fields[column["memory_mib"]], "memory_mib", _MIB),
        pods=MAX_PODS_PER_NODE,
    )
    if gpus:
        capacity[GPU_RESOURCE] = gpus
        if gpus > MAX_CARDS:
            raise RowError(f"gpu: more than {MAX_CARDS} cards: {gpus}")
    model = fields[column["model"]].strip()
    labels = {}
    if model:
        value = _label_value(model)
        if value is None:
            raise RowError(f"model: not a valid label value: {model[:70]!r}")
        labels[GPU_MODEL_LABEL] = value
    try:
        return NodeSpec(
            name=fields[column["sn"]].strip(),
            capacity=capacity,
            labels=labels,
            gpus=GpuCards(count=gpus, model=model) if gpus else None,
        )
    except ValueError as exc:  # pydantic's ValidationError, e.g. an empty or overlong name
        raise RowError(f"sn: {' '.join(str(exc).split())[:120]}") from None


def _nodes(path: Path, layout: _Layout, report: Report) -> Iterator[TraceEvent]:
    for number, fields in csv_rows(path, report, "reading", header_lines=1):
        try:
            spec = _node(fields, layout)
        except RowError as exc:
            report.bad(path, number, str(exc))
            continue
        yield 0.0, "node-events", spec.name, NodeEvent(type="upsert", node=spec, ts=0.0)


def _pod(fields: list[str], layout: _Layout, created: float) -> PodRequest:
    if len(fields) != layout.width:
        raise RowError(f"expected {layout.width} columns, got {len(fields)}")
    column = layout.index

    def cell(name: str) -> str:
        return fields[column[name]].strip() if name in column else ""

    name = cell("name")
    num_gpu = _whole(cell("num_gpu"), "num_gpu")
    gpu_milli = _whole(cell("gpu_milli"), "gpu_milli")
    if gpu_milli > 1000:
        raise RowError(f"gpu_milli: above 1000: {gpu_milli}")
    requests = Resources(
        cpu=_whole(cell("cpu_milli"), "cpu_milli"), memory=_whole(cell("memory_mib"), "memory_mib", _MIB)
    )
    labels: dict[str, str] = {}
    if num_gpu:
        if gpu_milli == 0 or (num_gpu > 1 and gpu_milli < MILLI_PER_CARD):
            raise RowError(f"gpu_milli: {gpu_milli} with num_gpu {num_gpu}: neither a share nor whole cards")
        if num_gpu > MAX_CARDS:
            raise RowError(f"num_gpu: more than {MAX_CARDS} cards: {num_gpu}")
        if gpu_milli < MILLI_PER_CARD:
            labels["gpu-milli"] = str(gpu_milli)
        else:
            requests[GPU_RESOURCE] = num_gpu
    qos = cell("qos")
    if qos:
        if qos not in _QOS:
            raise RowError(f"qos: expected one of {', '.join(sorted(_QOS))}, got {qos[:40]!r}")
        labels["qos"] = qos
    phase = _label_value(cell("pod_phase"))
    if phase:
        labels["pod-phase"] = phase
    affinity: list[NodeSelectorTerm] = []
    models = [model.strip() for model in cell("gpu_spec").split("|") if model.strip()]
    if models:
        spec_label = _label_value("_".join(models))
        if spec_label is not None:
            labels["gpu-spec"] = spec_label
        if any(_label_value(model) is None for model in models):
            raise RowError(f"gpu_spec: not a list of GPU models: {cell('gpu_spec')[:70]!r}")
        requirement = NodeSelectorRequirement(key=GPU_MODEL_LABEL, operator="In", values=models)
        affinity.append(NodeSelectorTerm(match_expressions=[requirement]))
    gpu = GpuRequest(milli=gpu_milli, count=num_gpu, models=models) if num_gpu else None
    container: dict[str, Resources] = {"requests": requests}
    if qos == "Guaranteed":
        container["limits"] = Resources(requests)
    try:
        return PodRequest(
            uid=name,
            name=name,
            containers=[container],
            labels=labels,
            node_affinity=affinity,
            created_at=created,
            gpu=gpu,
        )
    except ValueError as exc:  # pydantic's ValidationError, e.g. an empty or overlong name
        raise RowError(f"invalid pod: {' '.join(str(exc).split())[:120]}") from None


def _timed_pod_rows(path: Path, layout: _Layout, report: Report) -> Iterator[tuple[float, int, list[str]]]:
    if "creation_time" not in layout.index:
        # An arrival sequence without times: everything at ts 0, in file order.
        for number, fields in csv_rows(path, report, "converting", header_lines=1):
            yield 0.0, number, fields
        return
    time_column = layout.index["creation_time"]
    scan = scan_runs(path, time_column, report, header_lines=1)
    yield from ordered_rows(scan, time_column, report)


def _pods(path: Path, layout: _Layout, report: Report) -> Iterator[TraceEvent]:
    deletion = layout.index.get("deletion_time")
    pending: list[tuple[float, int, str]] = []  # (deletion time, creation order, uid)
    order = 0
    for created, number, fields in _timed_pod_rows(path, layout, report):
        report.rows += 1
        try:
            pod = _pod(fields, layout, created)
            deleted = None
            if deletion is not None and fields[deletion].strip():
                deleted = timestamp(fields[deletion], "deletion_time")
        except RowError as exc:
            report.bad(path, number, str(exc))
            continue
        while pending and pending[0][0] <= created:
            when, _, uid = heapq.heappop(pending)
            yield when, "pod-requests", uid, PodDeleted(uid=uid, ts=when)
        yield created, "pod-requests", pod.uid, pod
        if deleted is not None:
            if deleted > created:
                heapq.heappush(pending, (deleted, order, pod.uid))
                order += 1
            else:
                report.note("deletion not after creation (no PodDeleted)")
    while pending:
        when, _, uid = heapq.heappop(pending)
        yield when, "pod-requests", uid, PodDeleted(uid=uid, ts=when)


def iter_alibaba_gpu2023(
    src: str | Path,
    report: Report,
    *,
    pods: str = DEFAULT_PODS,
    nodes: str | Path | None = None,
) -> Iterator[TraceEvent]:
    """Node upserts, then pod requests and deletions in time order.

    `src` is the trace folder (the pod list is ``openb_pod_list_<pods>.csv``) or a pod list file; `nodes` is
    the node list, by default ``openb_node_list_all_node.csv`` beside the pod list.
    """
    pod_list = pod_list_path(src, pods)
    node_list = Path(nodes) if nodes is not None else pod_list.parent / NODE_LIST
    require_file(node_list, "node list", field="nodes")
    # Headers are checked now, so a wrong file fails before the caller opens its output.
    node_layout = _layout(node_list, _NODE_COLUMNS, "nodes")
    pod_layout = _layout(pod_list, _POD_REQUIRED, "pods")
    return _events(node_list, node_layout, pod_list, pod_layout, report)


def _events(
    node_list: Path, node_layout: _Layout, pod_list: Path, pod_layout: _Layout, report: Report
) -> Iterator[TraceEvent]:
    yield from _nodes(node_list, node_layout, report)
    yield from _pods(pod_list, pod_layout, report)


def convert_alibaba_gpu2023(
    src: str | Path,
    out: str | Path,
    *,
    pods: str = DEFAULT_PODS,
    nodes: str | Path | None = None,
    limit: int | None = None,
    progress: ProgressFn | None = None,
) -> ConversionSummary:
    """Write the GPU cluster's nodes and pods as an event log at `out`; see the module docstring."""
    report = Report(progress)
    events = iter_alibaba_gpu2023(src, report, pods=pods, nodes=nodes)
    return write_log(events, out, report, kind="alibaba-gpu-2023", source=src, limit=limit)
