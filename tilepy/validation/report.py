"""What `validate` returns: a `Report` with the verdict of each tier and its evidence,
per-element errors (in output ulps and as a ratio to the sound bound), the worst elements
with their tile coordinates, an error histogram and the mean bias.

Owns presentation only (text, HTML, a matplotlib heat map loaded lazily); the numbers come
from bounds.py and stats.py.
"""

from __future__ import annotations

import html
from functools import cached_property

import numpy as np

from tilepy.validation.models import ulp

BINS = (0, 2.0 ** -10, 2.0 ** -6, 2.0 ** -3, 0.25, 0.5, 1.0, 2.0, 16.0, np.inf)


class Report:
    """The result of `tilepy.validate`. `bool(report)` is `report.passed`."""

    def __init__(self, op, num, out, exact, bound, stats, tile, notes=(), error=None,
                 abs_error=None):
        self.op, self.numerics, self.tile = op, num, tuple(tile)
        self.output, self.exact, self.bound = out, exact, bound
        self.stats, self.notes = stats, list(notes)
        with np.errstate(invalid="ignore"):
            self.error = out - exact if error is None else error
            abs_error = np.abs(self.error) if abs_error is None else abs_error
            self.flagged = ~(abs_error <= bound)
            if self.flagged.any():  # equal infinities and NaN where the exact is NaN pass
                o, e = out[self.flagged], exact[self.flagged]
                self.flagged[self.flagged] = ~((o == e) | (np.isnan(o) & np.isnan(e)))
        self.sound_passed = not bool(self.flagged.any())

    # ------------------------------------------------------------ numbers
    @property
    def passed(self) -> bool:
        return self.sound_passed and self.stats.passed

    def __bool__(self) -> bool:
        return self.passed

    @cached_property
    def ratio(self) -> np.ndarray:
        """|output - exact| / sound bound, per element (<= 1 passes the sound tier)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.abs(self.error) / self.bound
        return np.where(self.flagged | np.isfinite(r), r, 0.0)

    @cached_property
    def ulps(self) -> np.ndarray:
        """output - exact in ulps of the output dtype at the exact value."""
        return self.error / ulp(self.exact, self.numerics.output)

    @property
    def max_ratio(self) -> float:
        """The largest error/bound (inf when a flagged element is not finite)."""
        if not np.isfinite(self.ratio[self.flagged]).all():
            return float("inf")
        return float(self.ratio.max()) if self.ratio.size else 0.0

    def tile_of(self, index) -> tuple:
        if len(index) >= 2:
            return (index[-2] // self.tile[0], index[-1] // self.tile[1])
        return (index[0] // self.tile[0],) if index else ()

    def worst(self, k: int = 8) -> list[dict]:
        """The k elements with the largest error/bound ratio (non-finite first)."""
        r = np.where(np.isfinite(self.ratio), self.ratio, np.inf).ravel()
        k = min(k, r.size)
        if k == 0:
            return []
        top = np.argpartition(-r, k - 1)[:k] if r.size > k else np.arange(r.size)
        top = top[np.argsort(-r[top], kind="stable")]
        rows = []
        for flat in top:
            idx = tuple(int(i) for i in np.unravel_index(flat, self.exact.shape))
            rows.append({"index": idx, "tile": self.tile_of(idx),
                         "output": float(self.output[idx]), "exact": float(self.exact[idx]),
                         "error": float(self.error[idx]), "ulps": float(self.ulps[idx]),
                         "bound": float(self.bound[idx]), "ratio": float(r[flat])})
        return rows

    def histogram(self) -> list[tuple[str, int]]:
        """Counts of error/bound in bins (the last bins are failures of the sound tier)."""
        counts, _ = np.histogram(np.nan_to_num(self.ratio, nan=np.inf, posinf=1e300),
                                 bins=np.array(BINS[:-1] + (1e301,)))
        labels = [f"<= {b:.3g}" if i else "0" for i, b in enumerate(BINS[1:])]
        return list(zip(labels[:-1] + ["> 16"], counts.tolist()))

    @property
    def mean_bias(self) -> dict:
        e = np.isfinite(self.error)
        u = self.ulps[e]
        return {"mean_error": float(self.error[e].mean()) if e.any() else 0.0,
                "mean_ulps": float(u.mean()) if u.size else 0.0}

    # ------------------------------------------------------------ text
    def verdicts(self) -> list[str]:
        n = int(self.flagged.sum())
        s = (f"sound tier: {'PASS' if self.sound_passed else 'FAIL'}: {n} of "
             f"{self.flagged.size} elements over the derived bound "
             f"(max error/bound {self.max_ratio:.3g})")
        t = (f"statistical tier: {'PASS' if self.stats.passed else 'FAIL'}"
             + (f": {self.stats.summary}" if self.stats.summary else ""))
        return [s, t]

    def __str__(self) -> str:
        lines = [f"validate {self.op} {self.exact.shape} -> {self.numerics.output}: "
                 f"{'PASS' if self.passed else 'FAIL'}", f"  numerics: {self.numerics.describe()}"]
        lines += ["  " + v for v in self.verdicts()]
        lines += ["    " + e for e in self.stats.evidence]
        b = self.mean_bias
        lines.append(f"  mean bias: {b['mean_error']:+.3g} ({b['mean_ulps']:+.3g} ulps)")
        lines.append("  error/bound histogram: " + ", ".join(
            f"{lab}: {c}" for lab, c in self.histogram() if c))
        lines.append(f"  worst elements (tile {self.tile}):")
        for w in self.worst(5):
            lines.append(f"    {w['index']} tile {w['tile']}: out {w['output']:.7g} exact "
                         f"{w['exact']:.7g} error {w['error']:+.3g} ({w['ulps']:+.3g} ulps) "
                         f"bound {w['bound']:.3g} ratio {w['ratio']:.3g}")
        lines += ["  note: " + n for n in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Report {self.op} {'PASS' if self.passed else 'FAIL'} max ratio " \
               f"{self.max_ratio:.3g}>"

    def _repr_html_(self) -> str:
        esc = html.escape
        head = f"<b>validate {esc(self.op)}</b>: {'PASS' if self.passed else 'FAIL'}"
        items = "".join(f"<li>{esc(v)}</li>" for v in self.verdicts() + self.stats.evidence)
        cells = "".join(
            f"<tr><td>{w['index']}</td><td>{w['tile']}</td><td>{w['output']:.7g}</td>"
            f"<td>{w['exact']:.7g}</td><td>{w['ulps']:+.3g}</td><td>{w['ratio']:.3g}</td></tr>"
            for w in self.worst(5))
        table = ("<table><tr><th>index</th><th>tile</th><th>output</th><th>exact</th>"
                 f"<th>ulps</th><th>error/bound</th></tr>{cells}</table>")
        return f"<div>{head}<ul>{items}</ul>{table}</div>"

    def plot(self, ax=None):
        """A heat map of log2(error/bound) over the output's 2-D view (matplotlib, the
        `viz` extra)."""
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            from tilepy.validation.errors import ConfigError

            raise ConfigError("Report.plot needs matplotlib, which is not installed",
                              "pip install 'tilepy-runtime[viz]'") from None
        r = self.ratio.reshape(-1, self.ratio.shape[-1]) if self.ratio.ndim else \
            self.ratio.reshape(1, 1)
        if ax is None:
            _, ax = plt.subplots()
        with np.errstate(divide="ignore"):
            im = ax.imshow(np.log2(np.maximum(r, 2.0 ** -30)), cmap="magma", vmin=-20, vmax=2,
                           interpolation="nearest", aspect="auto")
        ax.figure.colorbar(im, ax=ax, label="log2(error / bound)")
        ax.set_title(f"{self.op}: {'PASS' if self.passed else 'FAIL'}")
        return ax
