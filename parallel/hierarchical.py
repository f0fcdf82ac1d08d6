"""Hierarchical allreduce: within each node group, then across groups, then back.

Spec: groups are consecutive blocks of `group_size` ranks (the last may be short); the
leader of a group is its lowest rank. (1) binomial-tree reduce to the leader inside each
group; (2) ring allreduce (balanced chunks) among the leaders, in group order; (3) binomial
broadcast from the leader inside each group. At p = 4, group_size = 2 and a small vector
this is (x0 + x1) + (x2 + x3).
"""

from __future__ import annotations

import numpy as np

from tilepy.parallel import ring, tree
from tilepy.parallel.group import View


def allreduce(g, x: np.ndarray, op: str, group_size: int) -> np.ndarray:
    p, r = g.size, g.rank
    s = max(1, min(group_size, p))
    leader = (r // s) * s
    intra = View(g, list(range(leader, min(leader + s, p))))
    acc = tree.reduce(intra, x, op, 0)
    if r == leader:
        leaders = View(g, list(range(0, p, s)))
        acc = ring.allreduce(leaders, acc, op)
    return tree.bcast(intra, acc, 0, x.size, x.dtype)  # shared: the communicator copies
