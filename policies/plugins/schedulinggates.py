"""SchedulingGates: a pod with scheduling gates waits outside the queue until a version of it comes with
none (kube-scheduler's PreEnqueue). It is never tried, so it never takes a node, a backoff or a place in
the queue's order before its gates are lifted; once they are, it is queued as any new pod."""

from __future__ import annotations

from policies.framework.status import SUCCESS, Status
from schemas.pod import PodRequest

__all__ = ["NAME", "REASON", "SchedulingGates", "new"]

NAME = "SchedulingGates"
REASON = "waiting for scheduling gates"
"""kube-scheduler's message lists the gates after this: ``waiting for scheduling gates: [a b]``."""


class SchedulingGates:
    name = NAME

    def pre_enqueue(self, pod: PodRequest) -> Status:
        if not pod.scheduling_gates:
            return SUCCESS
        # Unresolvable by the cluster: only an update of the pod lifts a gate.
        gates = " ".join(pod.scheduling_gates)
        return Status.unschedulable(f"{REASON}: [{gates}]", plugin=NAME, resolvable=False)


def new(args: None, handle: object) -> SchedulingGates:
    return SchedulingGates()
