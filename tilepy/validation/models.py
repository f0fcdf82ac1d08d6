"""The numerics of another backend, as `validate(..., **config)` describes them: storage
dtypes, compute and output dtypes, the accumulation model, intermediate roundings, eps.

Owns `Numerics` (the parsed config), the unit roundoffs each accumulation model implies for
the sound bounds, and the roundings the models apply (tf32, ulps of any format). No bounds
and no statistics here: bounds.py and stats.py read these numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from tilepy.precision.formats import get_format
from tilepy.validation.errors import ConfigError

ACCUMULATE = {
    "fp32": "products summed in float32, any order (FMA, blocked, split-K)",
    "tf32": "inputs rounded to 10 mantissa bits (nearest-even), then float32 accumulation",
    "fp16": "products summed in float16",
    "bf16": "products summed in bfloat16",
    "fast": "fp8 fast accumulation: the accumulator truncated to `mantissa_bits` bits",
    "promote": "fp8: runs of `promote_every` k-steps in a truncating `mantissa_bits` "
               "accumulator, promoted into float32",
    "exact": "the exact sum rounded once to the output dtype (a correctly rounded backend)",
}
ALIASES = {"float32": "fp32", "ieee": "fp32", "float16": "fp16", "half": "fp16",
           "bfloat16": "bf16", "fast_accum": "fast", "truncate": "fast", "split_k": "fp32",
           "split-k": "fp32", "unknown": "fp32"}
KNOWN_KEYS = {"inputs", "compute", "output", "accumulate", "mantissa_bits", "promote_every",
              "intermediate", "eps", "rounding", "tile", "causal", "scale", "stride",
              "padding", "dilation", "groups", "layout", "reduction", "ignore_index",
              "transpose_a", "transpose_b", "atol", "rtol", "sample", "reference",
              "axis", "label_smoothing", "weight_layout", "dim", "variance"}


@dataclass(frozen=True)
class Numerics:
    """What the other backend did. `rounding="faithful"` (default) charges every rounding
    a whole ulp (2u), which covers round-toward-zero hardware accumulators; "nearest"
    charges half an ulp (u), the IEEE default."""
    inputs: dict = field(default_factory=dict)   # role -> storage dtype name
    compute: str = "float32"
    output: str = "float32"
    accumulate: str = "fp32"
    mantissa_bits: int = 14   # fp8 accumulator bits (DeepSeek-V3's ~14 on Hopper)
    promote_every: int = 128
    intermediate: dict = field(default_factory=dict)  # e.g. {"probs": "bfloat16"}
    eps: float | None = None
    rounding: str = "faithful"
    options: dict = field(default_factory=dict)   # op parameters: causal, stride, ...

    @property
    def per_rounding(self) -> float:
        """How many unit roundoffs one rounding may cost."""
        return 2.0 if self.rounding == "faithful" else 1.0

    def u(self, dtype) -> float:
        """The error one rounding to `dtype` may make, relative."""
        return self.per_rounding * unit_roundoff(dtype)

    def describe(self) -> str:
        acc = self.accumulate
        if acc in ("fast", "promote"):
            acc += f"({self.mantissa_bits} bits"
            acc += f", every {self.promote_every})" if self.accumulate == "promote" else ")"
        inter = "".join(f", {k} in {v}" for k, v in self.intermediate.items())
        return f"accumulate {acc}, compute {self.compute}, output {self.output}{inter}"


def unit_roundoff(dtype) -> float:
    """Half an ulp of 1.0, relative: 2^-(mantissa bits + 1)."""
    if str(dtype) == "tf32":
        return 2.0 ** -11
    return float(ml_dtypes.finfo(np.dtype(get_format(dtype).np_dtype)).eps) / 2


def tiny(dtype) -> float:
    """The smallest positive subnormal of `dtype` (the absolute floor of its rounding)."""
    return float(ml_dtypes.finfo(np.dtype(get_format(dtype).np_dtype)).smallest_subnormal)


def gamma(n: float, u: float) -> float:
    """n*u / (1 - n*u): the relative error bound of n successive roundings of unit u."""
    if n * u >= 1:
        return float("inf")
    return n * u / (1 - n * u)


def parse(config: dict, defaults: dict) -> Numerics:
    """`Numerics` from the user's keyword arguments, op defaults filling the gaps."""
    unknown = sorted(set(config) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(unknown)}",
                          f"known options: {', '.join(sorted(KNOWN_KEYS))}")
    merged = {**defaults, **{k: v for k, v in config.items() if v is not None}}
    acc = str(merged.get("accumulate", "fp32")).lower()
    acc = ALIASES.get(acc, acc)
    if acc not in ACCUMULATE:
        raise ConfigError(f"unknown accumulation model {merged['accumulate']!r}",
                          f"use one of {', '.join(ACCUMULATE)}")
    rounding = merged.get("rounding", "faithful")
    if rounding not in ("faithful", "nearest"):
        raise ConfigError(f"rounding must be 'faithful' or 'nearest', got {rounding!r}",
                          "'faithful' (the default) also covers truncating hardware")
    fields = {"compute", "output", "mantissa_bits", "promote_every", "eps"}
    kw = {k: merged[k] for k in fields if k in merged}
    for k in ("compute", "output"):
        if k in kw:
            kw[k] = _dtype_name(kw[k], k)
    inter = {k: _dtype_name(v, k) for k, v in dict(merged.get("intermediate") or {}).items()}
    inputs = {k: _dtype_name(v, k) for k, v in dict(merged.get("inputs") or {}).items()}
    options = {k: v for k, v in merged.items()
               if k not in fields | {"accumulate", "rounding", "intermediate", "inputs"}}
    return Numerics(inputs=inputs, accumulate=acc, rounding=rounding, intermediate=inter,
                    options=options, **kw)


def _dtype_name(x, what: str) -> str:
    try:
        return get_format(x).name
    except Exception:  # noqa: BLE001 - any unknown dtype spelling is the user's to fix
        raise ConfigError(f"{what}: unknown dtype {x!r}",
                          "use a name such as float32, bfloat16, float16, "
                          "float8_e4m3fn") from None


# ------------------------------------------------------------------ roundings


def round_mantissa(x, bits: int, mode: str = "nearest") -> np.ndarray:
    """float32 values rounded to `bits` explicit mantissa bits (tf32: 10), to nearest-even
    or truncated toward zero; returned as float64 (exact)."""
    v = np.ascontiguousarray(x, np.float32).view(np.uint32)
    drop = 23 - bits
    mask = np.uint32((1 << drop) - 1)
    if mode == "nearest":
        lsb = (v >> np.uint32(drop)) & np.uint32(1)
        v = v + (mask >> np.uint32(1)) + lsb
    finite = np.isfinite(np.asarray(x, np.float32))
    out = (v & ~mask).view(np.float32)
    return np.where(finite, out, np.asarray(x, np.float32)).astype(np.float64)


def ulp(x, dtype) -> np.ndarray:
    """The spacing of `dtype`'s grid at |x| (float64 array), subnormals included."""
    f = ml_dtypes.finfo(np.dtype(get_format(dtype).np_dtype))
    ax = np.abs(np.asarray(x, np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        _, e = np.frexp(np.where(np.isfinite(ax) & (ax > 0), ax, 1.0))
    e = np.maximum(e - 1, int(f.minexp))
    return np.ldexp(1.0, e - int(f.nmant))


def round_out(x, dtype) -> np.ndarray:
    """float64 values rounded once to `dtype`, back in float64."""
    from tilepy.precision.rounding import cast

    if get_format(dtype).name == "float64":
        return np.asarray(x, np.float64)
    return cast(np.asarray(x, np.float64), dtype).astype(np.float64)
