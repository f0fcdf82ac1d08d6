"""`tilelang.autotune` and `AutoTuner` on the CPU reference, through tilepy's tuner
(tilepy/tuning): every config (or the opt-in subset of tilepy/compat/tunelimit.py) is built
and timed on the CPU on the profiler's generated inputs (or those given), the fastest kept;
results have TileLang's fields (latency in ms).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from tilepy.compat import tunelimit
from tilepy.compat.tilelang.jit import JITKernel, _JitFunction, _wrap, compile
from tilepy.errors import ArgumentError
from tilepy.tuning import space
from tilepy.tuning.tuner import tune

__all__ = ["AutoTuner", "AutotuneResult", "autotune"]


@dataclass
class AutotuneResult:
    latency: float
    config: dict
    ref_latency: float | None
    kernel: JITKernel
    func: object = None
    libcode: str = ""
    extra: dict = field(default_factory=dict)


def _configs(configs, *args, **kwargs) -> list[dict]:
    return space.expand(configs, *args, **kwargs)


def _kernel_args(config: dict) -> dict:
    """A config's arguments of the kernel function: a `pass_configs` entry holds compiler
    options (TileLang passes them to its compiler; the CPU reference has none to set)."""
    return {k: v for k, v in config.items() if k != "pass_configs"}


def _ident(fn, args, kwargs) -> str:
    inner = getattr(getattr(fn, "inner", None), "fn", fn)
    try:
        text = inspect.getsource(inner)
    except (OSError, TypeError):
        text = getattr(inner, "__qualname__", repr(inner))
    return repr((text, args, sorted(kwargs.items())))


def _tune(make, configs, inputs, supply, ident, out_idx=None):
    """The best JITKernel of `make(config)` and its tilepy TuneResult."""
    def build(config):
        made = make(config)
        kernel = made if isinstance(made, JITKernel) else compile(made, out_idx)
        return kernel.kernel

    if inputs is None:  # the profiler's generated inputs for the first config's signature
        first = JITKernel(build(configs[0]))
        inputs = first.get_profiler(supply)._inputs()
    result = tune(build, configs, list(inputs), ident=ident, rep=3, progress=False)
    return JITKernel(result.kernel), result


class AutoTuner:
    """`AutoTuner.from_kernel(kernel=fn, configs=...)...run()`."""

    def __init__(self, fn, configs):
        self.fn, self.configs = fn, configs
        self.compile_args: dict = {}
        self.profile_args: dict = {}
        self.inputs = None

    @classmethod
    def from_kernel(cls, kernel, configs):
        return cls(kernel, configs)

    def set_compile_args(self, out_idx=None, **_ignored):
        self.compile_args = {"out_idx": out_idx}
        return self

    def set_profile_args(self, supply_type=None, ref_prog=None, skip_check=False,
                         **_ignored):
        self.profile_args = {"supply_type": supply_type, "ref_prog": ref_prog,
                             "skip_check": skip_check}
        return self

    def set_autotune_inputs(self, *inputs):
        self.inputs = list(inputs[0]) if len(inputs) == 1 and isinstance(
            inputs[0], (list, tuple)) else list(inputs)
        return self

    def run(self, warmup=25, rep=100, timeout=30, *args, **kwargs) -> AutotuneResult:
        """Time every config (the CPU's wall clock, best of 3 launches), check the fastest
        against the reference program when one is set; latency in milliseconds."""
        configs = tunelimit.pick(_configs(self.configs))  # TILEPY_AUTOTUNE_CONFIGS
        kernel, res = _tune(lambda c: self.fn(*args, **{**kwargs, **_kernel_args(c)}), configs,
                            self.inputs, self.profile_args.get("supply_type"),
                            _ident(self.fn, args, kwargs), self.compile_args.get("out_idx"))
        ref = self.profile_args.get("ref_prog")
        if ref is not None and not self.profile_args.get("skip_check"):
            kernel.get_profiler(self.profile_args.get("supply_type")).assert_allclose(
                ref, input_tensors=self.inputs)
        return AutotuneResult(res.seconds * 1e3, res.config, None, kernel, kernel.func)


def _latency(kernel: JITKernel) -> float | None:
    """The built config's time in ms on generated inputs (as TileLang reports the best
    config's); None where inputs cannot be made (symbolic shapes)."""
    try:
        return kernel.get_profiler().do_bench()
    except ArgumentError:
        return None


def autotune(configs=None, warmup=25, rep=100, timeout=100, **_ignored):
    """`@autotune(configs=...)` over a `@tilelang.jit` function: a call builds and times
    every config with the call's arguments on generated inputs and returns the fastest
    kernel (`.config`, `.latency` in ms). Arguments naming a config's keys skip tuning."""

    def decorate(fn):
        def tuned(*args, **kwargs):
            all_ = [] if configs is None else _configs(configs, *args, **kwargs)
            if not all_ or any(k in kwargs for k in all_[0]):
                kernel = _wrap(fn(*args, **kwargs))
                if isinstance(kernel, JITKernel):  # AutotuneResult's fields, as TileLang sets
                    kernel.config, kernel.ref_latency = {}, None
                    kernel.latency = _latency(kernel)
                return kernel
            kernel, res = _tune(lambda c: fn(*args, **{**kwargs, **_kernel_args(c)}),
                                tunelimit.pick(all_), None, None, _ident(fn, args, kwargs))
            kernel.config, kernel.latency, kernel.ref_latency = res.config, res.seconds * 1e3, None
            return kernel

        tuned.__wrapped__ = fn
        tuned.__name__ = getattr(fn, "__name__", "kernel")
        if isinstance(fn, _JitFunction):
            tuned.compile = fn.compile
        return tuned

    return decorate
