"""Low-precision Linear layers: bf16 or fp8 gemms with float32 accumulation, per-tensor
FP8 delayed scaling (tilepy.precision.scaling.DelayedScaling: e4m3 activations and
weights, e5m2 gradients, scales from an amax history) and dynamic precision switching
(tilepy.precision.switching.PrecisionController moves each layer along fp8 -> bf16 ->
fp32 from the overflow/underflow fractions the quantise kernel counts).

`convert(model, "fp8" | "bf16" | "fp32" | PrecisionController())` swaps every nn.Linear
for a PrecisionLinear holding the same Parameters (optimisers, state_dict keys and master
weights are unchanged); the quantise and gemm kernels are models/kernels/lowp.py.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import kops as K
from tilepy.models.errors import model_error
from tilepy.models.kernels import lowp as L
from tilepy.models.kernels.launch import launch
from tilepy.models.nn import functional as F
from tilepy.models.nn.layers import Linear
from tilepy.models.nn.module import Module, as_input
from tilepy.models.ops import record
from tilepy.models.tensor import Tensor
from tilepy.precision.formats import get_format
from tilepy.precision.scaling import DelayedScaling
from tilepy.precision.switching import PrecisionController

E4M3, E5M2, BF16 = "float8_e4m3fn", "float8_e5m2", "bfloat16"
BLOCK = 1024
FIXED = {"fp8": E4M3, "bf16": BF16, "fp32": "float32", E4M3: E4M3, BF16: BF16,
         "float32": "float32"}


class Scales:
    """One layer's delayed scaling: inputs and weights in e4m3, output gradients in e5m2,
    and the last step's worst (overflow, underflow) fractions in those formats."""

    def __init__(self, history_len: int = 16, margin: int = 0):
        self.x = DelayedScaling(E4M3, margin, history_len)
        self.w = DelayedScaling(E4M3, margin, history_len)
        self.g = DelayedScaling(E5M2, margin, history_len)
        self.fractions = [0.0, 0.0]


def quantize(a: np.ndarray, fmt: str, scaling: DelayedScaling, fractions: list,
             observe: bool) -> tuple[np.ndarray, np.float32]:
    """a (float32) in `fmt` with the delayed scale when fmt is fp8 (1 for bf16), and the
    inverse scale. The overflow/underflow counts are taken against scaling's fp8 format at
    its current scale in both cases (what fp8 would face); they raise `fractions`."""
    flat = np.ascontiguousarray(a, np.float32).reshape(-1)
    lim, s = get_format(scaling.fmt), np.float32(scaling.scale)
    fp8 = fmt != BF16
    p = np.array([s, lim.max_finite, lim.min_normal] if fp8 else
                 [1.0, lim.max_finite / s, lim.min_normal / s], np.float32)
    q = np.empty(flat.shape, get_format(fmt).np_dtype)
    stats = np.empty((max(1, -(-flat.size // BLOCK)), 3), np.float32)
    launch(K.kernel(L.quantize, block=BLOCK, fmt=fmt), flat, p, q, stats)
    if observe:  # block partials combined by exact operations: a max and integer counts
        scaling.observe(float(stats[:, 0].max()))
        n = max(flat.size, 1)
        fractions[0] = max(fractions[0], float(stats[:, 1].sum()) / n)
        fractions[1] = max(fractions[1], float(stats[:, 2].sum()) / n)
    return q.reshape(a.shape), np.float32(1.0) / s if fp8 else np.float32(1.0)


def _gemm(a, b, inv, trans_a=False, trans_b=False) -> np.ndarray:
    m = a.shape[1] if trans_a else a.shape[0]
    n = b.shape[0] if trans_b else b.shape[1]
    out = np.empty((m, n), np.float32)
    launch(K.kernel(L.scaled_gemm, a_dtype=a.dtype, b_dtype=b.dtype, trans_A=trans_a,
                    trans_B=trans_b), a, b, np.array([inv], np.float32), out)
    return out


def lowp_linear(x: Tensor, weight: Tensor, bias, fmt: str, scales: Scales,
                training: bool = True, after_backward=None) -> Tensor:
    """x @ weight.T + bias with both operands in `fmt` (e4m3 or bf16) and the output
    gradient in e5m2 (bf16); bias and accumulation in float32. Parameters that
    MixedPrecision keeps in bfloat16/float16 are widened to float32 first (exactly) and the
    output and gradients are rounded into their tensors' dtypes (convert kernels)."""
    k, store = weight.shape[1], weight.dtype
    grad_fmt = E5M2 if fmt == E4M3 else BF16
    x2 = K.convert(x.data.reshape(-1, k), np.float32)
    fr = scales.fractions
    xq, sx = quantize(x2, fmt, scales.x, fr, training)
    wq, sw = quantize(K.convert(weight.data, np.float32), fmt, scales.w, fr, training)
    y = _gemm(xq, wq, sx * sw, trans_b=True)
    if bias is not None:
        K.binary(y, K.convert(bias.data, np.float32), "add", out=y)

    def bwd(g):
        g2 = K.convert(np.ascontiguousarray(g).reshape(-1, weight.shape[0]), np.float32)
        gq, sg = quantize(g2, grad_fmt, scales.g, fr, True)
        gx = (K.convert(_gemm(gq, wq, sg * sw), x.dtype).reshape(x.shape)
              if x.requires_grad else None)
        gw = K.convert(_gemm(gq, xq, sg * sx, trans_a=True), store)
        gb = (K.convert(K.reduce(g2, (0,), "sum", False), bias.dtype)
              if bias is not None else None)
        if after_backward is not None:
            after_backward()
        return gx, gw, gb
    parents = (x, weight) if bias is None else (x, weight, bias)
    y = K.convert(y, store)  # the layer's dtype: bfloat16 under MixedPrecision's policy
    return record(y.reshape(*x.shape[:-1], weight.shape[0]), parents, bwd, f"linear_{fmt}")


class PrecisionLinear(Module):
    """A Linear (the same weight and bias Parameters) whose gemms run in the format its
    `precision` names ("fp8", "bf16", "fp32") or a PrecisionController picks per step."""

    def __init__(self, linear: Linear, name: str, precision, history_len: int = 16,
                 margin: int = 0):
        super().__init__()
        if not isinstance(precision, PrecisionController) and precision not in FIXED:
            raise model_error(f"precision must be 'fp8', 'bf16', 'fp32' or a "
                              f"PrecisionController; got {precision!r}")
        if linear.weight.dtype != np.float32:
            raise model_error(f"{name}: low-precision layers take float32 parameters; got "
                              f"{linear.weight.dtype}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.name, self.precision = name, precision
        self.scales = Scales(history_len, margin)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"format={self.format()}")

    def format(self) -> str:
        p = self.precision
        return p.format(self.name) if isinstance(p, PrecisionController) else FIXED[p]

    def _report(self) -> None:
        """One step's fractions to the controller: the fp8 numbers are the current
        format's at fp8, else what narrowing to fp8 would face (bf16 and float32 share
        float32's exponent range: no overflow or underflow at these magnitudes)."""
        over, under = self.scales.fractions
        if self.format() == E4M3:
            self.precision.observe(self.name, over, under)
        else:
            self.precision.observe(self.name, 0.0, 0.0, narrower=(over, under))

    def forward(self, x):
        x = as_input(self, x, np.float32)
        if x.ndim < 1 or x.shape[-1] != self.in_features:
            raise model_error(f"{self!r}: expected input of shape (..., {self.in_features});"
                              f" got {x.shape}")
        self.scales.fractions[:] = [0.0, 0.0]
        fmt = self.format()
        dynamic = isinstance(self.precision, PrecisionController) and self.training
        if fmt == "float32":
            if dynamic:
                self.precision.observe(self.name, 0.0, 0.0)
            return F.linear(x, self.weight, self.bias, who=self)
        return lowp_linear(x, self.weight, self.bias, fmt, self.scales, self.training,
                           self._report if dynamic else None)


def convert(model: Module, precision, history_len: int = 16, margin: int = 0) -> Module:
    """Swap every nn.Linear inside `model` (in place, order kept) for a PrecisionLinear
    named by its path ("blocks.0.fc"); returns the model."""
    for path, parent in list(model.named_modules()):
        for name, child in list(parent._modules.items()):
            if isinstance(child, Linear):
                full = f"{path}.{name}" if path else name
                parent._modules[name] = PrecisionLinear(child, full, precision, history_len,
                                                        margin)
    return model
