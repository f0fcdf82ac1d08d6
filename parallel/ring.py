"""Ring reduce-scatter, allgather and allreduce, with their order specified.

Spec (p ranks, right = r+1, left = r-1 mod p, counts from a chunking rule):
reduce-scatter step s = 0..p-2: rank r sends chunk (r-1-s) mod p to the right and receives
chunk (r-2-s) mod p from the left, then `chunk = received op local` (received on the left).
So chunk c is first sent by rank c+1 and accumulates x[c+1], x[c+2], ..., x[c] in that
order, finishing on rank c. Allgather step s: send chunk (r-s), receive chunk (r-1-s).
"""

from __future__ import annotations

import numpy as np

from tilepy.parallel.chunking import COUNTS, offsets
from tilepy.parallel.ops import combine


def split_chunks(x: np.ndarray, counts: list[int]) -> list[np.ndarray]:
    """Views of the flat `x`, one per chunk."""
    offs = offsets(counts)
    return [x[o:o + c] for o, c in zip(offs, counts)]


def reduce_scatter(g, x: np.ndarray, op: str, counts: list[int],
                   scratch: np.ndarray | None = None) -> list[np.ndarray]:
    """Ring reduce-scatter; returns the chunk list, where chunk g.rank is fully reduced.

    `scratch` (n elements, reused across calls of one communicator) receives the partial
    sums: a slot is rewritten only after every rank that reads it has moved on, because
    this rank's next write to a slot waits, through the ring, on messages that the
    readers send only after they finished the previous call.
    """
    p, r = g.size, g.rank
    acc = split_chunks(x, counts)
    slots = split_chunks(scratch, counts) if scratch is not None else [None] * p
    for s in range(p - 1):
        send_c, recv_c = (r - 1 - s) % p, (r - 2 - s) % p
        got = g.p2p_sendrecv(acc[send_c], (r + 1) % p, (r - 1) % p, counts[recv_c], x.dtype)
        acc[recv_c] = combine(got, acc[recv_c], op, out=slots[recv_c])
    return acc


def allgather(g, chunks: list[np.ndarray], counts: list[int], dtype,
              into: list[np.ndarray] | None = None) -> list[np.ndarray]:
    """Ring allgather: on entry chunk g.rank is this rank's; on exit every chunk is filled.
    `into`: per-chunk buffers that a copying backend receives into directly."""
    p, r = g.size, g.rank
    chunks = list(chunks)
    for s in range(p - 1):
        send_c, recv_c = (r - s) % p, (r - 1 - s) % p
        chunks[recv_c] = g.p2p_sendrecv(
            chunks[send_c], (r + 1) % p, (r - 1) % p, counts[recv_c], dtype,
            None if into is None else into[recv_c])
    return chunks


def allreduce(g, x: np.ndarray, op: str, chunking: str = "balanced", out=None) -> np.ndarray:
    """Ring allreduce = ring reduce-scatter then ring allgather, with `chunking` counts."""
    counts = COUNTS[chunking](x.size, g.size)
    workspace = getattr(g, "workspace", None)
    scratch = None
    if workspace is not None and g.size > 1:
        scratch = workspace(x.size, x.dtype, tuple(counts))
    chunks = reduce_scatter(g, x, op, counts, scratch)
    out = np.empty(x.size, x.dtype) if out is None else out
    slots = split_chunks(out, counts)
    chunks = allgather(g, chunks, counts, x.dtype, slots if g.receives_into else None)
    for slot, ch in zip(slots, chunks):
        if not np.may_share_memory(slot, ch):  # not already received in place
            slot[...] = ch
    return out
