"""The result every plugin hands back: a code and, for rejections, the reasons a user will read."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

__all__ = ["Code", "Status"]


class Code(Enum):
    SUCCESS = "success"
    UNSCHEDULABLE = "unschedulable"
    """The pod does not fit now; a change in the cluster may help (it is retried with backoff)."""
    UNSCHEDULABLE_AND_UNRESOLVABLE = "unschedulable_and_unresolvable"
    """No preemption can help (e.g. a node selector no node matches)."""
    ERROR = "error"
    WAIT = "wait"
    """Permit: hold the pod's reservation until the rest of its group arrives or the timeout passes."""
    SKIP = "skip"
    """PreFilter/PreScore: this plugin has nothing to say about the pod; its later stages are skipped."""


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str | None = field(default=None, compare=False)
    retry_at: float | None = field(default=None, compare=False)
    """For a rejection that time alone lifts (a backoff): when to try again, cluster change or not."""

    @property
    def ok(self) -> bool:
        return self.code in (Code.SUCCESS, Code.SKIP)

    @classmethod
    def unschedulable(
        cls, *reasons: str, plugin: str | None = None, resolvable: bool = True, retry_at: float | None = None
    ) -> Status:
        code = Code.UNSCHEDULABLE if resolvable else Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        return cls(code, reasons, plugin, retry_at)

    @classmethod
    def error(cls, reason: str, *, plugin: str | None = None) -> Status:
        return cls(Code.ERROR, (reason,), plugin)

    @classmethod
    def wait(cls, reason: str = "waiting", *, plugin: str | None = None) -> Status:
        return cls(Code.WAIT, (reason,), plugin)


SUCCESS = Status()
SKIP = Status(Code.SKIP)
