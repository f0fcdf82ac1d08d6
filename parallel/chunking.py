"""How a vector of n elements is cut into p chunks: the chunking half of every algorithm spec.

`balanced` (tilepy's rule): every chunk has n // p elements and the first n % p chunks
one more. `ceil` (MPICH's ring rule, used only by the replay): chunks of ceil(n / p)
elements, the tail chunk short and the chunks after it empty.
"""

from __future__ import annotations


def balanced(n: int, p: int) -> list[int]:
    """Counts with the remainder given to the first chunks: balanced(10, 4) == [3, 3, 2, 2]."""
    q, r = divmod(n, p)
    return [q + 1 if i < r else q for i in range(p)]


def ceil(n: int, p: int) -> list[int]:
    """MPICH's ring counts: ceil(10, 4) == [3, 3, 3, 1], ceil(5, 4) == [2, 2, 1, 0]."""
    size = -(-n // p) if p else 0
    counts, left = [], n
    for _ in range(p):
        c = min(size, left)
        counts.append(c)
        left -= c
    return counts


def offsets(counts: list[int]) -> list[int]:
    """Start of each chunk: the exclusive prefix sum of `counts`."""
    out, acc = [], 0
    for c in counts:
        out.append(acc)
        acc += c
    return out


COUNTS = {"balanced": balanced, "ceil": ceil}
