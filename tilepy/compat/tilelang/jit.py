"""`tilelang.jit`, `tilelang.compile` and `JITKernel` on tilepy: a JITKernel wraps a tilepy
Kernel (torch tensors in and out, `out_idx`), with TileLang's inspection and profiling
methods. Compile options for GPUs are accepted and ignored.
"""

from __future__ import annotations

import functools

from tilepy.kernel import JitFunction, Kernel
from tilepy.kernel import compile as _compile


class JITKernel:
    """A compiled TileLang kernel: call it with tensors (outputs `out_idx` are returned)."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.out_idx = list(kernel.out_idx)
        self.__name__ = kernel.name

    def __call__(self, *args):
        return self.kernel(*args)

    def __repr__(self) -> str:
        return f"<JITKernel {self.kernel!r}>"

    @property
    def func(self):
        return self.kernel.func

    @property
    def prim_func(self):
        """TileLang's PrimFunc of the kernel: the tilepy kernel, which `compile` and
        `@tilelang.jit` functions accept back."""
        return self.kernel

    @property
    def ir(self):
        return self.kernel.ir

    @property
    def params(self):
        """The declared arguments as `KernelParam`s (dtype, shape: ints when static)."""
        from tilepy.compat.tilelang.engine.param import KernelParam

        func = self.kernel.func
        return [KernelParam(p.dtype, tuple(p.static_shape() or p.shape))
                for i, p in enumerate(func.params) if i not in func.scratch]

    @property
    def result_idx(self):
        """Indices of the arguments the call allocates and returns (TileLang's name)."""
        return list(self.out_idx)

    def get_kernel_source(self, *args, **kwargs) -> str:
        """The source tilepy's JIT generates (TileLang returns CUDA/HIP code here)."""
        return str(self.kernel.source)

    def get_host_source(self) -> str:
        return str(self.kernel.source)

    def get_tir(self):
        return self.kernel.ir

    def get_profiler(self, tensor_supply_type=None, **kwargs):
        from tilepy.compat.tilelang.profiler import Profiler

        return Profiler(self, tensor_supply_type)


def _wrap(made):
    if isinstance(made, JITKernel):
        return made
    return JITKernel(made) if isinstance(made, Kernel) else made


def compile(func, out_idx=None, target=None, execution_backend=None, target_host=None,  # noqa: A001
            verbose=False, pass_configs=None, **_ignored) -> JITKernel:
    """`tilelang.compile(prim_func, out_idx=[-1])`: a JITKernel."""
    base = func.kernel if isinstance(func, JITKernel) else func
    return JITKernel(_compile(base, out_idx))


class _JitFunction:
    """What `@tilelang.jit` returns: calling it builds (or runs, in the eager style) the
    kernel; `.compile(...)` builds without running; `.get_tir(...)` gives the IR."""

    def __init__(self, fn, out_idx):
        self.inner = JitFunction(fn, out_idx)
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return _wrap(self.inner(*args, **kwargs))

    def compile(self, *args, **kwargs) -> JITKernel:
        return _wrap(self.inner.build(*args, **kwargs))

    def get_tir(self, *args, **kwargs):
        return self.compile(*args, **kwargs).ir

    def get_kernel_source(self, *args, **kwargs) -> str:
        return self.compile(*args, **kwargs).get_kernel_source()


def jit(func=None, *, out_idx=None, target=None, target_host=None, execution_backend=None,
        verbose=False, pass_configs=None, debug_root_path=None, compile_flags=None,
        **_ignored):
    """`@tilelang.jit` / `@tilelang.jit(out_idx=[-1], ...)`."""
    if func is None:
        return lambda f: _JitFunction(f, out_idx)
    return _JitFunction(func, out_idx)


lazy_jit = jit


class _RuntimeModule:
    """What TileLang's older `tilelang.lower` returned first: the kernel's runtime module
    (`mod.imported_modules[0].get_source()` gives tilepy's generated source)."""

    def __init__(self, kernel: JITKernel):
        self.kernel = kernel
        self.imported_modules = [self]

    def get_source(self, *args, **kwargs) -> str:
        return self.kernel.get_kernel_source()

    def __call__(self, *args):
        return self.kernel(*args)


def lower(func, target=None, target_host=None, runtime_only=False, **_ignored):
    """TileLang's older `mod, params = tilelang.lower(prim_func)`: the kernel (as a runtime
    module) and its parameters."""
    kernel = compile(func)
    return _RuntimeModule(kernel), kernel.params


def Profiler(mod, params=None, result_idx=None, supply_type=None):  # noqa: N802
    """TileLang's older `tilelang.Profiler(mod, params, result_idx, supply_type)`: the
    profiler of a lowered kernel (call it with the arguments; `do_bench(profiler.func)`)."""
    from tilepy.compat.tilelang.profiler import Profiler as _Profiler

    kernel = mod.kernel if isinstance(mod, _RuntimeModule) else mod
    base = kernel.kernel if isinstance(kernel, JITKernel) else kernel
    return _Profiler(JITKernel(_compile(base, list(result_idx or []))), supply_type)
