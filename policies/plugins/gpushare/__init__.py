"""GPU-sharing plugins over per-card accounting (docs/gpu-sharing.md): the GpuShareFit filter, and scorers
in modules of their own."""

from policies.plugins.gpushare import fit

__all__ = ["fit"]
