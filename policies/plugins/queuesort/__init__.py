"""Queue orders: PrioritySort (kube-scheduler's default) and QOSSort."""

from policies.plugins.queuesort import priority, qos

__all__ = ["priority", "qos"]
