"""Dynamic precision switching: a controller that moves each layer along a ladder of formats
(e.g. fp8 -> bf16 -> fp32) from its measured overflow / underflow fractions.

Owns the rule with hysteresis (widen after `patience` bad observations in a row, narrow
only after `cooldown` clean ones); `range_stats` measures; nothing here converts tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tilepy.precision.formats import get_format


def range_stats(x, fmt) -> tuple[float, float]:
    """(overflow fraction, underflow fraction) of x for fmt: |x| > max finite or not
    finite; nonzero |x| below the smallest normal (subnormal or flushed to zero)."""
    f = get_format(fmt)
    a = np.abs(np.asarray(x, np.float64)).ravel()
    if a.size == 0:
        return 0.0, 0.0
    over = ~np.isfinite(a) | (a > f.max_finite)
    under = (a > 0) & (a < f.min_normal)
    return float(over.mean()), float(under.mean())


@dataclass
class SwitchConfig:
    """Thresholds on overflow + underflow fraction: widen above `widen_above` for
    `patience` observations in a row; narrow below `narrow_below` for `cooldown`."""

    ladder: tuple[str, ...] = ("float8_e4m3fn", "bfloat16", "float32")
    widen_above: float = 1e-3
    narrow_below: float = 1e-5
    patience: int = 3
    cooldown: int = 20

    def __post_init__(self):
        self.ladder = tuple(get_format(f).name for f in self.ladder)
        if not self.narrow_below < self.widen_above:
            raise ValueError("narrow_below must be below widen_above (the dead band)")


@dataclass
class _LayerState:
    level: int = 0
    bad: int = 0
    clean: int = 0


@dataclass
class PrecisionController:
    """Per-layer format choice. `observe` feeds one step's fractions and returns the
    format to use next; `switches` logs (step, layer, from, to)."""

    config: SwitchConfig = field(default_factory=SwitchConfig)
    states: dict[str, _LayerState] = field(default_factory=dict)
    switches: list[tuple[int, str, str, str]] = field(default_factory=list)
    step: int = 0

    def format(self, layer: str) -> str:
        return self.config.ladder[self.states.setdefault(layer, _LayerState()).level]

    def observe(self, layer: str, overflow: float, underflow: float,
                narrower: tuple[float, float] | None = None) -> str:
        """One step's (overflow, underflow) fractions in the layer's current format, and
        optionally in the next narrower format (what narrowing would face; default: the
        same numbers). Returns the format to use from now on."""
        st = self.states.setdefault(layer, _LayerState())
        below = sum(narrower) if narrower is not None else overflow + underflow
        st.bad = st.bad + 1 if overflow + underflow > self.config.widen_above else 0
        st.clean = st.clean + 1 if below < self.config.narrow_below else 0
        if st.bad >= self.config.patience and st.level < len(self.config.ladder) - 1:
            self._move(layer, st, +1)
        elif st.clean >= self.config.cooldown and st.level > 0:
            self._move(layer, st, -1)
        self.step += 1
        return self.format(layer)

    def observe_tensor(self, layer: str, x) -> str:
        """observe() with x's fractions measured in the current and next narrower format."""
        st = self.states.setdefault(layer, _LayerState())
        ladder = self.config.ladder
        narrower = range_stats(x, ladder[max(st.level - 1, 0)])
        return self.observe(layer, *range_stats(x, ladder[st.level]), narrower=narrower)

    def _move(self, layer: str, st: _LayerState, by: int) -> None:
        old = self.config.ladder[st.level]
        st.level += by
        st.bad = st.clean = 0
        self.switches.append((self.step, layer, old, self.config.ladder[st.level]))
