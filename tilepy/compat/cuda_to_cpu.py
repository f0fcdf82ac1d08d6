"""The opt-in mapping of CUDA tensor creation to the CPU, for programs written for a GPU:
torch factories given `device="cuda"`, `Tensor.cuda()` and `Tensor.to("cuda")` give CPU
tensors (and say they are CUDA ones: `Tensor.is_cuda`), and `torch.cuda.init` /
`synchronize`, seeding and timing events do what they mean on the CPU. Device queries
describe the CPU as a compute-capability 8.0 device (no Hopper-only features, so a program
picks its portable configuration) with one multiprocessor per usable core. Changes torch's
module state for the process; nothing else.
"""

from __future__ import annotations

import functools
import os
import types

_FACTORIES = ("empty", "zeros", "ones", "full", "rand", "randn", "randint", "arange",
              "tensor", "empty_like", "zeros_like", "ones_like", "full_like", "rand_like",
              "randn_like", "randint_like", "linspace", "eye", "randperm", "as_tensor",
              "empty_strided", "normal")
_done = False


def _cpu(device):
    text = str(device) if device is not None else ""
    return "cpu" if text.startswith("cuda") or text.isdigit() else device


def _wrap_factory(fn):
    @functools.wraps(fn)
    def made(*args, **kwargs):
        if "device" in kwargs:
            kwargs["device"] = _cpu(kwargs["device"])
        return fn(*args, **kwargs)

    return made


def _seed_cpu(seed) -> None:
    import torch

    torch.default_generator.manual_seed(int(seed))


class CpuEvent:
    """`torch.cuda.Event(enable_timing=True)` on the CPU: `record()` notes the wall time,
    `elapsed_time(end)` gives the milliseconds between two recorded events."""

    def __init__(self, *args, **kwargs):
        self.at = None

    def record(self, *args, **kwargs) -> None:
        import time

        self.at = time.perf_counter()

    def elapsed_time(self, end: "CpuEvent") -> float:
        if self.at is None or end.at is None:
            raise RuntimeError("elapsed_time needs two recorded events (call record() "
                               "on both)")
        return (end.at - self.at) * 1000.0

    def synchronize(self) -> None:
        pass

    def wait(self, *args, **kwargs) -> None:
        pass

    def query(self) -> bool:
        return True


CAPABILITY = (8, 0)  # what device queries report: a GPU without Hopper-only features


def _properties(device=None) -> types.SimpleNamespace:
    """`torch.cuda.get_device_properties`: the CPU seen as a device."""
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return types.SimpleNamespace(
        name="cpu (tilepy --cuda-to-cpu)", major=CAPABILITY[0], minor=CAPABILITY[1],
        multi_processor_count=len(os.sched_getaffinity(0)), total_memory=pages)


def _queries(cuda) -> None:
    cuda.get_device_capability = lambda device=None: CAPABILITY
    cuda.get_device_properties = _properties
    cuda.get_device_name = lambda device=None: _properties().name
    cuda.device_count = lambda: 1


def patch() -> None:
    """Apply the mapping (once per process)."""
    global _done
    if _done:
        return
    import torch

    for name in _FACTORIES:
        if hasattr(torch, name):
            setattr(torch, name, _wrap_factory(getattr(torch, name)))
    torch.Tensor.cuda = lambda self, *a, **k: self
    # programs check that their tensors are on the GPU: CPU tensors stand in for CUDA ones
    torch.Tensor.is_cuda = property(lambda self: self.device.type in ("cpu", "cuda"))
    to = torch.Tensor.to

    def to_cpu(self, *args, **kwargs):
        args = tuple(_cpu(a) if isinstance(a, (str, torch.device)) else a for a in args)
        if "device" in kwargs:
            kwargs["device"] = _cpu(kwargs["device"])
        return to(self, *args, **kwargs)

    torch.Tensor.to = to_cpu
    torch.cuda.synchronize = torch.cuda.init = lambda *a, **k: None
    # torch.manual_seed calls torch.cuda.manual_seed_all: seed the CPU generator directly
    # (mapped "cuda" tensors draw from it), not through torch.manual_seed
    torch.cuda.manual_seed = torch.cuda.manual_seed_all = _seed_cpu
    torch.cuda.is_available = lambda: True
    torch.cuda.current_device = lambda: 0
    torch.cuda.set_device = lambda *a, **k: None
    torch.cuda.empty_cache = lambda: None
    torch.cuda.Event = CpuEvent
    _queries(torch.cuda)
    _done = True
