"""Load-aware plugins: scheduler-plugins' Trimaran (TargetLoadPacking, LoadVariationRiskBalancing)
and eyrie's measured-load checks (LoadThresholds, PeakReference, GlobalVarianceMin). They read the
snapshot's `usage` (windows, portraits, pods placed since) and degrade to the minimum score, or let a node
pass, where a node has no data."""

from policies.plugins.loadaware import (
    globalvariance,
    loadthresholds,
    loadvariation,
    peakreference,
    targetloadpacking,
)

__all__ = ["globalvariance", "loadthresholds", "loadvariation", "peakreference", "targetloadpacking"]
