"""Offline experiments (`eyrie evaluate`): the same policies code as the pipeline, on real traces, seeded.

- `streams.evaluate.portrait`: portraits learnt from Bitbrains VMs, placement by profile, real usage
  replayed (issue 4).
- `streams.evaluate.tbesk`: the TBESK paper experiment (seed 003: LRA, BRA, BES, TBESK and a Z reference on
  the paper's cluster and SPEC 5's pod generator), or the same on the Alibaba GPU 2023 trace (issue 8).
- `streams.evaluate.report`: the portrait experiment's markdown table, CSV and plots.
"""

from streams.evaluate.portrait import (
    PORTRAIT_PROFILES,
    PortraitExperiment,
    ProfileResult,
    run_portrait_experiment,
)
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
    "TbeskExperiment",
    "TbeskResult",
    "run_and_report",
    "run_portrait_experiment",
    "run_tbesk_experiment",
    "write_tbesk_report",
]

EXPERIMENTS = ("portrait", "tbesk-paper")
