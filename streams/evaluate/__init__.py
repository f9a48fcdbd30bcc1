"""Offline experiments (`eyrie evaluate`): the same policies code as the pipeline, on real traces, seeded.

- `streams.evaluate.portrait`: portraits learnt from Bitbrains VMs, placement by profile, real usage
  replayed (issue 4).
- `streams.evaluate.report`: the markdown table, CSV and plots.
"""

from streams.evaluate.portrait import (
    PORTRAIT_PROFILES,
    PortraitExperiment,
    ProfileResult,
    run_portrait_experiment,
)

__all__ = [
    "EXPERIMENTS",
    "PORTRAIT_PROFILES",
    "PortraitExperiment",
    "ProfileResult",
    "run_portrait_experiment",
]

EXPERIMENTS = ("portrait",)
