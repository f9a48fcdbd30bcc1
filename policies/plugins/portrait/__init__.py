"""Portrait plugins: a filter and a score over AssumePodOnNode, the node's hourly
portrait with the pod added."""

from policies.plugins.portrait import balance, fits

__all__ = ["balance", "fits"]
