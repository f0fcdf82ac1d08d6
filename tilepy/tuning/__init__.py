"""The auto-tuner: `@tilepy.autotune(configs=..., key=...)` over a kernel factory picks the
fastest config per key (grid, random or cost-model-guided search), compiles candidates in
parallel processes and remembers the choice in a SQLite cache shared by processes.
See docs/autotune.md.
"""

from tilepy.tuning.tuner import Autotuned, TunedKernel, TuneResult, autotune, tune

__all__ = ["Autotuned", "TunedKernel", "TuneResult", "autotune", "tune"]
