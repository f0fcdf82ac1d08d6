"""Per-element reduction orders of the allreduce algorithms, and their blocked evaluation.
A plan is a list of segments (start, stop, tree): every element of [start, stop) is reduced
by one tree of ranks (leaves) and pairs `left op right`, restating spec.py's orders (tests
check them equal), so the local backend's shared-memory allreduce gets each algorithm's
bits without messages. Only computes; never waits.
"""

from __future__ import annotations

from tilepy.parallel.chunking import COUNTS, balanced, offsets
from tilepy.parallel.ops import combine

DEST = -1  # a step operand/result naming the destination block; -2 - k is scratch row k
# Elements per evaluated block, in bytes. Partial results of a block are reused while
# warm in cache; fewer, longer ufunc calls hand the GIL over less often between ranks.
# 4 MiB came close to unblocked evaluation and bounds the scratch (docs/perf-log.md).
BLOCK_BYTES = 4 << 20


def fold(trees: list) -> object:
    """Left-deep: ((t0 op t1) op t2) op ..., the order of a ring chunk."""
    acc = trees[0]
    for t in trees[1:]:
        acc = (acc, t)
    return acc


def pairwise(p: int) -> object:
    """Recursive doubling / Rabenseifner: fold pairs (2i, 2i+1) for i < rem, then a
    balanced tree over the pof2 survivors, lower operand on the left."""
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    vals = [(2 * i, 2 * i + 1) for i in range(rem)] + list(range(2 * rem, p))
    while len(vals) > 1:
        vals = [(vals[i], vals[i + 1]) for i in range(0, len(vals), 2)]
    return vals[0]


def binomial(ranks: list[int]) -> object:
    """Binomial tree to ranks[0]: at distance mask, v = v op (v + mask)."""
    vals, mask = list(ranks), 1
    while mask < len(vals):
        for v in range(0, len(vals), 2 * mask):
            if v + mask < len(vals):
                vals[v] = (vals[v], vals[v + mask])
        mask <<= 1
    return vals[0]


def ring(n: int, trees: list, chunking: str = "balanced") -> list[tuple]:
    """Chunk c of the q = len(trees) operands accumulates operands c+1, ..., c (mod q)."""
    q = len(trees)
    counts = COUNTS[chunking](n, q)
    return [(o, o + k, fold([trees[(c + i) % q] for i in range(1, q + 1)]))
            for c, (o, k) in enumerate(zip(offsets(counts), counts)) if k]


def plan(algorithm: str, n: int, p: int, group_size: int = 2) -> list[tuple]:
    """Segments (start, stop, tree) covering n elements for `algorithm` on p ranks."""
    if algorithm == "ring":
        return ring(n, list(range(p)))
    if algorithm == "mpich_ring":
        return ring(n, list(range(p)), "ceil")
    if algorithm in ("recursive_doubling", "rabenseifner"):
        return [(0, n, pairwise(p))] if n else []
    if algorithm == "tree":
        return [(0, n, binomial(list(range(p))))] if n else []
    if algorithm == "hierarchical":
        s = max(1, min(group_size, p))
        groups = [binomial(list(range(i, min(i + s, p)))) for i in range(0, p, s)]
        return ring(n, groups)
    raise ValueError(f"no plan for {algorithm!r}")


ALGORITHMS = ("ring", "mpich_ring", "recursive_doubling", "rabenseifner", "tree",
              "hierarchical")


def compile_tree(tree) -> tuple[list[tuple[int, int | None, int]], int]:
    """Steps (left, right, out) evaluating `tree` into DEST, and the scratch rows needed.

    Operands >= 0 are ranks' inputs; a left subtree is evaluated into the step's own
    output and a right subtree into the next scratch row, so a fold runs in place in DEST
    and a balanced tree over p leaves needs about lg p rows. right None means a copy.
    """
    steps: list = []
    depth = [0]

    def emit(node, out: int, level: int) -> None:
        if isinstance(node, int):
            steps.append((node, None, out))
            return
        left, right = node
        if not isinstance(left, int):
            emit(left, out, level)
            left = out
        if not isinstance(right, int):
            row = -2 - level
            depth[0] = max(depth[0], level + 1)
            emit(right, row, level + 1)
            right = row
        steps.append((left, right, out))

    emit(tree, DEST, 0)
    return steps, depth[0]


def reduce_range(xs: list, dest, segments: list[tuple], lo: int, hi: int, op: str,
                 scratch) -> None:
    """dest[lo:hi] = the plan's reduction of the inputs `xs` (flat arrays), a block at a
    time; `scratch(rows, block, dtype)` returns a 2-D buffer of at least that shape."""
    block = max(1, BLOCK_BYTES // max(1, dest.itemsize))
    for start, stop, tree in segments:
        a, b = max(start, lo), min(stop, hi)
        if a >= b:
            continue
        steps, rows = compile_tree(tree)
        buf = scratch(rows, block, dest.dtype) if rows else None
        step = block if len(steps) > 1 else b - a  # one step has no partials to keep
        for u in range(a, b, step):
            v = min(u + step, b)
            k = v - u
            refs = {DEST: dest[u:v]}
            for i in range(rows):
                refs[-2 - i] = buf[i, :k]
            for left, right, out in steps:
                lhs = refs[left] if left < 0 else xs[left][u:v]
                if right is None:
                    refs[out][...] = lhs
                    continue
                rhs = refs[right] if right < 0 else xs[right][u:v]
                combine(lhs, rhs, op, out=refs[out])


def share(n: int, p: int, rank: int) -> tuple[int, int]:
    """The elements [lo, hi) that `rank` reduces in a shared-memory allreduce (balanced)."""
    counts = balanced(n, p)
    lo = offsets(counts)[rank]
    return lo, lo + counts[rank]
