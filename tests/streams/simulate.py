"""A placement shard and an applier's ledger run together in process, as the live pipeline runs them, and
the log `eyrie record` would write of what the shard applied: shared by the record and PodBound tests."""

from __future__ import annotations

import math
from collections import deque
from pathlib import Path

from schemas.eventlog import EventLogWriter
from schemas.events import Binding, BindingResult
from streams.client import DELETED_BY_OWNER, RELEASED, Deletion, latest_decisions
from streams.core.ledger import Ledger
from streams.core.sequencer import Envelope, Kind
from streams.core.shard import Counted, Release, Shard
from streams.recording.record import Admissions, placement_line

__all__ = ["simulated_live_run", "write_placement_log"]


def write_placement_log(path: Path, partitions: dict[int, list[Envelope]]) -> Path:
    """What `eyrie record` writes for these sequencer partitions."""
    with EventLogWriter(path) as writer:
        for partition, envelopes in partitions.items():
            admissions = Admissions()
            for envelope in envelopes:
                admissions.feed(envelope)
                for ts, applied in admissions.take():
                    line = placement_line(applied)
                    if line is not None:
                        writer.write(ts, *line, shard=partition)
    return path


def simulated_live_run(script: list[Envelope]) -> tuple[list[Envelope], dict[str, tuple[str | None, str]]]:
    """A shard and an applier's ledger as the pipeline runs them (each binding's result reaches the
    sequencer one input later, pods bound elsewhere are booked by the ledger as placement passes them on).
    Returns what the sequencer carried and each pod's live decision."""
    shard, ledger = Shard(), Ledger({}, {})
    carried: list[Envelope] = []
    on_the_way: deque[Envelope] = deque()
    bindings: dict[str, Binding] = {}
    results: dict[str, BindingResult] = {}
    deletions: dict[str, Deletion] = {}

    def feed(envelope: Envelope) -> None:
        carried.append(envelope)
        if envelope.kind is Kind.NODE:
            ledger.apply_node_event(envelope.value, envelope.ts)
        if envelope.kind is Kind.DELETE:
            deletions[envelope.value.uid] = Deletion(envelope.value.ts, DELETED_BY_OWNER, math.inf)
        for output in shard.feed(envelope):
            if isinstance(output, Binding):
                bindings[output.uid] = output
                result = ledger.apply(output, output.decided_at + 0.5)
                results[output.uid] = result
                on_the_way.append(Envelope(Kind.RESULT, result.at, result, "bindings/0"))
            elif isinstance(output, BindingResult):
                results[output.uid] = output
            elif isinstance(output, Counted):
                ledger.book(output.bound, output.bound.ts)
            elif isinstance(output, Release):
                ledger.delete(output.deleted.uid, output.deleted.ts)
                known = bindings.get(output.deleted.uid)
                if output.deleted.uid not in deletions and known is not None:
                    deletions[output.deleted.uid] = Deletion(output.deleted.ts, RELEASED, known.attempt)

    for envelope in script:
        feed(envelope)
        if on_the_way:
            feed(on_the_way.popleft())
    while on_the_way:
        feed(on_the_way.popleft())
    decisions = latest_decisions(bindings, results, deletions)
    return carried, {d.uid: (d.node, d.status) for d in decisions}
