"""Closed-form alpha-beta-gamma costs of the allreduce algorithms and NCCL-style selection.

Costs follow Thakur, Rabenseifner and Gropp (2005) for n bytes on p ranks (alpha per
message, beta per byte sent, gamma per byte reduced), plus tilepy's fold steps for non-powers
of two; on a topology, a per-call overhead and the levels' oversubscription (`allreduce_cost`).
"""

from __future__ import annotations

import math

from tilepy.parallel.errors import CommArgumentError
from tilepy.parallel.topology import Topology

FLAT = ("ring", "recursive_doubling", "tree", "rabenseifner")


def _fold_extra(p: int, n: float, a: float, b: float, g: float) -> tuple[int, float]:
    lg = p.bit_length() - 1
    extra = 0.0 if p == 1 << lg else 2 * a + 2 * n * b + n * g
    return lg, extra


def flat_cost(alg: str, p: int, n: float, a: float, b: float, g: float) -> float:
    """Seconds for one allreduce of n bytes over p ranks with uniform alpha, beta, gamma."""
    if p <= 1:
        return 0.0
    if alg in ("ring", "mpich_ring"):
        f = (p - 1) / p
        return 2 * (p - 1) * a + 2 * f * n * b + f * n * g
    if alg == "tree":
        lg = math.ceil(math.log2(p))
        return 2 * lg * (a + n * b) + lg * n * g
    lg, extra = _fold_extra(p, n, a, b, g)
    if alg == "recursive_doubling":
        return lg * (a + n * b + n * g) + extra
    if alg == "rabenseifner":
        f = (2 ** lg - 1) / 2 ** lg
        return 2 * lg * a + 2 * f * n * b + f * n * g + extra
    raise CommArgumentError(f"no cost formula for algorithm {alg!r}")


def shared_cost(p: int, n: float, latency: float, beta_mem: float) -> float:
    """The local backend's shared-memory allreduce of n bytes on p ranks: a fixed latency
    (two meetings of the ranks and the call's software) plus (p + 1) n bytes of memory
    traffic (every input read once, the one result written once) at beta_mem s/byte,
    the aggregate rate of the cores the ranks share."""
    return latency + (p + 1) * n * beta_mem


def allreduce_cost(topo: Topology, alg: str, p: int, nbytes: float,
                   group_size: int | None = None) -> float:
    """Cost on a topology: flat algorithms pay the outermost level they cross; hierarchical
    pays a tree inside the innermost level and a ring across the groups. Both add the
    per-call overhead; gamma is gamma_eff (the innermost level's oversubscription)."""
    g = topo.gamma_eff
    if alg == "hierarchical":
        s = min(group_size or topo.levels[0].size, p)
        inner = topo.level_for(s)
        outer = topo.level_for(p)
        lg = math.ceil(math.log2(s)) if s > 1 else 0
        n = nbytes
        intra = lg * (2 * inner.alpha + 2 * n * inner.beta_eff + n * g)
        groups = math.ceil(p / s)
        return (topo.overhead + intra
                + flat_cost("ring", groups, n, outer.alpha, outer.beta_eff, g))
    lv = topo.level_for(p)
    return topo.overhead + flat_cost(alg, p, nbytes, lv.alpha, lv.beta_eff, g)


def select(topo: Topology, p: int, nbytes: float,
           algorithms=FLAT + ("hierarchical",)) -> tuple[str, float]:
    """(cheapest algorithm, its predicted seconds) for one message size."""
    costs = {a: allreduce_cost(topo, a, p, nbytes) for a in algorithms}
    best = min(costs, key=costs.get)
    return best, costs[best]


def sizes(lo: int = 8, hi: int = 64 << 20) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 4
    return out


def tuning_table(topo: Topology, message_sizes=None, algorithms=FLAT + ("hierarchical",)):
    """Text table: per level (ranks spanned) and message size, each cost and the choice."""
    message_sizes = message_sizes or sizes()
    lines, p = [], 1
    for lv in topo.levels:
        p *= lv.size
        if p < 2:
            continue
        lines.append(f"# level {lv.name}: {p} ranks (alpha {lv.alpha * 1e6:.2f} us, "
                     f"beta {1 / lv.beta_eff / 1e9:.2f} GB/s)")
        lines.append(f"{'bytes':>10} " + " ".join(f"{a[:12]:>12}" for a in algorithms)
                     + "  best")
        for n in message_sizes:
            costs = [allreduce_cost(topo, a, p, n) for a in algorithms]
            best = algorithms[costs.index(min(costs))]
            lines.append(f"{n:>10} " + " ".join(f"{c * 1e6:>10.1f}us" for c in costs)
                         + f"  {best}")
    return "\n".join(lines)
