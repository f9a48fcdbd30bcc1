"""Hourly resource portraits, Trimaran sliding windows and AssumePodOnNode: pure numpy, no Kafka, so the
streaming agents and offline evaluation feed the same code.

- `portraits.hourly`: `HourlyPortraits`, per key × hour of day × metric, decayed Welford accumulators.
- `portraits.window`: `SlidingWindows`, per key × metric, ring buckets with O(1) update and query.
- `portraits.assume`: `assume_pod_on_node`, a node's portrait with a pod added (and the cold-start rule).
- `portraits.validation`: how bad samples are screened and counted.
"""

from portraits.assume import AssumedPortrait, PodLoad, assume_pod_on_node, node_base, pod_load
from portraits.hourly import DEFAULT_METRICS, DEFAULT_Z, HOURS, HourlyPortraits, Portrait, hour_of_day
from portraits.validation import SampleCounters
from portraits.window import SlidingWindows, WindowStats

__all__ = [
    "DEFAULT_METRICS",
    "DEFAULT_Z",
    "HOURS",
    "AssumedPortrait",
    "HourlyPortraits",
    "PodLoad",
    "Portrait",
    "SampleCounters",
    "SlidingWindows",
    "WindowStats",
    "assume_pod_on_node",
    "hour_of_day",
    "node_base",
    "pod_load",
]
