"""Offline experiments (`eyrie evaluate`): the same policies code as the pipeline, on real traces, seeded.

- `streams.evaluate.portrait`: portraits learnt from Bitbrains VMs, placement by profile, real usage
  replayed (issue 4).
- `streams.evaluate.tbesk`: the TBESK paper experiment (seed 003: LRA, BRA, BES, TBESK and a Z reference on
  the paper's cluster and SPEC 5's pod generator), or the same on the Alibaba GPU 2023 trace (issue 8).
- `streams.evaluate.report`: the portrait experiment's markdown table, CSV and plots.
- `streams.evaluate.suite` (`eyrie evaluate --all`): every built-in profile on the Alibaba GPU 2023 trace
  (unschedulable pods, GPU fragmentation, utilisation spread) and on Bitbrains (the portrait experiment's
  node-hours over capacity); `streams.evaluate.suite_report` writes it, `streams.evaluate.metrics` measures.
"""

from streams.evaluate.portrait import (
    PORTRAIT_PROFILES,
    PortraitExperiment,
    ProfileResult,
    run_portrait_experiment,
)
from streams.evaluate.suite import SuiteExperiment, SuiteResult, run_suite
from streams.evaluate.tbesk import (
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

EXPERIMENTS = ("portrait", "tbesk-paper")
