"""The point-to-point surface that every collective algorithm is written against.

An algorithm sees a `Group`: `rank`, `size`, and three blocking calls that move whole
1-D arrays (`p2p_send`, `p2p_recv`, `p2p_sendrecv`). A communicator is a Group; `View`
makes a subset of its ranks look like one, so hierarchical algorithms need no split.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Group(Protocol):
    rank: int
    size: int
    receives_into: bool

    def p2p_send(self, x: np.ndarray, dst: int) -> None: ...

    def p2p_recv(self, src: int, count: int | None, dtype: np.dtype | None) -> np.ndarray: ...

    def p2p_sendrecv(
        self, x: np.ndarray, dst: int, src: int, count: int, dtype: np.dtype, into=None
    ) -> np.ndarray: ...


class View:
    """Ranks `members` (ranks of `base`, this rank among them) seen as ranks 0..len-1."""

    def __init__(self, base: Group, members: list[int]):
        self.base = base
        self.members = list(members)
        self.rank = self.members.index(base.rank)
        self.size = len(self.members)
        self.receives_into = base.receives_into

    def p2p_send(self, x, dst):
        self.base.p2p_send(x, self.members[dst])

    def p2p_recv(self, src, count, dtype):
        return self.base.p2p_recv(self.members[src], count, dtype)

    def p2p_sendrecv(self, x, dst, src, count, dtype, into=None):
        return self.base.p2p_sendrecv(x, self.members[dst], self.members[src], count, dtype,
                                      into)
