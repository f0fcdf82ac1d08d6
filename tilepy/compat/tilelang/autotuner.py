"""`tilelang.autotune` and `AutoTuner` on the CPU reference: tuning GPU tile sizes means
nothing here, so the first config is built (and checked against the reference program when
one is given); the result has TileLang's fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilepy.compat.tilelang.jit import JITKernel, _JitFunction, _wrap, compile
from tilepy.errors import ArgumentError

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
    got = configs(*args, **kwargs) if callable(configs) else configs
    return [dict(c) for c in got]


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
        config = _configs(self.configs)[0]
        made = self.fn(*args, **{**kwargs, **config})
        kernel = made if isinstance(made, JITKernel) else (
            compile(made, self.compile_args.get("out_idx")) if not isinstance(made, JITKernel)
            else made)
        prof = kernel.get_profiler(self.profile_args.get("supply_type"))
        ref = self.profile_args.get("ref_prog")
        if ref is not None and not self.profile_args.get("skip_check"):
            prof.assert_allclose(ref, input_tensors=self.inputs)
        latency = prof.do_bench(input_tensors=self.inputs)
        return AutotuneResult(latency, config, None, kernel, made)


def _latency(kernel: JITKernel) -> float | None:
    """The built config's time in ms on generated inputs (as TileLang reports the best
    config's); None where inputs cannot be made (symbolic shapes)."""
    try:
        return kernel.get_profiler().do_bench()
    except ArgumentError:
        return None


def autotune(configs=None, warmup=25, rep=100, timeout=100, **_ignored):
    """`@autotune(configs=...)` over a `@tilelang.jit` function: calls build the first
    config (tuning GPU tiles has no CPU meaning), with the caller's arguments."""

    def decorate(fn):
        def tuned(*args, **kwargs):
            first = {} if configs is None else _configs(configs, *args, **kwargs)[0]
            if any(k in kwargs for k in first):
                first = {}
            kernel = _wrap(fn(*args, **{**kwargs, **first}))
            if isinstance(kernel, JITKernel):  # AutotuneResult's fields, as TileLang sets
                kernel.config, kernel.ref_latency = first, None
                kernel.latency = _latency(kernel)
            return kernel

        tuned.__wrapped__ = fn
        tuned.__name__ = getattr(fn, "__name__", "kernel")
        if isinstance(fn, _JitFunction):
            tuned.compile = fn.compile
        return tuned

    return decorate
