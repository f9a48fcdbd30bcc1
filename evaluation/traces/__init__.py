"""Trace adapters: public cluster traces → eyrie's recorded event log (docs/event-log.md).

Each kind has an ``iter_*`` generator of ``(ts, topic, key, model)`` events in time order (for callers that
consume events in process) and a ``convert_*`` function that writes them with
`schemas.eventlog.EventLogWriter` and returns a `ConversionSummary`. `CONVERTERS` maps the kind names of
``eyrie trace convert KIND`` to the ``convert_*`` functions; every one takes ``(src, out, *, limit=None,
progress=None, **kind options)``.

Kinds (units and mapping decisions are in each module's docstring):

* ``bitbrains``: GWA-T-12 per-VM CSVs → pod-level metric samples (`evaluation.traces.bitbrains`, which also
  offers `read_vm` for numpy-based analysis).
* ``alibaba-2018``: cluster-trace-v2018 machine_meta + machine_usage → node upserts and node-level samples.
* ``alibaba-gpu-2023``: the openb GPU cluster → node upserts, pod requests and deletions.

Bad rows never stop a conversion: they are counted and the first ones kept with file name, line and reason.
"""

from __future__ import annotations

from collections.abc import Callable

from evaluation.traces.alibaba2018 import convert_alibaba2018, iter_alibaba2018
from evaluation.traces.alibaba_gpu2023 import convert_alibaba_gpu2023, iter_alibaba_gpu2023
from evaluation.traces.bitbrains import VmSeries, convert_bitbrains, iter_bitbrains, read_vm, vm_files
from evaluation.traces.common import BadRow, ConversionSummary, ProgressFn, Report, TraceEvent

__all__ = [
    "CONVERTERS",
    "BadRow",
    "ConversionSummary",
    "ProgressFn",
    "Report",
    "TraceEvent",
    "VmSeries",
    "convert_alibaba2018",
    "convert_alibaba_gpu2023",
    "convert_bitbrains",
    "iter_alibaba2018",
    "iter_alibaba_gpu2023",
    "iter_bitbrains",
    "read_vm",
    "vm_files",
]

CONVERTERS: dict[str, Callable[..., ConversionSummary]] = {
    "bitbrains": convert_bitbrains,
    "alibaba-2018": convert_alibaba2018,
    "alibaba-gpu-2023": convert_alibaba_gpu2023,
}
"""Kind name → converter ``(src, out, *, limit=None, progress=None, **options) -> ConversionSummary``."""
