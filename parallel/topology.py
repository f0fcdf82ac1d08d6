"""Topology: levels of a machine (cores in a NUMA node, nodes in a host, hosts in a rack...)
with their latency alpha (s), inverse bandwidth beta (s/byte) and oversubscription, plus a
per-byte reduction cost gamma and a per-call software overhead. Read from JSON, written to
JSON, or detected (NUMA nodes from /sys, hosts from an MPI communicator, more ranks than
cores as the innermost level's oversubscription). It only describes; cost.py computes.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tilepy.parallel.errors import CommArgumentError

# Defaults for this kind of machine, replaced by calibrate.py's fits when measured.
LOCAL_ALPHA, LOCAL_BETA, LOCAL_GAMMA = 5e-6, 1 / 8e9, 1 / 6e9


@dataclass(frozen=True)
class Level:
    """`size` children per parent at this level; a message crossing it costs alpha +
    bytes * beta * oversubscription. On the innermost level, oversubscription is ranks
    per core: there copies (beta) and reductions (gamma) of concurrent ranks share cores."""

    name: str
    size: int
    alpha: float
    beta: float
    oversubscription: float = 1.0

    @property
    def beta_eff(self) -> float:
        return self.beta * self.oversubscription


@dataclass(frozen=True)
class Topology:
    levels: tuple[Level, ...]  # innermost first
    gamma: float = LOCAL_GAMMA
    notes: dict = field(default_factory=dict, compare=False)
    overhead: float = 0.0  # seconds of software per collective call, whatever its size

    @property
    def gamma_eff(self) -> float:
        """Seconds per byte reduced when the innermost level's ranks share cores."""
        return self.gamma * self.levels[0].oversubscription

    @property
    def world_size(self) -> int:
        n = 1
        for lv in self.levels:
            n *= lv.size
        return n

    def level_for(self, span: int) -> Level:
        """The outermost level a group of `span` consecutive ranks must cross."""
        inner = 1
        for lv in self.levels:
            inner *= lv.size
            if span <= inner:
                return lv
        return self.levels[-1]

    def to_json(self) -> str:
        return json.dumps({"levels": [asdict(lv) for lv in self.levels], "gamma": self.gamma,
                           "overhead": self.overhead}, indent=2)

    @staticmethod
    def from_json(text_or_path) -> Topology:
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            text = Path(text).read_text()
        try:
            d = json.loads(text)
            levels = tuple(Level(**lv) for lv in d["levels"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CommArgumentError(
                f"bad topology description: {exc}",
                hint='expected {"levels": [{"name", "size", "alpha", "beta"}...], '
                     '"gamma": s/byte, "overhead": s per call}') from None
        if not levels or any(lv.size < 1 for lv in levels):
            raise CommArgumentError("a topology needs levels of size >= 1")
        return Topology(levels, float(d.get("gamma", LOCAL_GAMMA)),
                        overhead=float(d.get("overhead", 0.0)))

    @staticmethod
    def uniform(p: int, alpha: float, beta: float, gamma: float = LOCAL_GAMMA) -> Topology:
        return Topology((Level("flat", p, alpha, beta),), gamma)


def numa_nodes(root: str = "/sys/devices/system/node") -> list[list[int]]:
    """CPUs of each NUMA node, from /sys (one node with all CPUs if /sys says nothing)."""
    nodes = []
    for d in sorted(Path(root).glob("node[0-9]*")):
        cpus = _parse_cpulist((d / "cpulist").read_text().strip())
        if cpus:
            nodes.append(cpus)
    return nodes or [list(range(os.cpu_count() or 1))]


def _parse_cpulist(text: str) -> list[int]:
    cpus = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def detect(comm=None, ranks_per_numa: int | None = None) -> Topology:
    """This machine's levels: ranks per NUMA node, NUMA nodes per host, and (with an MPI
    communicator) hosts, counted from the ranks' host names. With a communicator the
    ranks are spread evenly, and more ranks than CPUs in a node set the innermost level's
    oversubscription (ranks per CPU); without, one rank per CPU."""
    nodes = numa_nodes()
    hosts = 1
    if comm is not None and comm.backend == "mpi":
        hosts = len(set(comm.mcomm.allgather(socket.gethostname())))
    if ranks_per_numa is None:
        ranks_per_numa = -(-comm.size // (hosts * len(nodes))) if comm else len(nodes[0])
    over = max(1.0, ranks_per_numa / max(1, len(nodes[0])))
    levels = [Level("numa", ranks_per_numa, LOCAL_ALPHA, LOCAL_BETA, over),
              Level("host", len(nodes), 2 * LOCAL_ALPHA, 2 * LOCAL_BETA)]
    if comm is not None and comm.backend == "mpi":
        levels.append(Level("network", hosts, 20e-6, 1 / 10e9))
    return Topology(tuple(levels), LOCAL_GAMMA, {"numa_cpus": nodes})
