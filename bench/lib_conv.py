"""Library benchmark rows for the convolutions and Strassen (issue 18; bench18.md's
protocol): conv2d NHWC in the direct and im2col forms against im2col + numpy BLAS,
Winograd F(2x2,3x3) and F(4x4,3x3) against tilepy's direct form, Strassen-Winograd
against numpy's BLAS matmul. Every output is checked against its derived bound
(tilepy.kernels.checks) before it is timed; times are the minimum over rounds of
alternating runs (tilepy fast, tilepy exact, peer, ...) after a warm-up call, with
Numba's and BLAS's default thread counts (equal here). Prints nothing itself; run

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/lib_conv.py [--quick]

for the table (ratios peer / tilepy: > 1 means tilepy is faster).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle pools must not spin (perf-log)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tilepy  # noqa: E402
from tilepy.kernels import checks  # noqa: E402
from tilepy.kernels.conv_direct import Conv2d  # noqa: E402
from tilepy.kernels.strassen import Strassen  # noqa: E402
from tilepy.kernels.winograd import Winograd  # noqa: E402

ROUNDS = 5


class Im2col:
    """The peer: conv2d NHWC as numpy im2col (one column buffer, allocated once) and one
    BLAS matmul into a preallocated output."""

    def __init__(self, x, w, pad):
        N, H, W, C = x.shape
        KH, KW, _, F = w.shape
        self.OH, self.OW = H + 2 * pad - KH + 1, W + 2 * pad - KW + 1
        self.xp = np.zeros((N, H + 2 * pad, W + 2 * pad, C), x.dtype)
        self.cols = np.empty((N, self.OH, self.OW, KH * KW * C), x.dtype)
        self.wm, self.y = w.reshape(-1, F), np.empty((N, self.OH, self.OW, F), x.dtype)
        self.x, self.pad, self.k = x, pad, (KH, KW, C)

    def __call__(self):
        (KH, KW, C), p = self.k, self.pad
        self.xp[:, p:self.xp.shape[1] - p, p:self.xp.shape[2] - p] = self.x
        for t in range(KH * KW):
            kh, kw = divmod(t, KW)
            self.cols[..., t * C:(t + 1) * C] = self.xp[:, kh:kh + self.OH, kw:kw + self.OW]
        n = self.y.size // self.y.shape[-1]
        np.matmul(self.cols.reshape(n, -1), self.wm, out=self.y.reshape(n, -1))
        return self.y


def _mode(fn, fast: bool):
    def call():
        with tilepy.backend("jit", fast=fast):
            return fn()
    return call


def _check(case, out) -> str:
    """'ok, max err X <= bound Y' (Y: the bound where err/bound is largest), or raise."""
    if not case.passes(out):
        err, ratio = case.error(out)
        raise AssertionError(f"{case.name} {case.shape}: error {err:.3g} is {ratio:.3g}x "
                             "its bound")
    err = np.abs(np.asarray(out, np.float64) - case.reference)
    at = np.unravel_index(np.argmax(err / case.bound), err.shape)
    return f"ok, max err {err.max():.2g} <= bound {case.bound[at]:.2g}"


def _times(fns: dict, rounds: int = ROUNDS) -> dict:
    """Minimum seconds per competitor over `rounds` alternating rounds after a warm-up."""
    for f in fns.values():
        f()
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            best[k] = min(best[k], time.perf_counter() - t)
    return best


def _conv_rows(N: int) -> list[dict]:
    rng = np.random.default_rng(0)
    H = W = 56
    C = F = 64
    shape = f"{N}x{H}x{W}x{C} 3x3x{F} pad 1"
    case = checks.conv_form_case(rng, N, H, W, C, F, pad=1)
    x, w = case.inputs
    peer = Im2col(x, w, 1)
    rows = []
    for form in ("direct", "im2col"):
        fast, exact = (Conv2d(N, H, W, C, F, pad=1, form=form) for _ in range(2))
        f, e = _mode(lambda c=fast: c(x, w), True), _mode(lambda c=exact: c(x, w), False)
        check = f"fast {_check(case, f())}; exact {_check(case, e())}"
        t = _times({"fast": f, "exact": e, "peer": peer})
        rows.append(dict(kernel=f"conv2d {form} NHWC {shape}", check=check, fast=t["fast"],
                         exact=t["exact"], peer=t["peer"], peer_name="im2col + numpy BLAS",
                         goal=">= 1x peer" if form == "direct" else "-"))
    return rows + [_winograd_row(N, H, W, C, F, m, shape) for m in (2, 4)]


def _winograd_row(N, H, W, C, F, m, shape) -> dict:
    case = checks.winograd_case(np.random.default_rng(m), N, H, W, C, F, m=m)
    x, w = case.inputs
    fast, exact = Winograd(N, H, W, C, F, m), Winograd(N, H, W, C, F, m)
    direct = Conv2d(N, H, W, C, F, pad=1)
    f = _mode(lambda: (fast.filters(w), fast(x))[1], True)
    e = _mode(lambda: (exact.filters(w), exact(x))[1], False)
    check = f"fast {_check(case, f())}; exact {_check(case, e())}"
    t = _times({"fast": f, "exact": e, "peer": _mode(lambda: direct(x, w), True)})
    return dict(kernel=f"winograd F({m}x{m},3x3) fused NHWC {shape}", check=check,
                fast=t["fast"], exact=t["exact"], peer=t["peer"],
                peer_name="tilepy conv2d direct, fast", goal=">= 1.5x peer",
                note="filter transform included")


def _strassen_row(n: int, levels: int) -> dict:
    case = checks.strassen_case(np.random.default_rng(n), n, n, n, levels)
    a, b = case.inputs
    out, peer_out = np.empty((n, n), np.float32), np.empty((n, n), np.float32)
    prod = Strassen(n, n, n, levels)  # work arrays allocated once, as the peer's output
    f = _mode(lambda: prod(a, b, out), True)
    check = f"fast {_check(case, f())}"
    t = _times({"fast": f, "peer": lambda: np.matmul(a, b, out=peer_out)})
    return dict(kernel=f"strassen {levels} level(s) fp32 {n}", check=check, fast=t["fast"],
                exact=None, peer=t["peer"], peer_name="numpy BLAS matmul",
                goal="crossover (docs/conv.md)",
                note=f"{2 * n ** 3 / t['fast'] / 1e9:.0f} GFLOP/s effective")


def rows(quick: bool = False) -> list[dict]:
    """The rows of this area (bench18.md): conv2d forms, Winograd, Strassen."""
    strassen_sizes = [(512, 1)] if quick else [(1024, 1), (2048, 1), (4096, 1), (4096, 2)]
    return _conv_rows(2 if quick else 8) + [_strassen_row(n, lv) for n, lv in strassen_sizes]


def _ms(s) -> str:
    return "-" if s is None else f"{s * 1e3:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes")
    args = ap.parse_args()
    print("| kernel | check | fast ms | exact ms | peer ms | peer | peer/fast | peer/exact "
          "| goal | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows(args.quick):
        ratio = {k: "-" if r[k] is None else f"{r['peer'] / r[k]:.2f}x" for k in ("fast", "exact")}
        print(f"| {r['kernel']} | {r['check']} | {_ms(r['fast'])} | {_ms(r['exact'])} | "
              f"{_ms(r['peer'])} | {r['peer_name']} | {ratio['fast']} | {ratio['exact']} | "
              f"{r['goal']} | {r.get('note', '')} |", flush=True)


if __name__ == "__main__":
    main()
