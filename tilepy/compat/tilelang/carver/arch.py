"""`tilelang.carver.arch`: `driver.get_num_sms()` is the number of CPU cores tilepy's JIT
runs blocks on (a persistent kernel's grid size; results do not depend on it). The GPU
architecture models (`CUDA`, `CDNA`) cannot describe a CPU: constructing one is refused."""

from __future__ import annotations

import os
import types

from tilepy.errors import NotPortableError


def _num_cores() -> int:
    """The cores this process may run on (what a persistent grid should cover)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


driver = types.SimpleNamespace(get_num_sms=_num_cores)


def _refuse(what: str):
    raise NotPortableError(
        f"not portable to the CPU reference: {what} (tilelang.carver)",
        hint="the carver models a GPU to recommend tile sizes; give the kernel explicit "
             "tile sizes (a program's non-roller configuration)")


class _GpuArch:
    name = "GPU"

    def __init__(self, *args, **kwargs):
        _refuse(f"the {self.name} architecture model")


class CUDA(_GpuArch):
    name = "CUDA"


class CDNA(_GpuArch):
    name = "CDNA"


def auto_infer_current_arch():
    _refuse("the current GPU's architecture model")
