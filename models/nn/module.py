"""`Module`, the base of every layer (PyTorch's API): parameters and submodules registered
by attribute assignment, named_parameters, state_dict / load_state_dict (a mismatched
checkpoint is an error naming the key and both shapes), train() / eval(), __call__.
`Sequential` chains modules. Layers check their input and name themselves in errors.
"""

from __future__ import annotations

import functools
from collections import OrderedDict

import numpy as np

from tilepy.models.errors import model_error
from tilepy.models.kernels import record as hooks
from tilepy.models.ops import NARROW, cast, cast_hint
from tilepy.models.tensor import Parameter, Tensor, floating

_MISSING = object()


def _forget_grads(params) -> None:
    """zero_grad's work (a replay runs it on the parameters the recorded call found)."""
    for p in params:
        p.grad = None


class Module:
    """Base class of layers and models: subclass it and define forward()."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise model_error(f"{type(self).__name__}.__init__ must call "
                              "super().__init__() before assigning attributes")
        for d in (self._parameters, self._modules, self._buffers):
            d.pop(name, None)
        if isinstance(value, (Parameter, Module)):
            self.__dict__.pop(name, None)  # a plain attribute of that name would shadow it
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        own = self.__dict__
        for key in ("_parameters", "_modules", "_buffers"):
            d = own.get(key)
            if d is not None:
                value = d.get(name, _MISSING)
                if value is not _MISSING:
                    return value
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def register_buffer(self, name: str, value: np.ndarray) -> None:
        """A persistent array that is not trained (batch-norm running statistics)."""
        self._buffers[name] = value

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        self.note_call()
        return self.forward(*args, **kwargs)

    def note_call(self) -> None:
        """Tells a step being captured that this module runs (replay checks its train/eval
        mode); also for a module run inside another's fused op."""
        if hooks.ACTIVE:
            hooks.ACTIVE[-1].module(self)

    # ------------------------------------------------------------ traversal
    def named_modules(self, prefix: str = ""):
        yield prefix, self
        for name, m in self._modules.items():
            yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self):
        return self._walk()

    def _walk(self):
        """named_modules() without the names (pre-order; no path strings built)."""
        yield self
        for m in self._modules.values():
            yield from m._walk()

    def children(self):
        return iter(self._modules.values())

    def named_parameters(self, prefix: str = ""):
        for path, m in self.named_modules(prefix):
            for name, p in m._parameters.items():
                yield (f"{path}.{name}" if path else name), p

    def parameters(self):
        return (p for m in self._walk() for p in m._parameters.values())

    def named_buffers(self):
        for path, m in self.named_modules():
            for name, b in m._buffers.items():
                yield (f"{path}.{name}" if path else name), b

    @hooks.host_op(replay=lambda self: functools.partial(_forget_grads,
                                                          list(self.parameters())))
    def zero_grad(self) -> None:
        _forget_grads(self.parameters())

    def train(self, mode: bool = True) -> "Module":
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self) -> "Module":
        return self.train(False)

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Every parameter and buffer by dotted name, as copies of their arrays."""
        out = OrderedDict((k, p.data.copy()) for k, p in self.named_parameters())
        out.update((k, np.array(b, copy=True)) for k, b in self.named_buffers())
        return out

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        """Copy `state`'s arrays into the parameters and buffers with the same names."""
        own = dict(self.named_parameters())
        bufs = dict(self.named_buffers())
        if strict:
            missing = [k for k in list(own) + list(bufs) if k not in state]
            extra = [k for k in state if k not in own and k not in bufs]
            if missing or extra:
                raise model_error(
                    f"load_state_dict into {type(self).__name__}: the checkpoint does not "
                    f"match the model (missing keys {missing}, unexpected keys {extra})",
                    hint="load a checkpoint of this architecture, or pass strict=False")
        for k, v in state.items():
            target = own[k].data if k in own else bufs.get(k)
            if target is None:
                continue
            v = np.asarray(v)
            if v.shape != target.shape:
                raise model_error(
                    f"load_state_dict into {type(self).__name__}: '{k}' has shape "
                    f"{v.shape} in the checkpoint but {target.shape} in the model",
                    hint="the checkpoint is of another model or configuration")
            target[...] = v.astype(target.dtype, copy=False)

    # ------------------------------------------------------------ display
    def extra_repr(self) -> str:
        return ""

    def name_line(self) -> str:
        """The layer on one line (its class and extra_repr), for error messages."""
        return f"{type(self).__name__}({self.extra_repr()})"

    def __repr__(self) -> str:
        lines = [f"  ({n}): " + repr(m).replace("\n", "\n  ") for n, m in self._modules.items()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ("\n" + "\n".join(lines) + "\n)" if lines else ")")


class Sequential(Module):
    """Applies its modules in order."""

    def __init__(self, *modules: Module):
        super().__init__()
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise model_error(f"Sequential: item {i} is a {type(m).__name__}, not a "
                                  "Module")
            setattr(self, str(i), m)

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def forward(self, x):
        mods, i = list(self._modules.values()), 0
        while i < len(mods):  # a layer may run the ones after it in its own op
            fused = getattr(mods[i], "fused_forward", None)
            done = fused(x, mods[i + 1:i + 3]) if fused is not None else None
            if done is None:
                x, i = mods[i](x), i + 1
            else:
                x, i = done[0], i + done[1]
        return x


def as_input(layer: Module, x, dtype) -> Tensor:
    """`x` as a Tensor of the layer's dtype (numpy arrays are accepted and converted only
    when their dtype matches). A layer whose parameters are bfloat16/float16 (built so, or
    narrowed by MixedPrecision) takes that dtype, and float data is rounded into it
    (autocast's rule)."""
    t = x if isinstance(x, Tensor) else Tensor(np.asarray(x))
    first = next(iter(layer._parameters.values()), None)  # own, else a submodule's
    if first is None:
        first = next(layer.parameters(), None)
    if first is not None and first.dtype.itemsize == 2 and first.dtype.name in NARROW:
        dtype = first.dtype
    if t.dtype == dtype:
        return t
    if np.dtype(dtype).name in NARROW and floating(t.dtype):
        return cast(t, dtype)
    raise model_error(f"{layer.name_line()}: expected input of dtype {np.dtype(dtype)}; got "
                      f"{t.dtype} (shape {t.shape})", hint=f"convert the input: {cast_hint(dtype)}")
