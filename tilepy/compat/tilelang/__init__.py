"""tilepy's stand-in for TileLang's Python package: the names TileLang programs use
(`tilelang.jit`, `compile`, `cdiv`, `language`, `JITKernel`, profiler, autotuner, testing...),
each running on tilepy. GPU-only settings (targets, pass configs, execution backends) are
accepted and ignored; they change no result on the CPU.
"""

from __future__ import annotations

from tilepy.compat import tvm  # noqa: E402,F401 - `from tilelang import tvm`
from tilepy.compat.tilelang import (  # noqa: F401 - tilelang.language, tilelang.math...
    autotuner,
    cache,
    carver,
    engine,
    intrinsics,
    language,
    layout,
    math,
    profiler,
    quantize,
    testing,
    tileop,
    transform,
    utils,
)
from tilepy.compat.tilelang.autotuner import AutoTuner, autotune  # noqa: F401
from tilepy.compat.tilelang.jit import (  # noqa: F401 - Profiler, lower: the older API
    JITKernel,
    Profiler,
    compile,
    jit,
    lazy_jit,
    lower,
)
from tilepy.compat.tilelang.math import next_power_of_2  # noqa: F401
from tilepy.compat.tilelang.transform import PassConfigKey  # noqa: F401
from tilepy.compat.tilelang.utils.tensor import TensorSupplyType  # noqa: F401
from tilepy.frontend.dtypes import dtype as DataType  # noqa: F401 - tvm.DataType

TensorDistribution = TensorSupplyType  # its older name

__version__ = "0.1.0+tilepy"


def cdiv(a: int, b: int) -> int:
    """Ceiling division of two ints."""
    return -(-a // b)


def disable_cache() -> None:
    """TileLang's kernel cache switch: tilepy's caches key on the IR, so nothing to do."""


def enable_cache() -> None:
    """See disable_cache."""


def set_log_level(level) -> None:
    """Accepted for TileLang programs; tilepy's only log line is the compile notice."""
