"""Alibaba cluster-trace-v2018 machines: ``machine_meta.csv`` and ``machine_usage.csv`` (no headers).

* ``machine_meta``: ``machine_id, time_stamp, failure_domain_1, failure_domain_2, cpu_num, mem_size, status``.
* ``machine_usage``: ``machine_id, time_stamp, cpu_util_percent, mem_util_percent, mem_gps, mkpi, net_in,
  net_out, disk_io_percent``; times are seconds from the trace start.

Output, all keyed by the machine id:

* one ``node-events`` upsert per machine that appears in machine_usage, at the time of its first sample and
  before it. The spec comes from the machine's latest machine_meta row (largest time_stamp, later line on
  ties): cpu = ``cpu_num`` cores; memory = ``mem_size`` / 100 × `memory_full_scale` bytes, because the trace
  normalises memory to 0–100 and never says what 100 is. The default 512 GiB is an assumption (a 96-core
  server of that generation), not a published figure; change it with ``--memory-full-scale``. Failure
  domains become the labels ``alibaba.com/failure-domain-1`` and ``-2``. A machine whose latest status is
  not ``USING`` (e.g. ``IMPORT_INSTALLING``) is still upserted, with ``unschedulable: true``, so its
  samples still describe a known node but nothing is placed on it.
* node-level ``metrics`` samples (no pod): cpu = cpu_util_percent / 100 × cpu_num cores, memory =
  mem_util_percent / 100 × the node's memory bytes; ``bandwidth`` = (net_in + net_out) / 100 ×
  `bandwidth_full_scale` bits/s, only when both are valid (the trace writes -1 or 101 for invalid, and
  normalises both to 0–100 of an unpublished line rate; default 10 Gbit/s per direction); and
  ``disk_io_percent`` as given (0–100), only when valid. Disk I/O has no absolute scale, so it keeps its own
  metric name instead of posing as ``disk`` bytes/s.

A cpu or memory percentage outside 0–100, a wrong column count, a bad number or time makes a bad row; so does
a sample of a machine that machine_meta does not list (there is no capacity to scale it by).

Ordering: machine_usage is not sorted by time; the upstream file is one time-sorted block per machine. A
first pass finds the sorted runs (and collects the set of machine ids, the only index kept besides the
latest meta row of those machines); the second pass merges the runs with one reader each. A file with more
than `~evaluation.traces.common.MAX_MERGE_RUNS` runs is ordered by an in-memory sort of (time, offset, line)
triples instead (24 bytes a row). See `evaluation.traces.common.ordered_rows`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
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
    timestamp,
    write_log,
)
from schemas.events import MetricSample
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent, NodeSpec
from schemas.quantity import Resources, parse_quantity

__all__ = [
    "DEFAULT_BANDWIDTH_FULL_SCALE",
    "DEFAULT_MEMORY_FULL_SCALE",
    "convert_alibaba2018",
    "iter_alibaba2018",
]

DEFAULT_MEMORY_FULL_SCALE = "512Gi"
"""Bytes that ``mem_size = 100`` stands for (assumed; the trace publishes only normalised sizes)."""

DEFAULT_BANDWIDTH_FULL_SCALE = "10G"
"""Bits/s that ``net_in = 100`` (or ``net_out = 100``) stands for (assumed 10 GbE)."""

META_FILE = "machine_meta.csv"
USAGE_FILE = "machine_usage.csv"

_META_COLUMNS = 7
_USAGE_COLUMNS = 9
_TIME = 1


@dataclass(frozen=True, slots=True)
class _Machine:
    time: float
    line: int
    spec: NodeSpec


def _percent(text: str, what: str) -> float:
    value = non_negative(text, what)
    if value > 100:
        raise RowError(f"{what}: above 100: {text.strip()!r}")
    return value


def _valid_percent(text: str) -> float | None:
    """A 0–100 value, or None for the trace's invalid markers (-1, 101), an empty or a garbled cell."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0.0 <= value <= 100.0 else None


def _machine(fields: list[str], memory_full_scale: int) -> tuple[float, NodeSpec]:
    if len(fields) != _META_COLUMNS:
        raise RowError(f"expected {_META_COLUMNS} columns, got {len(fields)}")
    machine_id, _, domain_1, domain_2, _, _, status = (text.strip() for text in fields)
    when = timestamp(fields[_TIME], "time_stamp")
    cpu_num = non_negative(fields[4], "cpu_num")
    if not cpu_num.is_integer() or not 0 < cpu_num <= 1_000_000:
        raise RowError(f"cpu_num: not a whole number from 1 to 1000000: {fields[4].strip()!r}")
    mem_size = non_negative(fields[5], "mem_size")
    if mem_size == 0 or mem_size > 100:
        raise RowError(f"mem_size: not in (0, 100]: {fields[5].strip()!r}")
    labels = {
        f"alibaba.com/failure-domain-{index}": value
        for index, value in ((1, domain_1), (2, domain_2))
        if value and len(value) <= 63
    }
    try:
        spec = NodeSpec(
            name=machine_id,
            capacity=Resources(
                cpu=int(cpu_num) * 1000,
                memory=round(Fraction(repr(mem_size)) * memory_full_scale / 100),
            ),
            labels=labels,
            unschedulable=status != "USING",
        )
    except ValueError as exc:  # pydantic's ValidationError is a ValueError: a bad machine id
        raise RowError(f"machine_id: {' '.join(str(exc).split())[:120]}") from None
    return when, spec


def _read_meta(path: Path, wanted: set[str], memory_full_scale: int, report: Report) -> dict[str, _Machine]:
    """The latest row of each wanted machine; rows of other machines are not even parsed."""
    machines: dict[str, _Machine] = {}
    for number, fields in csv_rows(path, report, "reading"):
        if fields[0].strip() not in wanted:
            continue
        try:
            when, spec = _machine(fields, memory_full_scale)
        except RowError as exc:
            report.bad(path, number, str(exc))
            continue
        known = machines.get(spec.name)
        if known is None or when >= known.time:
            machines[spec.name] = _Machine(when, number, spec)
    return machines


def _files(src: Path) -> tuple[Path, Path]:
    if src.is_dir():
        return require_file(src / META_FILE, META_FILE), require_file(src / USAGE_FILE, USAGE_FILE)
    if src.is_file():
        # A usage file given directly: its machine_meta.csv must sit beside it.
        return require_file(src.parent / META_FILE, META_FILE), src
    raise InvalidInput(f"no such file or directory: {src}", field="src")


def iter_alibaba2018(
    src: str | Path,
    report: Report,
    *,
    memory_full_scale: str | int = DEFAULT_MEMORY_FULL_SCALE,
    bandwidth_full_scale: str | int = DEFAULT_BANDWIDTH_FULL_SCALE,
) -> Iterator[TraceEvent]:
    """Node events and node-level samples of `src` (the folder of both files, or machine_usage.csv)."""
    memory_scale = parse_quantity(memory_full_scale, "memory", field="memory_full_scale")
    bandwidth_scale = parse_quantity(bandwidth_full_scale, "bandwidth", field="bandwidth_full_scale")
    if memory_scale == 0:
        raise InvalidInput("must be more than 0", field="memory_full_scale")
    if bandwidth_scale == 0:
        raise InvalidInput("must be more than 0", field="bandwidth_full_scale")
    meta, usage = _files(Path(src))
    return _events(meta, usage, report, memory_scale, float(bandwidth_scale))


def _events(
    meta: Path, usage: Path, report: Report, memory_scale: int, bandwidth_scale: float
) -> Iterator[TraceEvent]:
    used: set[str] = set()
    scan = scan_runs(usage, _TIME, report, observe=lambda fields: used.add(fields[0].strip()))
    machines = _read_meta(meta, used, memory_scale, report)
    announced: set[str] = set()
    for ts, number, fields in ordered_rows(scan, _TIME, report):
        report.rows += 1
        try:
            if len(fields) != _USAGE_COLUMNS:
                raise RowError(f"expected {_USAGE_COLUMNS} columns, got {len(fields)}")
            machine_id = fields[0].strip()
            machine = machines.get(machine_id)
            if machine is None:
                raise RowError(f"machine {machine_id!r} has no valid row in {META_FILE}")
            cpu = _percent(fields[2], "cpu_util_percent")
            memory = _percent(fields[3], "mem_util_percent")
        except RowError as exc:
            report.bad(usage, number, str(exc))
            continue
        spec = machine.spec
        values = {
            "cpu": cpu / 100.0 * spec.capacity["cpu"] / 1000.0,
            "memory": memory / 100.0 * spec.capacity["memory"],
        }
        net_in, net_out = _valid_percent(fields[6]), _valid_percent(fields[7])
        if net_in is not None and net_out is not None:
            values["bandwidth"] = (net_in + net_out) / 100.0 * bandwidth_scale
        else:
            report.note("samples without valid net_in/net_out")
        disk = _valid_percent(fields[8])
        if disk is not None:
            values["disk_io_percent"] = disk
        else:
            report.note("samples without valid disk_io_percent")
        if machine_id not in announced:
            # The merge yields each machine's earliest sample first, so this is its first usage time.
            announced.add(machine_id)
            yield ts, "node-events", machine_id, NodeEvent(type="upsert", node=spec, ts=ts)
        yield ts, "metrics", machine_id, MetricSample(ts=ts, node=machine_id, values=values)


def convert_alibaba2018(
    src: str | Path,
    out: str | Path,
    *,
    memory_full_scale: str | int = DEFAULT_MEMORY_FULL_SCALE,
    bandwidth_full_scale: str | int = DEFAULT_BANDWIDTH_FULL_SCALE,
    limit: int | None = None,
    progress: ProgressFn | None = None,
) -> ConversionSummary:
    """Write `src`'s machines as an event log at `out`; see the module docstring for units and ordering."""
    report = Report(progress)
    events = iter_alibaba2018(
        src, report, memory_full_scale=memory_full_scale, bandwidth_full_scale=bandwidth_full_scale
    )
    return write_log(events, out, report, kind="alibaba-2018", source=src, limit=limit)
