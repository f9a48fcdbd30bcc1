"""What PodTopologySpread derives from node labels alone, kept across cycles until a node changes.

Which rows carry every topology key of a pod's constraints (nodeLabelsMatchSpreadConstraints), and which
value ids of a key those rows hold (the domains), depend on the nodes only: pods of one deployment ask the
same question thousands of times. `NodeKeys` answers from a per-snapshot cache that the snapshot's
``nodes`` journal (`RowCursor`) clears whenever a node is added, changed or removed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np

from policies.framework.contract import BoolArray, CycleContext
from policies.plugins.podtopologyspread.common import domain_codes, has_all_keys
from policies.snapshot import NODES, RowCursor, Snapshot

__all__ = ["NodeKeys"]

_MAX_ENTRIES = 256
"""Key sets kept at once; past this the cache starts over (pods rarely use more than a few)."""


class NodeKeys:
    """One per snapshot (`of`)."""

    def __init__(self) -> None:
        self._cursor = RowCursor(NODES)
        self._rows: dict[tuple[str, ...], BoolArray] = {}
        self._domains: dict[tuple[tuple[str, ...], str], BoolArray] = {}
        self._other: dict[Hashable, BoolArray] = {}

    @classmethod
    def of(cls, snapshot: Snapshot) -> NodeKeys:
        found = snapshot.extensions.get(cls.__name__)
        if found is None:
            found = snapshot.extensions[cls.__name__] = cls()
        assert isinstance(found, NodeKeys)
        return found

    def _refresh(self, snapshot: Snapshot) -> None:
        stale = self._cursor.stale(snapshot)
        entries = len(self._rows) + len(self._domains) + len(self._other)
        if stale is None or len(stale) or entries > _MAX_ENTRIES:
            self._rows.clear()
            self._domains.clear()
            self._other.clear()

    def rows_with(self, ctx: CycleContext, keys: tuple[str, ...]) -> BoolArray:
        """Live rows (of the first `snapshot.rows`) carrying every one of `keys`. Read it, never write it."""
        snapshot = ctx.snapshot
        self._refresh(snapshot)
        found = self._rows.get(keys)
        if found is None:
            everything = slice(0, snapshot.rows)
            found = self._rows[keys] = snapshot.live[everything] & has_all_keys(ctx, list(keys), everything)
        return found

    def domains(self, ctx: CycleContext, keys: tuple[str, ...], key: str) -> BoolArray:
        """Per value id of `key`: whether a row of `rows_with(keys)` holds it. Read it, never write it."""
        base = self.rows_with(ctx, keys)
        found = self._domains.get((keys, key))
        if found is None:
            codes, size = domain_codes(ctx, key)
            found = np.bincount(codes[np.flatnonzero(base)], minlength=size) > 0
            self._domains[(keys, key)] = found
        return found

    def remember(self, snapshot: Snapshot, key: Hashable, compute: Callable[[], BoolArray]) -> BoolArray:
        """Any other per-row mask computed from the nodes alone (`compute`), kept under `key`."""
        self._refresh(snapshot)
        found = self._other.get(key)
        if found is None:
            found = self._other[key] = compute()
        return found
