"""The fault table: one row per fault case, printed once at the end of the session."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ROWS", "FaultRow", "checkpoint_settings", "record_row", "render"]


@dataclass(frozen=True, slots=True)
class FaultRow:
    fault: str
    pods: int
    lost: int
    duplicated: int
    overcommitted: int
    recovery_s: float
    differing: int
    """Pods whose node differs from the clean offline replay."""
    rebuild_s: float = 0.0
    """The longest a worker took to rebuild the shard it took over (its log's "shard N rebuilt" lines)."""
    sequencer_bytes: int = 0
    """The sequencer's bytes on the broker's disk at the end (what the next takeover reads)."""
    checkpoints: str = "off"
    """When the worker checkpointed its shard (`checkpoint_settings`), "off" without checkpoints."""


ROWS: list[FaultRow] = []


def checkpoint_settings(every_records: int, every_s: float) -> str:
    """The checkpoint column: what triggers a shard's checkpoints ("off": neither)."""
    triggers = [f"{every_records:,} records"] if every_records else []
    triggers += [f"{every_s:g} s"] if every_s else []
    return " / ".join(triggers) or "off"


def record_row(row: FaultRow) -> None:
    ROWS.append(row)


def render(rows: list[FaultRow]) -> str:
    head = (
        "| fault | checkpoints | pods | lost | duplicated | over-committed nodes | recovery s "
        "| shard rebuild s | sequencer MB | unlike offline |"
    )
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r.fault} | {r.checkpoints} | {r.pods:,} | {r.lost} | {r.duplicated} | {r.overcommitted} "
            f"| {r.recovery_s:.1f} "
            f"| {r.rebuild_s:.1f} | {r.sequencer_bytes / 1e6:.1f} | {r.differing} |"
        )
    return "\n".join(lines)
