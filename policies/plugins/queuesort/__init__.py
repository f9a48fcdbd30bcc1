"""Queue orders: PrioritySort (kube-scheduler's default), QOSSort and GpuDemandSort."""

from policies.plugins.queuesort import gpudemand, priority, qos

__all__ = ["gpudemand", "priority", "qos"]
