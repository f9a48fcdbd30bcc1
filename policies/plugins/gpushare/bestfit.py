"""GpuBestFit: the FGD simulator's ``BestFitScore`` — the node left with least cpu and GPU, normalised.

Raw score (``getBestFitScore``): int((1 − Σ_i w_i (free_i − request_i) / max_i) × 100) over i = cpu
(millicores left, max 128,000) and GPU (free milli summed over the cards, max 8,000), w = ½ each; then the
simulator's ``NormalizeScore`` maps the candidates' lowest..highest to 0..100 (all 0 when they are equal).
Cards: the default best-fit rule, as the simulator's experiments run it.
"""

from __future__ import annotations

import numpy as np

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray
from policies.plugins.gpushare.common import MAX_SPEC_CPU, MAX_SPEC_GPU, cpu_left, gpu_left

__all__ = ["NAME", "GpuBestFit", "min_max_normalize", "new"]

NAME = "GpuBestFit"


def min_max_normalize(scores: IntArray) -> IntArray:
    """The simulator's ``NormalizeScore``: (s − lowest) × 100 / (highest − lowest), integer; all 0 when the
    scores are equal."""
    if len(scores) == 0:
        return scores
    lowest, highest = int(scores.min()), int(scores.max())
    if highest == lowest:
        return np.zeros(len(scores), dtype=np.int64)
    normalized: IntArray = (scores - lowest) * MAX_NODE_SCORE // (highest - lowest)
    return normalized


class GpuBestFit:
    name = NAME

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        gpu = ctx.pod.gpu
        request_gpu = 0 if gpu is None else gpu.total_milli
        free_cpu = cpu_left(ctx, nodes).astype(np.float64)
        free_gpu = gpu_left(ctx, nodes).astype(np.float64)
        cpu = float(ctx.info.nonzero_cpu)
        # Go adds term by term: ((free − req) / max) × w, cpu first.
        total = (free_cpu - cpu) / float(MAX_SPEC_CPU) * 0.5
        total = total + (free_gpu - float(request_gpu)) / float(MAX_SPEC_GPU) * 0.5
        raw = ((1.0 - total) * float(MAX_NODE_SCORE)).astype(np.int64)
        # A node without room is an error upstream (MinNodeScore); filters keep such nodes out.
        short = (free_cpu < cpu) | (free_gpu < request_gpu)
        raw = np.where(short, 0, raw)
        return min_max_normalize(raw)


def new(args: None, handle: object) -> GpuBestFit:
    return GpuBestFit()
