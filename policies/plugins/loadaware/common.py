"""Arithmetic the load-aware and portrait plugins share."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from policies.framework.contract import BoolArray, IntArray

Check = tuple[str, BoolArray]
"""A filter's reason and, per row, whether the row fails for it."""

__all__ = ["Check", "min_max", "passing", "rejections", "round_half_away"]


def round_half_away(values: npt.ArrayLike) -> IntArray:
    """Go's math.Round (half away from zero), exactly: x − ⌊x⌋ is exact in floating point, where ⌊x + 0.5⌋
    is not (0.49999999999999994 + 0.5 rounds to 1.0)."""
    x = np.asarray(values, dtype=np.float64)
    magnitude = np.abs(x)
    whole = np.floor(magnitude)
    rounded = whole + (magnitude - whole >= 0.5)
    result: IntArray = (np.sign(x) * rounded).astype(np.int64)
    return result


def min_max(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Min-max normalisation to [0, 1]; all equal (or a single value) → 1 everywhere."""
    if len(values) == 0:
        return values
    low, high = float(values.min()), float(values.max())
    if high - low <= 1e-12 * max(1.0, abs(high)):
        return np.ones_like(values)
    result: npt.NDArray[np.float64] = (values - low) / (high - low)
    return result


def passing(checks: list[Check]) -> BoolArray | None:
    """True where a row fails none of the checks; None (all pass) when there are no checks."""
    if not checks:
        return None
    failed = checks[0][1].copy()
    for _, more in checks[1:]:
        failed |= more
    result: BoolArray = ~failed
    return result


def rejections(checks: list[Check], count: int) -> list[list[str]]:
    """Per row, the reasons of the checks it fails."""
    return [[reason for reason, failed in checks if failed[i]] for i in range(count)]
