"""Select: the node a cycle's totals choose, the one rule the scheduler's cycle and the batch trials share."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from policies.framework.contract import IntArray

if TYPE_CHECKING:
    from policies.snapshot import Snapshot

__all__ = ["select"]


def select(
    snapshot: Snapshot, nodes: IntArray | None, total: npt.NDArray[np.integer[Any]], uid: str, tie_break: str
) -> int:
    """The position in `nodes` (None: every row, `total` per row) of the highest total. Ties go to the
    lowest node name (`tie_break` "name"), or to a choice among the tied nodes in name order seeded with the
    pod's uid, so a replay picks the same."""
    tied = (total == total.max()).nonzero()[0]  # `flatnonzero` without its Python frame: a 1-d array
    if len(tied) == 1:
        return int(tied[0])
    ranks = snapshot.name_rank()[tied if nodes is None else nodes[tied]]  # live nodes' names are distinct
    if tie_break == "name":
        return int(tied[np.argmin(ranks)])
    by_name = tied[np.argsort(ranks)]
    return int(by_name[zlib.crc32(uid.encode()) % len(by_name)])
