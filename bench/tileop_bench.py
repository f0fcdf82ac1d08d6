"""@tile_op benchmark: each declarative operator's scheduled kernel next to the hand-tiled
library kernel (tilepy.kernels) that computes the same thing, side by side on the JIT, and
the lines of each form.

Every row first checks that the two outputs have the same bits (or, where the library uses
another formulation, says so and checks the tile op against its own direct evaluation), so
a wrong kernel is never timed. Times are medians over interleaved rounds (each round runs
every competitor in a short burst and keeps the burst's median); ratios are medians of the
per-round ratios. Lines count code only: no blank lines, comments or docstrings.
Not a test.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/tileop_bench.py \
        [--rounds 5] [--only gemm,softmax,...]
"""

# ruff: noqa: F821  (i, j are the outputs' index names: free in a tile op body by design)

from __future__ import annotations

import argparse
import ast
import inspect
import math
import statistics
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tilepy  # noqa: E402
import tilepy.language as T  # noqa: E402
from tilepy import Tensor, tile_op  # noqa: E402
from tilepy import kernels as lib  # noqa: E402
from tilepy.kernels import flash_attn, xent  # noqa: E402

M, N, K = T.symbolic("M"), T.symbolic("N"), T.symbolic("K")
GELU_C = math.sqrt(2.0 / math.pi)


@tile_op
def matmul(a: Tensor[M, K], b: Tensor[K, N]) -> Tensor[M, N]:
    return sum(a[i, k] * b[k, j] for k in range(K))


@tile_op
def bias_gelu(x: Tensor[M, N], b: Tensor[N]) -> Tensor[M, N]:
    v = x[i, j] + b[j]
    return 0.5 * v * (1.0 + T.tanh(GELU_C * (v + 0.044715 * v * v * v)))


@tile_op
def softmax(x: Tensor[M, N]) -> Tensor[M, N]:
    m = max(x[i, k] for k in range(N))
    return T.exp(x[i, j] - m) / sum(T.exp(x[i, k] - m) for k in range(N))


@tile_op
def layernorm(x: Tensor[M, N], g: Tensor[N], b: Tensor[N]) -> Tensor[M, N]:
    mean = sum(x[i, k] for k in range(N)) / T.cast(N, "float32")
    var = sum((x[i, k] - mean) * (x[i, k] - mean) for k in range(N)) / T.cast(N, "float32")
    return (x[i, j] - mean) * T.rsqrt(var + 1e-5) * g[j] + b[j]


@tile_op
def rmsnorm(x: Tensor[M, N], w: Tensor[N]) -> Tensor[M, N]:
    r = T.rsqrt(sum(x[i, k] * x[i, k] for k in range(N)) / T.cast(N, "float32") + 1e-6)
    return x[i, j] * r * w[j]


@tile_op
def row_sum(x: Tensor[M, N]) -> Tensor[M]:
    return sum(x[i, k] for k in range(N))


B, H, S, D = T.symbolic("B"), T.symbolic("H"), T.symbolic("S"), T.symbolic("D")
SCALE = 1.0 / math.sqrt(64)


@tile_op(index="b h i d")
def attention(q: Tensor[B, H, S, D], k: Tensor[B, H, S, D], v: Tensor[B, H, S, D]) \
        -> Tensor[B, H, S, D]:
    m = max(sum(q[b, h, i, e] * k[b, h, l, e] for e in range(D)) for l in range(S))
    z = sum(T.exp((sum(q[b, h, i, e] * k[b, h, l, e] for e in range(D)) - m) * SCALE)
            for l in range(S))
    return sum(T.exp((sum(q[b, h, i, e] * k[b, h, l, e] for e in range(D)) - m) * SCALE)
               * v[b, h, l, d] for l in range(S)) / z


Nb, Hx, Wx, Cx, Fx, KH, KW = (T.symbolic(s) for s in ("Nb", "H", "W", "C", "F", "KH", "KW"))


@tile_op(index="n p q f")
def conv2d(x: Tensor[Nb, Hx, Wx, Cx], w: Tensor[KH, KW, Cx, Fx]) \
        -> Tensor[Nb, Hx - KH + 1, Wx - KW + 1, Fx]:
    return sum(x[n, p + r, q + s, c] * w[r, s, c, f]
               for r in range(KH) for s in range(KW) for c in range(Cx))


@tile_op(index="n p q f")
def conv2d_fixed(x: Tensor[4, 18, 18, 32], w: Tensor[3, 3, 32, 64]) -> Tensor[4, 16, 16, 64]:
    return sum(x[n, p + r, q + s, c] * w[r, s, c, f]
               for r in range(3) for s in range(3) for c in range(32))


@tile_op
def cross_entropy(x: Tensor[M, N], label: Tensor[M, "int32"]) -> Tensor[M]:
    m = max(x[i, k] for k in range(N))
    return T.log(sum(T.exp(x[i, k] - m) for k in range(N))) + m - x[i, label[i]]


@tile_op
def row_max(x: Tensor[M, N]) -> Tensor[M]:
    return max(x[i, k] for k in range(N))


@tile_op
def exp_sub(x: Tensor[M, N], m: Tensor[M]) -> Tensor[M, N]:
    return T.exp(x[i, j] - m[i])


@tile_op
def div_rows(x: Tensor[M, N], s: Tensor[M]) -> Tensor[M, N]:
    return x[i, j] / s[i]


@tile_op
def add(x: Tensor[M, N], y: Tensor[M, N]) -> Tensor[M, N]:
    return x[i, j] + y[i, j]


@tile_op
def attention2d(q: Tensor[M, N], k: Tensor[M, N], v: Tensor[M, N]) -> Tensor[M, N]:
    m = max(sum(q[i, e] * k[l, e] for e in range(N)) for l in range(M))
    z = sum(T.exp(sum(q[i, e] * k[l, e] for e in range(N)) - m) for l in range(M))
    return sum(T.exp(sum(q[i, e] * k[l, e] for e in range(N)) - m) * v[l, j]
               for l in range(M)) / z


def softmax_parts(x):
    e = exp_sub(x, row_max(x))
    return div_rows(e, row_sum(e))


def block(x, g1, b1, wq, wk, wv, wo, g2, b2, w1, c1, w2):
    """A transformer block's forward: one head, pre-norm, residuals, GELU MLP."""
    h = layernorm(x, g1, b1)
    a = attention2d(matmul(h, wq), matmul(h, wk), matmul(h, wv))
    r = add(x, matmul(a, wo))
    f = matmul(bias_gelu(matmul(layernorm(r, g2, b2), w1), c1), w2)
    return add(r, f)


def memory_rows(r) -> None:
    """Peak bytes of the transformer block's forward graph (traced, not run)."""
    s, e, hid = 512, 256, 1024
    f32 = np.float32
    args = (r.standard_normal((s, e)).astype(f32), *(np.ones(e, f32),) * 2,
            *(np.ones((e, e), f32),) * 4, *(np.ones(e, f32),) * 2, np.ones((e, hid), f32),
            np.ones(hid, f32), np.ones((hid, e), f32))
    print(f"\ntransformer block forward, {s} tokens x {e}, MLP {hid} (float32): peak bytes")
    for fuse in (False, True):
        p = tilepy.compile(block, fuse=fuse).memory_plan(*args)
        q = tilepy.compile(block, fuse=fuse).trace(*args).memory_plan(in_place=False)
        print(f"  {'fused' if fuse else 'unfused'} graph ({len(p.slots)} node outputs): "
              f"one buffer each {p.unplanned_bytes / 2**20:.2f} MiB; planned "
              f"{p.peak_bytes / 2**20:.2f} MiB ({1 - p.peak_bytes / p.unplanned_bytes:.0%} "
              f"less; {q.peak_bytes / 2**20:.2f} MiB without in-place); "
              f"live at once {p.live_bytes / 2**20:.2f} MiB")


def gemm_bias_gelu(x, w, b):
    return bias_gelu(matmul(x, w), b)


def mlp(x, w1, b1, w2):
    return matmul(bias_gelu(matmul(x, w1), b1), w2)


# ---------------------------------------------------------------- the rows


def _rows(r):
    f32 = np.float32
    x = r.standard_normal((2048, 1024)).astype(f32)
    vec = r.standard_normal(1024).astype(f32)
    vec2 = r.standard_normal(1024).astype(f32)
    a, b = r.standard_normal((512, 512)).astype(f32), r.standard_normal((512, 512)).astype(f32)
    xm, w1 = r.standard_normal((512, 256)).astype(f32), r.standard_normal((256, 1024)).astype(f32)
    w2 = r.standard_normal((1024, 256)).astype(f32)
    xc, wc = r.standard_normal((4, 18, 18, 32)).astype(f32), \
        r.standard_normal((3, 3, 32, 64)).astype(f32)
    labels = r.integers(0, 1024, 2048).astype(np.int32)
    qkv = tuple(r.standard_normal((1, 2, 256, 64)).astype(f32) for _ in range(3))
    g, gu = tilepy.compile(gemm_bias_gelu), tilepy.compile(gemm_bias_gelu, fuse=False)
    m, mu = tilepy.compile(mlp), tilepy.compile(mlp, fuse=False)
    k_gemm, k_bg = lib.gemm(in_dtype="float32"), lib.bias_gelu(dtype="float32")
    k_xent = lib.xent_fwd()  # (loss, logsumexp) per row; the row compares the loss
    return [  # name, tile-op form, its sources, library form, its sources, arguments
        ("gemm 512^3", matmul, [matmul], k_gemm, [lib.gemm], (a, b)),
        ("gemm+bias+GELU 512x1024x256 (fused graph)", g, [matmul, bias_gelu, gemm_bias_gelu],
         lambda x_, w_, b_: k_bg(k_gemm(x_, w_), b_), [lib.gemm, lib.bias_gelu], (xm, w1, vec)),
        ("  same, unfused graph", gu, None, lambda x_, w_, b_: k_bg(k_gemm(x_, w_), b_), None,
         (xm, w1, vec)),
        ("MLP block gemm+bias+GELU+gemm (fused: 1 kernel)", m, [matmul, bias_gelu, mlp],
         lambda x_, w_, b_, v_: k_gemm(k_bg(k_gemm(x_, w_), b_), v_),
         [lib.gemm, lib.bias_gelu], (xm, w1, vec, w2)),
        ("  same, unfused graph", mu, None,
         lambda x_, w_, b_, v_: k_gemm(k_bg(k_gemm(x_, w_), b_), v_), None, (xm, w1, vec, w2)),
        ("MLP block: fused graph vs unfused graph", m, [mlp], mu, [mlp], (xm, w1, vec, w2)),
        ("MLP block 2048 tokens: fused vs unfused graph", m, [mlp], mu, [mlp],
         (r.standard_normal((2048, 256)).astype(f32), w1, vec, w2)),
        ("softmax 2048x1024", softmax, [softmax], lib.softmax(), [lib.softmax], (x,)),
        ("softmax from parts (fused graph: 1 kernel)", tilepy.compile(softmax_parts),
         [row_max, exp_sub, row_sum, div_rows, softmax_parts], lib.softmax(), [lib.softmax],
         (x,)),
        ("layernorm 2048x1024", layernorm, [layernorm], lib.layernorm(), [lib.layernorm],
         (x, vec, vec2)),
        ("rmsnorm 2048x1024", rmsnorm, [rmsnorm], lib.rmsnorm(), [lib.rmsnorm], (x, vec)),
        ("row sum 2048x1024", row_sum, [row_sum], lib.row_reduce(), [lib.row_reduce], (x,)),
        ("bias+GELU 2048x1024", bias_gelu, [bias_gelu], k_bg, [lib.bias_gelu], (x, vec)),
        ("attention 1x2x256x64 (library: online softmax)", attention, [attention],
         lib.flash_attention(1, 2, 256, 64), [lib.flash_attention, *_FLASH_MACROS], qkv),
        ("conv2d NHWC 4x18x18x32, 3x3x32x64", conv2d, [conv2d],
         lib.conv2d_nhwc(4, 18, 18, 32, 64, 3, 3), [lib.conv2d_nhwc], (xc, wc)),
        ("  same, sizes fixed (as the library's are)", conv2d_fixed, [conv2d_fixed],
         lib.conv2d_nhwc(4, 18, 18, 32, 64, 3, 3), [lib.conv2d_nhwc], (xc, wc)),
        ("cross-entropy 2048x1024 (library: online LSE)", cross_entropy, [cross_entropy],
         lambda x_, y_: k_xent(x_, y_)[0], [lib.xent_fwd, *_XENT_MACROS], (x, labels)),
    ]


# the library flash kernel's online softmax lives in these macros: its lines count too
_FLASH_MACROS = (flash_attn._mask, flash_attn.masked_scores, flash_attn.online_softmax_state,
                 flash_attn.online_softmax_step)
_XENT_MACROS = (xent._lse_state, xent._lse_step)  # the library forward's online logsumexp


def code_lines(obj) -> int:
    """Lines of code of a function (a tile op's, a library factory's): no blank lines,
    comments or docstrings."""
    fn = getattr(obj, "fn", obj)
    src = textwrap.dedent(inspect.getsource(fn))
    doc_lines: set[int] = set()
    for node in ast.walk(ast.parse(src)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            doc_lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return sum(1 for n, line in enumerate(src.splitlines(), 1)
               if line.strip() and not line.strip().startswith("#") and n not in doc_lines)


def _burst(fn, args, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _burst_min(fn, args, n: int) -> tuple[float, float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times)


def _own(op, args, got) -> str:
    """Where the library's formulation differs (online softmax), whether the tile op equals
    its own index expression bit for bit."""
    if not hasattr(op, "reference"):
        return ""
    same = np.asarray(op.reference(*args)).tobytes() == np.asarray(got).tobytes()
    return ", = its reference" if same else ", NOT its reference"


def measure(a, b, args, rounds: int, burst: int):
    """Medians of the bursts' medians, the median per-round ratio, and the ratio of the
    two forms' fastest calls (the least disturbed by other load)."""
    ta, tb, ratios, ma, mb = [], [], [], [], []
    for _ in range(rounds):
        (x, xm), (y, ym) = _burst_min(a, args, burst), _burst_min(b, args, burst)
        ta.append(x)
        tb.append(y)
        ma.append(xm)
        mb.append(ym)
        ratios.append(x / y)
    return (statistics.median(ta), statistics.median(tb), statistics.median(ratios),
            min(ma) / min(mb))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--burst", type=int, default=5)
    p.add_argument("--only", default="")
    opts = p.parse_args()
    rows = _rows(np.random.default_rng(0))
    print(f"{'operator':44} {'lines op/lib':>12} {'tile op ms':>10} {'library ms':>10} "
          f"{'op/lib':>7} {'min/min':>7}  bits")
    for name, op, op_src, ref, ref_src, args in rows:
        if opts.only and not any(w in name for w in opts.only.split(",")):
            continue
        if ref is None:  # nothing hand-written to compare: the tile op alone
            op(*args)
            t = statistics.median(_burst(op, args, opts.burst) for _ in range(opts.rounds))
            print(f"{name:44} {code_lines(op):>9}/- {t * 1e3:10.2f} {'-':>10} {'-':>7}  -")
            continue
        got, want = op(*args), ref(*args)  # compiles both, then checks
        bits = "same" if np.asarray(got).tobytes() == np.asarray(want).tobytes() else \
            f"DIFFER (max {np.abs(got - want).max():.2e}){_own(op, args, got)}"
        lines = "" if op_src is None else \
            f"{sum(code_lines(s) for s in op_src)}/{sum(code_lines(s) for s in ref_src)}"
        t_op, t_lib, ratio, ratio_min = measure(op, ref, args, opts.rounds, opts.burst)
        print(f"{name:44} {lines:>12} {t_op * 1e3:10.2f} {t_lib * 1e3:10.2f} {ratio:7.2f} "
              f"{ratio_min:7.2f}  {bits}", flush=True)
    if not opts.only or "memory" in opts.only:
        memory_rows(np.random.default_rng(1))


if __name__ == "__main__":
    main()
