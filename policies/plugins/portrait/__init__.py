"""Portrait plugins (SPEC 4.5, seed 000): a filter and a score over AssumePodOnNode, the node's hourly
portrait with the pod added."""

from policies.plugins.portrait import balance, fits

__all__ = ["balance", "fits"]
