"""Where the tests find the public cluster traces (Alibaba 2018, Alibaba GPU 2023, Bitbrains GWA-T-12):
`../shared/traces` beside the project, wherever the project is checked out (CI clones it somewhere else than
the developer's machine). They are not part of the repository; docs/evaluation.md says where each comes from
and how to get it. Tests that read one skip, or use generated data, when it is absent."""

from pathlib import Path
from typing import Final

__all__ = ["ALIBABA_2018", "ALIBABA_GPU_2023", "BITBRAINS", "TRACES"]

TRACES: Final = Path(__file__).resolve().parents[2] / "shared" / "traces"
ALIBABA_GPU_2023: Final = TRACES / "alibaba_gpu_v2023"
BITBRAINS: Final = TRACES / "bitbrains_rnd_2013-7"
ALIBABA_2018: Final = TRACES / "alibaba_v2018_sample"
