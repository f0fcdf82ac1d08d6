"""Training-time scaling: dynamic loss scaling (PyTorch GradScaler semantics) and FP8
tensor scaling (delayed scaling with an amax history and margin, and current scaling).

Owns only the scale bookkeeping and the scale-then-cast step; rounding is rounding.cast.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilepy.precision.formats import get_format
from tilepy.precision.rounding import cast


class DynamicLossScaler:
    """Loss scaling as torch.amp.GradScaler: start at `init_scale`; a step whose gradients
    hold inf/NaN is skipped and multiplies the scale by `backoff_factor`; after
    `growth_interval` consecutive clean steps the scale grows by `growth_factor`."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True):
        self.scale = float(init_scale) if enabled else 1.0
        self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
        self.growth_interval, self.enabled = growth_interval, enabled
        self.growth_tracker = 0
        self.skipped_steps = 0

    def scale_loss(self, loss):
        """loss * scale (backpropagate this)."""
        return loss * np.float32(self.scale)

    def unscale(self, grads: list[np.ndarray]) -> tuple[list[np.ndarray], bool]:
        """(grads * (1 / scale) in float32, found_inf): found_inf if any result is not
        finite (checked after unscaling, as GradScaler does)."""
        inv = np.float32(1.0 / self.scale)
        out = [np.asarray(g, np.float32) * inv for g in grads]
        return out, not all(np.isfinite(g).all() for g in out)

    def update(self, found_inf: bool) -> bool:
        """Advance the schedule after a step; return True if the step should be applied."""
        if not self.enabled:
            return True
        if found_inf:
            self.scale *= self.backoff_factor
            self.growth_tracker = 0
            self.skipped_steps += 1
            return False
        self.growth_tracker += 1
        if self.growth_tracker == self.growth_interval:
            self.scale *= self.growth_factor
            self.growth_tracker = 0
        return True

    def state_dict(self) -> dict:
        return {"scale": self.scale, "growth_tracker": self.growth_tracker,
                "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict) -> None:
        self.scale = float(state["scale"])
        self.growth_tracker = int(state["growth_tracker"])
        self.skipped_steps = int(state.get("skipped_steps", 0))


@dataclass(frozen=True)
class ScaledTensor:
    """FP8 codes of x * scale, and scale_inv (float32) to dequantise: value = code * scale_inv."""

    data: np.ndarray  # ml_dtypes array of the fp8 format
    scale_inv: np.float32

    def dequantize(self) -> np.ndarray:
        return self.data.astype(np.float32) * self.scale_inv


def _scale_from_amax(amax: float, fmt_max: float, margin: int, previous: float) -> float:
    """TransformerEngine's rule: (fmt_max / amax) / 2^margin; keep `previous` if amax is
    zero or not finite."""
    if not (np.isfinite(amax) and amax > 0):
        return previous
    return float(np.float32(np.float32(fmt_max) / np.float32(amax)) / np.float32(2.0**margin))


def _apply(x: np.ndarray, scale: float, fmt: str) -> ScaledTensor:
    s = np.float32(scale)
    data = cast(np.asarray(x, np.float32) * s, fmt, saturate=True)
    return ScaledTensor(data, np.float32(np.float32(1) / s))


class DelayedScaling:
    """FP8 delayed scaling for one tensor: quantise with the scale derived from the amax
    history of previous steps (max over the last `history_len`, or the most recent), then
    record this step's amax. The first step uses scale 1."""

    def __init__(self, fmt: str = "float8_e4m3fn", margin: int = 0, history_len: int = 16,
                 algo: str = "max"):
        if algo not in ("max", "most_recent"):
            raise ValueError(f"amax algorithm must be 'max' or 'most_recent', got {algo!r}")
        self.fmt = get_format(fmt).name
        self.margin, self.algo = margin, algo
        self.history = np.zeros(history_len, np.float32)  # [0] is the most recent
        self.scale = 1.0
        self.steps = 0

    def __call__(self, x) -> ScaledTensor:
        """Quantise x with the current scale, record amax(x), and update the scale."""
        out = _apply(x, self.scale, self.fmt)
        self.observe(float(np.max(np.abs(x))) if np.size(x) else 0.0)
        return out

    def observe(self, amax: float) -> None:
        self.history = np.roll(self.history, 1)
        self.history[0] = amax
        self.steps += 1
        seen = self.history[: min(self.steps, self.history.size)]
        ref = float(seen[0]) if self.algo == "most_recent" else float(np.max(seen))
        self.scale = _scale_from_amax(ref, get_format(self.fmt).max_finite, self.margin,
                                      self.scale)


def current_scaling(x, fmt: str = "float8_e4m3fn", margin: int = 0) -> ScaledTensor:
    """FP8 current (just-in-time) scaling: scale from this tensor's own amax."""
    amax = float(np.max(np.abs(x))) if np.size(x) else 0.0
    scale = _scale_from_amax(amax, get_format(fmt).max_finite, margin, 1.0)
    return _apply(x, scale, get_format(fmt).name)
