"""A transformer block's forward and backward as one graph of tile ops, and its peak memory
with and without memory planning (docs/tileop.md, *Backward*).

Tile ops have no automatic reverse mode: the backward here is written by hand as tile ops
(the chain rule per op: transposed contractions, column sums, the GELU, layernorm and
softmax derivatives), traced with the forward by `tilepy.compile` so that liveness sees
the activations the backward reads. `--check` compares its gradients with central finite
differences of the forward at a small size (interpreter, float32) before anything else.

    .venv/bin/python bench/tileop_backward.py [--check]
"""

# ruff: noqa: F821  (i, j are the outputs' index names: free in a tile op body by design)

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tilepy  # noqa: E402
import tilepy.language as T  # noqa: E402
from tilepy import Tensor, tile_op  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import tileop_bench as fwd  # noqa: E402

GELU_C, K, M, N = fwd.GELU_C, fwd.K, fwd.M, fwd.N
add, attention2d, bias_gelu, block = fwd.add, fwd.attention2d, fwd.bias_gelu, fwd.block
layernorm, matmul = fwd.layernorm, fwd.matmul

EPS = 1e-5  # layernorm's, as in tileop_bench


@tile_op
def matmul_nt(a: Tensor[M, K], b: Tensor[N, K]) -> Tensor[M, N]:
    return sum(a[i, k] * b[j, k] for k in range(K))


@tile_op
def matmul_tn(a: Tensor[K, M], b: Tensor[K, N]) -> Tensor[M, N]:
    return sum(a[k, i] * b[k, j] for k in range(K))


@tile_op
def colsum(x: Tensor[M, N]) -> Tensor[N]:
    return sum(x[k, i] for k in range(M))


@tile_op
def colsum_mul(x: Tensor[M, N], y: Tensor[M, N]) -> Tensor[N]:
    return sum(x[k, i] * y[k, i] for k in range(M))


@tile_op
def add3(x: Tensor[M, N], y: Tensor[M, N], z: Tensor[M, N]) -> Tensor[M, N]:
    return x[i, j] + y[i, j] + z[i, j]


@tile_op
def ln_xhat(x: Tensor[M, N]) -> Tensor[M, N]:
    mean = sum(x[i, k] for k in range(N)) / T.cast(N, "float32")
    var = sum((x[i, k] - mean) * (x[i, k] - mean) for k in range(N)) / T.cast(N, "float32")
    return (x[i, j] - mean) * T.rsqrt(var + EPS)


@tile_op
def layernorm_dx(x: Tensor[M, N], g: Tensor[N], dy: Tensor[M, N]) -> Tensor[M, N]:
    mean = sum(x[i, k] for k in range(N)) / T.cast(N, "float32")
    var = sum((x[i, k] - mean) * (x[i, k] - mean) for k in range(N)) / T.cast(N, "float32")
    r = T.rsqrt(var + EPS)
    a = sum(g[k] * dy[i, k] for k in range(N)) / T.cast(N, "float32")
    b = sum(g[k] * dy[i, k] * (x[i, k] - mean) * r for k in range(N)) / T.cast(N, "float32")
    return r * (g[j] * dy[i, j] - a - (x[i, j] - mean) * r * b)


@tile_op
def gelu_bwd(u: Tensor[M, N], c: Tensor[N], dz: Tensor[M, N]) -> Tensor[M, N]:
    v = u[i, j] + c[j]
    t = T.tanh(GELU_C * (v + 0.044715 * v * v * v))
    return dz[i, j] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * GELU_C
                       * (1.0 + 3.0 * 0.044715 * v * v))


@tile_op
def probs(q: Tensor[M, N], k: Tensor[M, N]) -> Tensor[M, M]:
    m = max(sum(q[i, e] * k[l, e] for e in range(N)) for l in range(M))
    z = sum(T.exp(sum(q[i, e] * k[l, e] for e in range(N)) - m) for l in range(M))
    return T.exp(sum(q[i, e] * k[j, e] for e in range(N)) - m) / z


@tile_op
def softmax_bwd(p: Tensor[M, N], dp: Tensor[M, N]) -> Tensor[M, N]:
    return p[i, j] * (dp[i, j] - sum(p[i, k] * dp[i, k] for k in range(N)))


def block_grad(x, g1, b1, wq, wk, wv, wo, g2, b2, w1, c1, w2, dy):
    """The block's output and the gradients of sum(output * dy) with respect to x and every
    parameter: the forward of tileop_bench.block, then its reverse, op by op."""
    h = layernorm(x, g1, b1)
    q, k, v = matmul(h, wq), matmul(h, wk), matmul(h, wv)
    a = attention2d(q, k, v)
    r = add(x, matmul(a, wo))
    h2 = layernorm(r, g2, b2)
    u = matmul(h2, w1)
    z = bias_gelu(u, c1)
    y = add(r, matmul(z, w2))
    # the MLP: y = r + z w2, z = gelu(u + c1), u = h2 w1
    dw2, dz = matmul_tn(z, dy), matmul_nt(dy, w2)
    du = gelu_bwd(u, c1, dz)
    dc1, dw1, dh2 = colsum(du), matmul_tn(h2, du), matmul_nt(du, w1)
    dg2, db2 = colsum_mul(dh2, ln_xhat(r)), colsum(dh2)
    dr = add(dy, layernorm_dx(r, g2, dh2))
    # attention: r = x + a wo, a = P v, P = softmax(q k^T) (recomputed)
    dwo, da = matmul_tn(a, dr), matmul_nt(dr, wo)
    p = probs(q, k)
    dv = matmul_tn(p, da)
    ds = softmax_bwd(p, matmul_nt(da, v))
    dq, dk = matmul(ds, k), matmul_tn(ds, q)
    dwq, dwk, dwv = matmul_tn(h, dq), matmul_tn(h, dk), matmul_tn(h, dv)
    dh = add3(matmul_nt(dq, wq), matmul_nt(dk, wk), matmul_nt(dv, wv))
    dg1, db1 = colsum_mul(dh, ln_xhat(x)), colsum(dh)
    dx = add(dr, layernorm_dx(x, g1, dh))
    return y, dx, dg1, db1, dwq, dwk, dwv, dwo, dg2, db2, dw1, dc1, dw2


def arguments(r, s: int, e: int, hid: int, scale: float = 1.0):
    f32 = np.float32

    def rand(*shape, sc=scale):
        return (r.standard_normal(shape) * sc).astype(f32)

    return [rand(s, e), 1 + rand(e, sc=0.1), rand(e, sc=0.1), *(rand(e, e, sc=scale / 4)
            for _ in range(4)), 1 + rand(e, sc=0.1), rand(e, sc=0.1), rand(e, hid, sc=scale / 4),
            rand(hid, sc=0.1), rand(hid, e, sc=scale / 8), rand(s, e)]


def check(r) -> float:
    """The largest relative error of the graph's gradients against central differences of
    sum(block(...) * dy), over a few elements of every input (interpreter, float32)."""
    args = arguments(r, 8, 8, 16)
    with tilepy.backend("interp"):
        g = tilepy.compile(block_grad)(*args)
        fwd = tilepy.compile(block)
        worst = 0.0
        for n, grad in enumerate(g[1:]):
            flat = args[n].reshape(-1)
            for idx in r.choice(flat.size, min(3, flat.size), replace=False):
                h = 1e-2 * max(1.0, abs(float(flat[idx])))
                vals = []
                for sgn in (1, -1):
                    moved = [a.copy() for a in args[:-1]]
                    moved[n].reshape(-1)[idx] += sgn * h
                    vals.append(float(np.sum(fwd(*moved).astype(np.float64) * args[-1])))
                fd = (vals[0] - vals[1]) / (2 * h)
                got = float(grad.reshape(-1)[idx])
                worst = max(worst, abs(got - fd) / max(abs(fd), 1e-1))
    return worst


def memory(r) -> None:
    s, e, hid = 512, 256, 1024
    args = arguments(r, s, e, hid)
    print(f"transformer block forward + backward, {s} tokens x {e}, MLP {hid} (float32)")
    for fuse in (False, True):
        gr = tilepy.compile(block_grad, fuse=fuse).trace(*args)
        p, q = gr.memory_plan(), gr.memory_plan(in_place=False)
        print(f"  {'fused' if fuse else 'unfused'} graph ({len(p.slots)} node outputs): "
              f"one buffer each {p.unplanned_bytes / 2**20:.2f} MiB; planned "
              f"{p.peak_bytes / 2**20:.2f} MiB ({1 - p.peak_bytes / p.unplanned_bytes:.0%} "
              f"less; {q.peak_bytes / 2**20:.2f} MiB without in-place); "
              f"live at once {p.live_bytes / 2**20:.2f} MiB")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--check", action="store_true")
    opts = p.parse_args()
    if opts.check:
        print(f"gradients against central differences: largest relative error "
              f"{check(np.random.default_rng(0)):.2e}")
    memory(np.random.default_rng(1))


if __name__ == "__main__":
    main()
