"""The algorithm specifications as plain sequential code: the oracle for every backend.

Given all ranks' inputs, `expected(xs, algorithm)` computes the bits each algorithm must
produce, following the written spec (chunk counts, start rank, pairing, operand order)
directly, with none of the message passing. Tests compare every backend against it.
"""

from __future__ import annotations

import numpy as np

from tilepy.parallel.chunking import COUNTS, offsets
from tilepy.parallel.ops import combine


def ring(xs: list[np.ndarray], op: str, chunking: str = "balanced") -> np.ndarray:
    """Chunk c accumulates ranks c+1, c+2, ..., c (mod p): acc = acc op x[next]."""
    p, n = len(xs), xs[0].size
    counts = COUNTS[chunking](n, p)
    out = np.empty(n, xs[0].dtype)
    for c, (o, k) in enumerate(zip(offsets(counts), counts)):
        acc = xs[(c + 1) % p][o:o + k].copy()
        for step in range(2, p + 1):
            acc = combine(acc, xs[(c + step) % p][o:o + k], op)
        out[o:o + k] = acc
    return out


def pairwise(xs: list[np.ndarray], op: str) -> np.ndarray:
    """Recursive doubling / Rabenseifner: fold the first 2*rem ranks in pairs, then a
    balanced pairwise tree over the pof2 survivors, lower operand on the left."""
    p = len(xs)
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    vals = [combine(xs[2 * i], xs[2 * i + 1], op) for i in range(rem)] + list(xs[2 * rem:])
    while len(vals) > 1:
        vals = [combine(vals[i], vals[i + 1], op) for i in range(0, len(vals), 2)]
    return vals[0].copy()


def binomial(xs: list[np.ndarray], op: str) -> np.ndarray:
    """Binomial tree to rank 0: at distance mask, v += v + mask for v multiple of 2*mask."""
    vals, p, mask = list(xs), len(xs), 1
    while mask < p:
        for v in range(0, p, 2 * mask):
            if v + mask < p:
                vals[v] = combine(vals[v], vals[v + mask], op)
        mask <<= 1
    return vals[0].copy()


def hierarchical(xs: list[np.ndarray], op: str, group_size: int) -> np.ndarray:
    """Binomial within consecutive groups, then ring (balanced) across the group results."""
    s = max(1, min(group_size, len(xs)))
    partial = [binomial(xs[i:i + s], op) for i in range(0, len(xs), s)]
    return ring(partial, op)


def expected(xs: list[np.ndarray], algorithm: str, op: str = "sum",
             group_size: int = 2) -> np.ndarray:
    """What `allreduce(algorithm)` must return on every rank, for flat inputs `xs`."""
    xs = [np.ascontiguousarray(x).reshape(-1) for x in xs]
    if algorithm == "ring":
        return ring(xs, op)
    if algorithm == "mpich_ring":
        return ring(xs, op, "ceil")
    if algorithm in ("recursive_doubling", "rabenseifner"):
        return pairwise(xs, op)
    if algorithm == "tree":
        return binomial(xs, op)
    if algorithm == "hierarchical":
        return hierarchical(xs, op, group_size)
    raise ValueError(f"no specification for {algorithm!r}")
