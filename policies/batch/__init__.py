"""Batch placement: the TBESK model, BES and TBESK, sequential baselines. Pure numpy.

*The paper* throughout is Geng and Wang, "Improved Bald Eagle Search Algorithm for Kubernetes
Resource Scheduling Application", Computer Systems & Applications 32(4), 2023.

- `policies.batch.model`: resources, pod classes, node score S_N, batch fitness (whole populations at once),
  utilisation and Z_avg.
- `policies.batch.bes`: BES and TBESK over the centred one-dimension-per-pod encoding, and the repair that
  keeps every returned assignment within capacity.
- `policies.batch.greedy`: LRA and BRA (the paper's eq. 1 and 2), S_N one by one, and the Z reference
  (greedy on Z + single-pod-move local search).
- `policies.batch.windows`: a long batch as consecutive windows, each optimised on what the earlier ones
  filled (the batch mode's ``batch_size``).
- `policies.batch.config`: ``mode: batch`` and its settings in a profile.
- `policies.batch.placement`: a batch of queued pods on a scheduler snapshot → problem → rows.
"""

from policies.batch.bes import ALGORITHMS, BatchResult, BesParams, decode, optimise, repair, skew_tent
from policies.batch.config import BATCH_KEYS, MODES, BatchArgs, BatchConfig, parse_batch
from policies.batch.greedy import (
    balanced_allocation,
    greedy_score,
    greedy_z,
    least_requested,
    local_search_z,
    reference,
)
from policies.batch.model import (
    BALANCED,
    CLASSES,
    COMPRESSIBLE,
    DEFAULT_CRITICAL_LOAD,
    INCOMPRESSIBLE,
    OBJECTIVES,
    RESOURCES,
    BatchProblem,
    ClassWeights,
    Evaluation,
    Evaluator,
    class_weights,
    classify,
    evaluate,
    feasible,
    make_problem,
    node_scores,
    pod_scores,
    total_fitness,
    utilisation,
    z_avg,
    z_per_node,
)
from policies.batch.placement import BatchPlan, batch_seed, candidate_mask, plan_batch, problem_from_snapshot
from policies.batch.windows import optimise_windows

__all__ = [
    "ALGORITHMS",
    "BALANCED",
    "BATCH_KEYS",
    "CLASSES",
    "COMPRESSIBLE",
    "DEFAULT_CRITICAL_LOAD",
    "INCOMPRESSIBLE",
    "MODES",
    "OBJECTIVES",
    "RESOURCES",
    "BatchArgs",
    "BatchConfig",
    "BatchPlan",
    "BatchProblem",
    "BatchResult",
    "BesParams",
    "ClassWeights",
    "Evaluation",
    "Evaluator",
    "balanced_allocation",
    "batch_seed",
    "candidate_mask",
    "class_weights",
    "classify",
    "decode",
    "evaluate",
    "feasible",
    "greedy_score",
    "greedy_z",
    "least_requested",
    "local_search_z",
    "make_problem",
    "node_scores",
    "optimise",
    "optimise_windows",
    "parse_batch",
    "plan_batch",
    "pod_scores",
    "problem_from_snapshot",
    "reference",
    "repair",
    "skew_tent",
    "total_fitness",
    "utilisation",
    "z_avg",
    "z_per_node",
]
