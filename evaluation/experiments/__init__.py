"""Offline experiments (`eyrie evaluate`): the same policies code as the pipeline, on real traces, seeded.

- `evaluation.experiments.portrait`: portraits learnt from Bitbrains VMs, placement by profile, real usage
  replayed.
- `evaluation.experiments.tbesk`: the TBESK paper's experiment (LRA, BRA, BES, TBESK and a Z reference on the
  paper's cluster, pods from a fixed seeded generator), or the same on the Alibaba GPU 2023 trace.
- `evaluation.experiments.report`: the portrait experiment's markdown table, CSV and plots.
- `evaluation.experiments.suite` (`eyrie evaluate --all`): every built-in profile on the Alibaba GPU 2023
  trace (unschedulable pods, GPU fragmentation, utilisation spread) and on Bitbrains (the portrait
  experiment's node-hours over capacity); `evaluation.experiments.suite_report` writes it,
  `evaluation.experiments.metrics` measures.
- `evaluation.experiments.gpu_sharing` (`--experiment gpu-sharing`): the FGD paper's protocol on the openb pod
  lists (unallocated GPU capacity, failed pods and fragmentation as the arrived demand grows).
"""

from evaluation.experiments.portrait import (
    PORTRAIT_PROFILES,
    PortraitExperiment,
    ProfileResult,
    run_portrait_experiment,
)
from evaluation.experiments.suite import SuiteExperiment, SuiteResult, run_suite
from evaluation.experiments.tbesk import (
    TbeskExperiment,
    TbeskResult,
    run_and_report,
    run_tbesk_experiment,
    write_tbesk_report,
)

__all__ = [
    "EXPERIMENTS",
    "PORTRAIT_PROFILES",
    "PortraitExperiment",
    "ProfileResult",
    "SuiteExperiment",
    "SuiteResult",
    "TbeskExperiment",
    "TbeskResult",
    "run_and_report",
    "run_portrait_experiment",
    "run_suite",
    "run_tbesk_experiment",
    "write_tbesk_report",
]

EXPERIMENTS = ("portrait", "tbesk-paper", "gpu-sharing")
