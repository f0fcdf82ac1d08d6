"""Binomial-tree reduce and broadcast, and tree allreduce (reduce to 0, then broadcast).

Spec, with virtual rank v = (r - root) mod p: reduce: for mask = 1, 2, 4, ...: if v has
the mask bit, send the partial to v - mask and stop; else receive from v + mask (if it
exists) and set `acc = acc op received` (own value on the left). So at p = 4 the root holds
(x0 + x1) + (x2 + x3), at p = 5 ((x0 + x1) + (x2 + x3)) + x4. Broadcast is the mirror.
"""

from __future__ import annotations

import numpy as np

from tilepy.parallel.ops import combine


def reduce(g, x: np.ndarray, op: str, root: int = 0) -> np.ndarray | None:
    """Binomial reduce; the root returns the result, other ranks None."""
    p = g.size
    v = (g.rank - root) % p
    acc, mask = x, 1
    while mask < p:
        if v & mask:
            g.p2p_send(acc, (v - mask + root) % p)
            return None
        if v + mask < p:
            got = g.p2p_recv((v + mask + root) % p, x.size, x.dtype)
            # the first combine allocates this rank's buffer; later ones update it in place
            acc = combine(acc, got, op, out=None if acc is x else acc)
        mask <<= 1
    return acc.copy() if acc is x else acc


def bcast(g, x: np.ndarray | None, root: int, count: int | None, dtype) -> np.ndarray:
    """Binomial broadcast of the root's flat `x`; others receive `count` items of `dtype`."""
    p = g.size
    v = (g.rank - root) % p
    mask = 1
    while mask < p:
        if v & mask:
            x = g.p2p_recv((v - mask + root) % p, count, dtype)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if v + mask < p:
            g.p2p_send(x, (v + mask + root) % p)
        mask >>= 1
    return x


def allreduce(g, x: np.ndarray, op: str) -> np.ndarray:
    """Tree allreduce: binomial reduce to rank 0, then binomial broadcast from rank 0."""
    acc = reduce(g, x, op, 0)
    return bcast(g, acc, 0, x.size, x.dtype)  # shared: the communicator copies it once
