"""Select: the node a cycle's totals choose, the one rule the scheduler's cycle and the batch trials share."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

import numpy as np

from policies.framework.contract import IntArray

if TYPE_CHECKING:
    from policies.snapshot import Snapshot

__all__ = ["select"]


def select(snapshot: Snapshot, nodes: IntArray, total: IntArray, uid: str, tie_break: str) -> int:
    """The position in `nodes` of the highest total. Ties go to the lowest node name (`tie_break` "name"),
    or to a choice among the tied nodes in name order seeded with the pod's uid, so a replay picks the
    same."""
    tied = np.flatnonzero(total == total.max())
    if len(tied) == 1:
        return int(tied[0])
    ranks = snapshot.name_rank()[nodes[tied]]  # live nodes' names are distinct
    if tie_break == "name":
        return int(tied[np.argmin(ranks)])
    by_name = tied[np.argsort(ranks)]
    return int(by_name[zlib.crc32(uid.encode()) % len(by_name)])
