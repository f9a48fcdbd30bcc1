"""NodeResourcesFit and NodeResourcesBalancedAllocation, with kube-scheduler's exact integer arithmetic."""

from policies.plugins.noderesources import balanced, fit

__all__ = ["balanced", "fit"]
