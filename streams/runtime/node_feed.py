"""The applier's view of node-events: which records its ledger has taken, and the read that brings the
ledger level with the topic before it answers a conflict.

Placement learns of a node from its sequencer, the applier from its own node-events agent, and nothing
orders that agent against the one reading bindings: a binding can come before the event of the node it
names (at a start, when both topics wait to be read, or while the node-events agent's batch is still
filling). Answered at once, it is a conflict no offline replay has, and the pod goes elsewhere. The node
event a binding was decided on was on node-events before placement read it, so before the binding was
written, so before end offsets asked for after the binding was read: reading node-events up to those
offsets gives the ledger every node the binding could name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from schemas.node import NodeEvent
from streams.core.decoders import decode_record
from streams.runtime.checkpoint_slots import read_range
from streams.runtime.security import client_security
from streams.settings import Settings

__all__ = ["READ_TIMEOUT_S", "NodeFeed"]

READ_TIMEOUT_S = 30.0
"""The longest a catch-up reads: past it, the binding is answered as the ledger stands (a conflict)."""


class NodeFeed:
    """Per node-events partition, the offset after the last record the ledger took since the partition was
    assigned here, whether the node-events agent took it (`take`) or a read ahead of it (`catch_up`)."""

    def __init__(self, settings: Settings, group: str, apply: Callable[[NodeEvent], None]) -> None:
        self._settings = settings
        self._group = group
        self._apply = apply
        self._next: dict[int, int] = {}

    def assigned(self) -> None:
        """A rebalance: the agent starts again from the committed offsets."""
        self._next.clear()

    def take(self, partition: int, offset: int) -> bool:
        """Whether the agent is to apply this record: False if a catch-up applied it already."""
        if offset < self._next.get(partition, 0):
            return False
        self._next[partition] = offset + 1
        return True

    async def catch_up(self, ends: Mapping[int, int]) -> int:
        """Apply, in order, the records of node-events before `ends` (per partition owned here, end offsets
        asked for after the binding in question was read) that the ledger has not taken: from the agent's
        next offset, or the group's committed one when the agent has taken none since the assignment.
        Returns how many node events that applied. Reads nothing when the ledger is level."""
        settings = self._settings
        topic = settings.topic("node-events")
        starts: dict[int, int | None] = {p: self._next[p] for p in ends if p in self._next}
        unknown = [p for p in ends if p not in starts]
        if unknown:
            starts.update(await self._committed(unknown))
        behind = sorted(p for p, end in ends.items() if (starts[p] or 0) < end)
        records = []
        for p in behind:
            tp = TopicPartition(topic, p)
            records += await read_range(settings, tp, starts[p], ends[p], READ_TIMEOUT_S)
        applied = 0
        for record in records:
            if not self.take(record.partition, record.offset):
                continue  # the agent took it while this read
            decoded = decode_record(
                "node-events", record.partition, record.offset, record.key, record.value, full_topic=topic
            )
            # A record that does not decode is dead-lettered by the workers' forwarder, as the agent has it.
            if isinstance(decoded.value, NodeEvent):
                self._apply(decoded.value)
                applied += 1
        for p, end in ends.items():
            self._next[p] = max(self._next.get(p, 0), end)
        return applied

    async def _committed(self, partitions: list[int]) -> dict[int, int | None]:
        topic = self._settings.topic("node-events")
        tps = [TopicPartition(topic, p) for p in partitions]
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self._settings.bootstrap_servers, **client_security(self._settings)
        )
        await admin.start()
        try:
            offsets = await admin.list_consumer_group_offsets(self._group, partitions=tps)
        finally:
            await admin.close()
        committed: dict[int, int | None] = {}
        for tp in tps:
            found = offsets.get(tp)
            committed[tp.partition] = found.offset if found is not None and found.offset >= 0 else None
        return committed
