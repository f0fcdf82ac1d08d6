"""Recursive doubling and Rabenseifner allreduce (MPICH's small- and large-message orders).

Spec: pof2 = largest power of two <= p, rem = p - pof2. Fold: for r < 2*rem, even r sends
to r+1, which computes x[r] op x[r+1] and takes new rank r // 2; ranks r >= 2*rem take new
rank r - rem. Doubling: for mask = 1, 2, ..., pof2/2 exchange with new rank (n ^ mask) and
combine `lower op higher`. Unfold: odd r < 2*rem send the result to r-1. Rabenseifner
replaces the doubling by recursive halving (mask = 1 first; the lower partner keeps the
lower half of its block range; blocks are `balanced` over pof2) and a recursive-doubling
allgather; per element its order is the same tree as recursive doubling.
"""

from __future__ import annotations

import numpy as np

from tilepy.parallel.chunking import balanced, offsets
from tilepy.parallel.ops import combine


def _fold(g, x, op):
    """Pre-step for non-powers of two. Returns (new rank or -1, pof2, rem, partial)."""
    p, r = g.size, g.rank
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    if r >= 2 * rem:
        return r - rem, pof2, rem, x
    if r % 2 == 0:
        g.p2p_send(x, r + 1)
        return -1, pof2, rem, x
    got = g.p2p_recv(r - 1, x.size, x.dtype)
    return r // 2, pof2, rem, combine(got, x, op)


def _unfold(g, acc, rem, n, dtype):
    r = g.rank
    if r < 2 * rem:
        if r % 2:
            g.p2p_send(acc, r - 1)
        else:
            acc = g.p2p_recv(r + 1, n, dtype)
    return acc  # may be shared with a receiver: the communicator copies it once


def _real(new, rem):
    """The group rank that holds new rank `new`."""
    return 2 * new + 1 if new < rem else new + rem


def recursive_doubling(g, x: np.ndarray, op: str) -> np.ndarray:
    newrank, pof2, rem, acc = _fold(g, x, op)
    if newrank >= 0:
        mask = 1
        while mask < pof2:
            peer = newrank ^ mask
            got = g.p2p_sendrecv(acc, _real(peer, rem), _real(peer, rem), x.size, x.dtype)
            acc = combine(got, acc, op) if peer < newrank else combine(acc, got, op)
            mask <<= 1
    return _unfold(g, acc, rem, x.size, x.dtype)


def _halving(g, acc, op, newrank, pof2, rem, counts, offs):
    """Recursive-halving reduce-scatter; returns (acc, the block ranges halved per step)."""
    lo, hi, mask, ranges = 0, pof2, 1, []
    while mask < pof2:
        peer = newrank ^ mask
        mid = (lo + hi) // 2
        keep, give = ((lo, mid), (mid, hi)) if newrank < peer else ((mid, hi), (lo, mid))
        a, b = offs[keep[0]], offs[keep[1] - 1] + counts[keep[1] - 1]
        c, d = offs[give[0]], offs[give[1] - 1] + counts[give[1] - 1]
        got = g.p2p_sendrecv(acc[c:d], _real(peer, rem), _real(peer, rem), b - a, acc.dtype)
        if mask == 1:  # a private result buffer; only the kept range is ever read
            acc, src = np.empty_like(acc), acc
        else:
            src = acc
        # in place is safe: the peer reads only acc[c:d], outside the kept range
        if peer < newrank:
            combine(got, src[a:b], op, out=acc[a:b])
        else:
            combine(src[a:b], got, op, out=acc[a:b])
        ranges.append((lo, hi))
        lo, hi = keep
        mask <<= 1
    return acc, ranges


def _doubling_gather(g, acc, newrank, rem, ranges, counts, offs):
    """Reverse of the halving: exchange owned ranges until every block is everywhere."""
    mask = 1 << (len(ranges) - 1) if ranges else 0
    for lo, hi in reversed(ranges):
        peer = newrank ^ mask
        mid = (lo + hi) // 2
        mine, theirs = ((lo, mid), (mid, hi)) if newrank < peer else ((mid, hi), (lo, mid))
        a, b = offs[mine[0]], offs[mine[1] - 1] + counts[mine[1] - 1]
        c, d = offs[theirs[0]], offs[theirs[1] - 1] + counts[theirs[1] - 1]
        # acc[a:b] may be read later by the peer: this rank only writes outside it from now.
        got = g.p2p_sendrecv(acc[a:b], _real(peer, rem), _real(peer, rem), d - c, acc.dtype)
        acc[c:d] = got
        mask >>= 1
    return acc


def rabenseifner(g, x: np.ndarray, op: str) -> np.ndarray:
    newrank, pof2, rem, acc = _fold(g, x, op)
    if newrank >= 0:
        counts = balanced(x.size, pof2)
        offs = offsets(counts)
        acc, ranges = _halving(g, acc, op, newrank, pof2, rem, counts, offs)
        acc = _doubling_gather(g, acc, newrank, rem, ranges, counts, offs)
    return _unfold(g, acc, rem, x.size, x.dtype)
