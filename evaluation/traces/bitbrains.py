"""GWA-T-12 Bitbrains per-VM traces: one CSV per VM, one row every 5 minutes.

Format: ``;`` then a TAB between columns, a header line ``Timestamp [ms]; CPU cores; CPU capacity provisioned
[MHZ]; CPU usage [MHZ]; CPU usage [%]; Memory capacity provisioned [KB]; Memory usage [KB]; Disk read
throughput [KB/s]; Disk write throughput [KB/s]; Network received throughput [KB/s]; Network transmitted
throughput [KB/s]``. Despite the header, timestamps are Unix **seconds**.

Units produced (eyrie's base units):

* ``cpu``: cores in use = CPU usage [MHz] / (CPU capacity provisioned [MHz] / CPU cores), i.e. usage over
  the clock of one provisioned core. A row with 0 cores and 0 MHz provisioned is a VM that was off: 0 cores
  if its usage is 0 too, a bad row otherwise.
* ``memory``: bytes = Memory usage [KB] × 1024.
* ``disk``: throughput in bytes/s = (read + write) [KB/s] × 1024.
* ``bandwidth``: bits/s = (received + transmitted) [KB/s] × 1024 × 8.

Each VM is one workload: `convert_bitbrains` emits pod-level ``MetricSample(node=<--node, default
"bitbrains">, pod=workload="bitbrains-<vm id>")`` on the ``metrics`` topic, keyed by the node. The trace
says nothing of the hosts, hence one synthetic node. VMs are merged by time with ``heapq.merge`` over one
reader per file: constant memory, but one open file per VM (raise ``ulimit -n`` past ~1,000 VMs). A row
whose time goes back within its file is reported as a bad row and dropped, so the merge stays ordered.

`read_vm` loads one VM into numpy arrays for the portrait experiments.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from evaluation.traces.common import (
    ConversionSummary,
    ProgressFn,
    Report,
    RowError,
    TraceEvent,
    iter_lines,
    non_negative,
    timestamp,
    write_log,
)
from schemas.events import MetricSample
from schemas.exceptions import InvalidInput

__all__ = [
    "DEFAULT_NODE",
    "VmSeries",
    "convert_bitbrains",
    "iter_bitbrains",
    "read_vm",
    "vm_files",
]

DEFAULT_NODE = "bitbrains"
"""The node every VM's samples name: the trace does not say which host ran which VM."""

_COLUMNS = 11
_KIB = 1024.0

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class _Row:
    ts: float
    cpu_cores: float
    memory_bytes: float
    disk_bps: float
    bandwidth_bps: float
    provisioned_cores: int
    provisioned_memory_bytes: float


@dataclass(frozen=True)
class VmSeries:
    """One VM's usage over time, in base units (seconds, cores, bytes, bytes/s, bits/s).

    `provisioned_cores` is the largest ``CPU cores`` value seen, `provisioned_memory_bytes` the largest
    ``Memory capacity provisioned [KB]`` × 1024 (both 0 when no row is valid). `bad_rows` lists the
    skipped rows as ``(line number, reason)``, the header being line 1.
    """

    path: Path
    ts: FloatArray
    cpu_cores: FloatArray
    memory_bytes: FloatArray
    disk_bps: FloatArray
    bandwidth_bps: FloatArray
    provisioned_cores: int
    provisioned_memory_bytes: int
    bad_rows: list[tuple[int, str]] = field(default_factory=list)

    @property
    def vm_id(self) -> str:
        return self.path.stem

    def __len__(self) -> int:
        return int(self.ts.size)


def vm_files(directory: str | Path) -> list[Path]:
    """The ``*.csv`` files of `directory` in numeric order (1.csv, 2.csv, …, 10.csv); other names last."""
    folder = Path(directory)
    if not folder.is_dir():
        raise InvalidInput(f"not a directory: {folder}", field="src")
    files = [path for path in folder.glob("*.csv") if path.is_file()]
    return sorted(
        files, key=lambda path: (0, int(path.stem), "") if path.stem.isdigit() else (1, 0, path.name)
    )


def _parse(text: str, previous_ts: float) -> _Row:
    fields = text.split(";")
    if len(fields) != _COLUMNS:
        raise RowError(f"expected {_COLUMNS} columns, got {len(fields)}")
    ts = timestamp(fields[0])
    if ts < previous_ts:
        raise RowError(f"timestamp {fields[0].strip()} goes back from {previous_ts:.0f}")
    cores = non_negative(fields[1], "CPU cores")
    if not cores.is_integer():
        raise RowError(f"CPU cores: not a whole number: {fields[1].strip()!r}")
    capacity_mhz = non_negative(fields[2], "CPU capacity provisioned")
    usage_mhz = non_negative(fields[3], "CPU usage")
    if cores > 0 and capacity_mhz > 0:
        cpu_cores = usage_mhz / (capacity_mhz / cores)
    elif usage_mhz == 0:
        cpu_cores = 0.0  # the VM was off: nothing provisioned, nothing used
    else:
        raise RowError("CPU usage without provisioned cores or capacity")
    memory_capacity_kib = non_negative(fields[5], "Memory capacity provisioned")
    memory_kib = non_negative(fields[6], "Memory usage")
    disk_kibps = non_negative(fields[7], "Disk read throughput") + non_negative(
        fields[8], "Disk write throughput"
    )
    net_kibps = non_negative(fields[9], "Network received throughput") + non_negative(
        fields[10], "Network transmitted throughput"
    )
    row = _Row(
        ts=ts,
        cpu_cores=cpu_cores,
        memory_bytes=memory_kib * _KIB,
        disk_bps=disk_kibps * _KIB,
        bandwidth_bps=net_kibps * _KIB * 8.0,
        provisioned_cores=int(cores),
        provisioned_memory_bytes=memory_capacity_kib * _KIB,
    )
    # Finite cells can still overflow once scaled (1e307 KB); a sample must never carry inf.
    if not all(map(math.isfinite, (row.cpu_cores, row.memory_bytes, row.disk_bps, row.bandwidth_bps))):
        raise RowError("a value overflows once converted to base units")
    if not math.isfinite(row.provisioned_memory_bytes) or cores > 1_000_000:
        raise RowError("provisioned capacity out of range")
    return row


def _vm_rows(
    path: Path, on_bad: Callable[[int, str], None], report: Report | None = None
) -> Iterator[tuple[int, _Row]]:
    """``(line number, row)`` for every valid row; invalid ones go to `on_bad` and are skipped."""
    previous = -math.inf
    for number, _, text in iter_lines(path, report):
        if not text.strip():
            continue
        if number == 1 and text.lstrip().lower().startswith("timestamp"):
            continue
        if report is not None:
            report.rows += 1
        try:
            row = _parse(text, previous)
        except RowError as exc:
            on_bad(number, str(exc))
            continue
        previous = row.ts
        yield number, row


def read_vm(path: str | Path) -> VmSeries:
    """Load one VM's CSV. Bad rows are skipped and listed in `VmSeries.bad_rows`, never raised."""
    source = Path(path)
    if not source.is_file():
        raise InvalidInput(f"no such file: {source}", field="path")
    bad_rows: list[tuple[int, str]] = []
    rows = [row for _, row in _vm_rows(source, lambda line, reason: bad_rows.append((line, reason)))]

    def column(name: str) -> FloatArray:
        return np.fromiter((getattr(row, name) for row in rows), dtype=np.float64, count=len(rows))

    return VmSeries(
        path=source,
        ts=column("ts"),
        cpu_cores=column("cpu_cores"),
        memory_bytes=column("memory_bytes"),
        disk_bps=column("disk_bps"),
        bandwidth_bps=column("bandwidth_bps"),
        provisioned_cores=max((row.provisioned_cores for row in rows), default=0),
        provisioned_memory_bytes=round(max((row.provisioned_memory_bytes for row in rows), default=0.0)),
        bad_rows=bad_rows,
    )


def _source_files(src: Path) -> list[Path]:
    if src.is_dir():
        files = vm_files(src)
        if not files:
            raise InvalidInput(f"no *.csv files in {src}", field="src")
        return files
    if src.is_file():
        return [src]
    raise InvalidInput(f"no such file or directory: {src}", field="src")


def iter_bitbrains(src: str | Path, report: Report, *, node: str = DEFAULT_NODE) -> Iterator[TraceEvent]:
    """Pod-level metric samples of every VM in `src` (a directory of per-VM CSVs, or one CSV), by time.
    Arguments are checked now, before the caller opens its output; rows are read as events are taken."""
    if not node or len(node) > 253:
        raise InvalidInput("must be 1 to 253 characters", field="node")
    return _events(_source_files(Path(src)), report, node)


def _events(files: list[Path], report: Report, node: str) -> Iterator[TraceEvent]:
    report.phase("converting", sum(path.stat().st_size for path in files))

    def rows_of(order: int, path: Path) -> Iterator[tuple[float, int, int, _Row]]:
        for number, row in _vm_rows(path, lambda line, reason: report.bad(path, line, reason), report):
            yield row.ts, order, number, row

    names = [f"bitbrains-{path.stem}" for path in files]
    # (ts, file order, line) is unique, so the merge never compares two _Row objects; ties go in file order.
    for ts, order, _, row in heapq.merge(*(rows_of(order, path) for order, path in enumerate(files))):
        sample = MetricSample(
            ts=ts,
            node=node,
            pod=names[order],
            workload=names[order],
            values={
                "cpu": row.cpu_cores,
                "memory": row.memory_bytes,
                "disk": row.disk_bps,
                "bandwidth": row.bandwidth_bps,
            },
        )
        yield ts, "metrics", node, sample


def convert_bitbrains(
    src: str | Path,
    out: str | Path,
    *,
    node: str = DEFAULT_NODE,
    limit: int | None = None,
    progress: ProgressFn | None = None,
) -> ConversionSummary:
    """Write the VMs of `src` as an event log at `out`; see the module docstring for units."""
    report = Report(progress)
    events = iter_bitbrains(src, report, node=node)
    return write_log(events, out, report, kind="bitbrains", source=src, limit=limit)
