"""The fault table: one row per fault case, printed once at the end of the session."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ROWS", "FaultRow", "record_row", "render"]


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


ROWS: list[FaultRow] = []


def record_row(row: FaultRow) -> None:
    ROWS.append(row)


def render(rows: list[FaultRow]) -> str:
    head = "| fault | pods | lost | duplicated | over-committed nodes | recovery s | unlike offline |"
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r.fault} | {r.pods:,} | {r.lost} | {r.duplicated} | {r.overcommitted} | {r.recovery_s:.1f} "
            f"| {r.differing} |"
        )
    return "\n".join(lines)
