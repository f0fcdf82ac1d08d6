"""`tilepy.autotune` and `tune`: measure a kernel factory's configs on the call's own arrays
and keep the fastest, per tuning key (the factory, its configs, the arrays' shapes and
dtypes, the backend and its options, the CPU, tilepy's version).

Candidates run on copies of the arguments (a kernel may write its inputs); each is timed
as the best of `rep` launches after `warmup` calls. Only the time changes with the config:
in exact mode every config gives the bits the untuned kernel gives (DESIGN.md's contract
fixes the order of accumulation whatever the tiles).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import json
import os
import sys
from dataclasses import dataclass, field

import numpy as np

from tilepy import __version__
from tilepy.boundary import api_boundary
from tilepy.compat.torch_bridge import from_torch
from tilepy.errors import TilepyError, TuneError
from tilepy.kernel import JitFunction, Kernel, _caller_loc, bind_arguments
from tilepy.tuning import cache as tune_cache
from tilepy.tuning import parallel, space


@dataclass
class TuneResult:
    """What tuning found for one key: the best config, its launch seconds and Kernel, what
    was measured (`tried`: [config, seconds]), configs that failed (`failed`: [config,
    message]), the model's predictions (model search) and whether it came from the cache."""

    config: dict
    seconds: float
    kernel: Kernel
    key: str
    tried: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    predicted: dict = field(default_factory=dict)
    cached: bool = False
    compiled_by: set = field(default_factory=set)  # pids of the compile workers used


def _backend() -> tuple[str, dict]:
    return importlib.import_module("tilepy.backend").current()


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, default=str, sort_keys=True).encode()).hexdigest()


def call_key(args, key=None, sizes=None) -> list:
    """The shapes and dtypes the tuning key holds: every array's, or the named sizes' values
    and the dtypes when `key` lists size names, or `key(*args)` when it is a callable."""
    dtypes = [str(getattr(a, "dtype", type(a).__name__)) for a in args]
    if key is None:
        return [[list(getattr(a, "shape", ())) for a in args], dtypes]
    if callable(key):
        return [key(*args), dtypes]
    return [{k: (sizes or {}).get(k) for k in key}, dtypes]


def _measure(kernel: Kernel, args, warmup: int, rep: int) -> float:
    """The best launch seconds of `rep` calls after `warmup` (the first call compiles)."""
    from tilepy.profiling.session import do_bench

    return min(do_bench(lambda: kernel(*args), warmup=max(warmup, 1), rep=max(rep, 1)))


def _progress(enabled, total: int, desc: str):
    if enabled is False:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    if enabled is None and not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        return None
    return tqdm(total=total, desc=desc, unit="config", leave=False)


def tune(build, configs, args, *, ident="", key=None, search="grid", budget=None, seed=0,
         warmup=1, rep=3, workers=None, cache=True, progress=None) -> TuneResult:
    """Measure `build(config)` (a Kernel) for the chosen configs on `args` (the kernel's
    input arrays) and return the fastest; read from / saved to the tuning cache."""
    args, _ = from_torch(tuple(args))  # torch tensors as the numpy arrays they share
    configs = space.expand(configs)
    first = next((k for k in map(lambda c: _build(build, c), configs) if k is not None), None)
    sizes = bind_arguments(first.func, list(args), _caller_loc())[1] if first else {}
    name, options = _backend()
    from tilepy.ir.hashing import structural_hash
    from tilepy.profiling.roofline import cpu_id

    k = _digest(ident, structural_hash(first.func) if first else None,
                [space.label(c) for c in configs], search, budget, seed,
                call_key(args, key, sizes), name,
                sorted((o, v) for o, v in options.items() if v not in (False, None)), cpu_id(),
                __version__)
    if cache:
        hit = tune_cache.load(k)
        if hit is not None and space.label(hit["config"]) in {space.label(c) for c in configs}:
            return TuneResult(hit["config"], hit["seconds"], build(hit["config"]), k,
                              hit["tried"], cached=True)
    predicted = {}
    if search == "model":
        predicted = _predictions(build, configs, sizes, name)
    chosen = space.choose(configs, search, budget, seed,
                          lambda c: predicted.get(space.label(c)))
    result = _run(build, chosen, args, name, options, warmup, rep, workers, progress)
    result.key, result.predicted = k, predicted
    if cache:
        tune_cache.save(k, result.config, result.seconds, result.tried,
                        {"search": search, "backend": name, "failed": result.failed})
    return result


def _build(build, config):
    try:
        return build(config)
    except TilepyError:
        return None  # reported when this config is measured


def _predictions(build, configs, sizes, backend) -> dict:
    from tilepy.profiling.roofline import machine_roofline

    roof, out = machine_roofline(), {}
    for c in configs:
        kernel = _build(build, c)
        try:
            out[space.label(c)] = space.predict(kernel.func, sizes, roof, backend)
        except Exception:  # noqa: BLE001 - an unbuildable or uncountable config ranks last
            out[space.label(c)] = float("inf")
    return out


def _run(build, chosen, args, name, options, warmup, rep, workers, progress) -> TuneResult:
    """Build, compile (in workers where it pays) and time the chosen configs."""
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    kernels, failed = [], []
    for c in chosen:
        try:
            kernels.append((c, build(c)))
        except TilepyError as err:
            failed.append([c, err.message])
    workers = min(os.cpu_count() or 1, 2 if workers is None else workers)
    bar = _progress(progress, len(kernels), "autotune")
    pids = set()
    if parallel.should_compile(name, len(kernels), workers):
        todo = [kern.func for _, kern in kernels if not parallel.on_disk(kern.func, options)]
        if len(todo) > 1:
            if bar is not None:
                bar.set_description("autotune: compiling")
            done = parallel.precompile(todo, options, min(workers, len(todo)))
            pids = {pid for _, pid in done.values() if pid is not None}
    tried = _measure_all(kernels, copies, warmup, rep, bar, failed)
    if not tried:
        why = "; ".join(f"{space.label(c)}: {m.splitlines()[0]}" for c, m in failed[:3])
        raise TuneError(f"no config could be built and run ({why})",
                        hint="check the configs against the kernel's limits")
    best_c, best_s = min(tried, key=lambda t: t[1])
    best_k = next(kern for c, kern in kernels if c is best_c)
    return TuneResult(best_c, best_s, best_k, "", tried, failed, compiled_by=pids)


def _measure_all(kernels, copies, warmup, rep, bar, failed: list) -> list:
    """[config, seconds] per kernel that runs; the others are added to `failed`."""
    tried = []
    for c, kern in kernels:
        if bar is not None:
            bar.set_description(f"autotune {space.label(c)}")
        try:
            tried.append([c, _measure(kern, copies, warmup, rep)])
        except TilepyError as err:
            failed.append([c, err.message])
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return tried


@contextlib.contextmanager
def _at(loc):
    """A TuneError raised inside without a source location gets `loc` (the user's line)."""
    try:
        yield
    except TuneError as err:
        if err.loc.line:
            raise
        raise TuneError(err.message, loc, err.hint) from None


class TunedKernel:
    """A factory bound to its build-time arguments: calling it with arrays tunes once per
    key (shapes, dtypes, backend), then runs the best kernel. `tune(*arrays)` tunes (or reads
    the cache) without running; `results` holds the TuneResult per call signature."""

    def __init__(self, owner: Autotuned, args: tuple, kwargs: dict):
        self.owner, self.args, self.kwargs = owner, args, kwargs
        self.results: dict = {}

    def __repr__(self) -> str:
        return f"<tilepy.autotune {self.owner.__name__} ({len(self.owner.configs)} configs)>"

    def build(self, config: dict) -> Kernel:
        try:
            made = self.owner.factory(*self.args, **{**self.kwargs, **config})
        except TypeError as err:  # a config naming an argument the factory does not take
            raise TuneError(f"the config {space.label(config)} does not fit "
                            f"{self.owner.__name__}: {err}",
                            hint="a config's keys must be arguments of the factory") from None
        if not isinstance(made, Kernel):
            raise TuneError(f"{self.owner.__name__} must return a kernel (@T.prim_func); it "
                            f"returned {type(made).__name__}",
                            hint="autotune decorates a factory of lazy-style kernels")
        return made

    def _signature(self, arrays) -> tuple:
        name, options = _backend()
        return (tuple((getattr(a, "shape", None), str(getattr(a, "dtype", type(a))))
                      for a in arrays), name, tuple(sorted(options.items())))

    @api_boundary
    def tune(self, *arrays) -> TuneResult:
        sig = self._signature(arrays)
        if sig not in self.results:
            o = self.owner
            with _at(_caller_loc()):
                self.results[sig] = tune(self.build, o.configs, arrays,
                                         ident=o.ident(self), **o.options)
        return self.results[sig]

    @api_boundary
    def __call__(self, *arrays):
        return self.tune(*arrays).kernel(*arrays)


class Autotuned:
    """What `@tilepy.autotune(...)` returns: call it with the factory's build-time
    arguments (not the tuned ones) to get a TunedKernel."""

    def __init__(self, factory, configs, options: dict):
        if isinstance(factory, JitFunction) and factory.eager:
            raise TuneError(f"{factory.__name__} is an eager kernel; autotune needs a "
                            "factory that returns a @T.prim_func",
                            hint="write the kernel in the lazy style (see tilepy/kernels)")
        self.factory, self.configs, self.options = factory, configs, options
        self.__name__ = getattr(factory, "__name__", "kernel")
        self.__doc__ = getattr(factory, "__doc__", None)
        self._bound: dict = {}

    def ident(self, bound: TunedKernel) -> str:
        fn = getattr(self.factory, "fn", self.factory)
        try:
            text = inspect.getsource(fn)
        except (OSError, TypeError):
            text = ""
        return _digest(getattr(fn, "__module__", ""), getattr(fn, "__qualname__", ""),
                       text, repr(bound.args), repr(sorted(bound.kwargs.items())))

    def __call__(self, *args, **kwargs) -> TunedKernel:
        key = repr((args, sorted(kwargs.items())))
        if key not in self._bound:
            self._bound[key] = TunedKernel(self, args, kwargs)
        return self._bound[key]


def autotune(configs=None, key=None, *, search="grid", budget=None, seed=0, warmup=1,
             rep=3, workers=None, cache=True, progress=None):
    """`@tilepy.autotune(configs=..., key=...)` over a kernel factory (a `@tilepy.jit`
    function returning a `@T.prim_func`). `configs`: list of dicts, dict of lists (grid)
    or a callable; `key`: size names (e.g. ["N", "K"]) whose values decide when to tune
    again, else every argument's shape; `search`: "grid", "random" or "model" (ranked by
    a cost model from the IR's counts) with `budget` configs measured."""
    if configs is None:
        raise TuneError("autotune needs configs=...", _caller_loc(), hint='e.g. configs={'
                        '"block_M": [32, 64], "block_N": [32, 64]}')
    with _at(_caller_loc()):
        space.choose([{}], search, budget, seed, lambda c: 0.0)  # option errors now
    options = dict(key=key, search=search, budget=budget, seed=seed, warmup=warmup, rep=rep,
                   workers=workers, cache=cache, progress=progress)
    return lambda factory: Autotuned(factory, configs, options)
