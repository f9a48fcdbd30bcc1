"""GpuDotProduct: the FGD simulator's ``DotProductScore`` (Tetris' alignment) as its experiments configure it.

With ``dimExtMethod: merge`` and ``normMethod: max``: node = (cpu left / 128,000, free GPU milli summed over
cards / 8,000), pod = (cpu / 128,000, milli × cards / 8,000); score = int(100 × (1 − node · pod / 2)), so
the node whose free resources align least with the pod scores most (it is packed). A node with less cpu
left than the pod asks scores 0. Cards: the default best-fit rule (the experiments' ``gpuSelMethod: best``).
"""

from __future__ import annotations

import numpy as np

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray
from policies.plugins.gpushare.common import MAX_SPEC_CPU, MAX_SPEC_GPU, cpu_left, gpu_left

__all__ = ["NAME", "GpuDotProduct", "new"]

NAME = "GpuDotProduct"


class GpuDotProduct:
    name = NAME

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        gpu = ctx.pod.gpu
        request_gpu = 0.0 if gpu is None else float(gpu.total_milli)
        left_cpu = cpu_left(ctx, nodes)
        cpu = ctx.info.nonzero_cpu
        node_cpu = left_cpu.astype(np.float64) / float(MAX_SPEC_CPU)
        node_gpu = gpu_left(ctx, nodes).astype(np.float64) / float(MAX_SPEC_GPU)
        pod_cpu = float(cpu) / float(MAX_SPEC_CPU)
        pod_gpu = request_gpu / float(MAX_SPEC_GPU)
        product = node_cpu * pod_cpu
        product = product + node_gpu * pod_gpu
        score = 1.0 - product / 2.0
        result: IntArray = (float(MAX_NODE_SCORE) * score).astype(np.int64)
        return np.where(left_cpu < cpu, 0, result)


def new(args: None, handle: object) -> GpuDotProduct:
    return GpuDotProduct()
