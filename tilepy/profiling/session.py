"""A profiling session: the launch hook, the launch records and the summary table.

`profile()` installs a session as `tilepy.backend`'s one global hook; every kernel launch
then goes through `Profile.launch`, which times the backend call. Counts (flops, bytes) are
computed from the IR when the report is made, never inside the timed launch.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Launch:
    """One kernel launch: what ran, where, when (ns since the session began) and for how
    long (seconds, the backend call alone: argument checks and output allocation excluded)."""

    name: str
    backend: str
    start_ns: int
    seconds: float
    sizes: dict
    func: object = field(repr=False)
    thread: int = 0

    @property
    def key(self) -> tuple:
        return (self.name, self.backend, tuple(sorted(self.sizes.items())), id(self.func))


@dataclass(frozen=True)
class Row:
    """The launches of one kernel at one set of sizes on one backend, summarised."""

    name: str
    backend: str
    sizes: dict
    calls: int
    total_s: float
    best_s: float
    flops: int
    bytes: int
    exact_counts: bool
    peak_gflops: float
    peak_gbs: float

    @property
    def gflops(self) -> float:
        return self.flops / self.best_s / 1e9 if self.best_s else 0.0

    @property
    def gbs(self) -> float:
        return self.bytes / self.best_s / 1e9 if self.best_s else 0.0

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else math.inf

    @property
    def roof_gflops(self) -> float:
        """The roofline's bound at this kernel's intensity."""
        return min(self.peak_gflops, self.intensity * self.peak_gbs)

    @property
    def bound(self) -> str:
        return "compute" if self.intensity * self.peak_gbs >= self.peak_gflops else "memory"


class Profile:
    """The launches recorded inside `with tilepy.profile() as p:` (see `table`, `rows`,
    `trace`, `roofline`)."""

    def __init__(self, roofline=None):
        self._raw: list[tuple] = []  # per launch, as cheap to record as possible
        self._built: list[Launch] = []
        self._origin = time.perf_counter_ns()
        self._roof = roofline
        self._counts: dict = {}
        self._hook = importlib.import_module("tilepy.backend")

    def launch(self, func, arrays: dict, sizes: dict, run) -> None:
        """Run one launch through `run` and record it (the backend hook calls this)."""
        chosen = self._hook._current.get()  # what backend.current() reads first
        t0 = time.perf_counter_ns()
        run(func, arrays, sizes)
        t1 = time.perf_counter_ns()
        self._raw.append((func, chosen, t0, t1, sizes, threading.get_ident()))

    @property
    def launches(self) -> list[Launch]:
        """The launches so far, in order (records are made on first access)."""
        for func, chosen, t0, t1, sizes, thread in self._raw[len(self._built):]:
            name, options = chosen if chosen is not None else self._hook.current()
            tag = name + ("+fast" if options.get("fast") else "")
            self._built.append(Launch(func.name, tag, t0 - self._origin, (t1 - t0) / 1e9,
                                      dict(sizes), func, thread))
        return self._built

    def roof(self):
        """The machine's roofline (measured once, then read from the cache dir)."""
        if self._roof is None:
            from tilepy.profiling.roofline import machine_roofline

            self._roof = machine_roofline()
        return self._roof

    def counts(self, rec: Launch):
        """The IR's flop/byte counts of one launch (cached per kernel and sizes)."""
        key = (id(rec.func), tuple(sorted(rec.sizes.items())))
        if key not in self._counts:
            from tilepy.ir.analysis import Counts, count

            try:
                c = count(rec.func, rec.sizes)
            except Exception as err:  # noqa: BLE001 - a report must not fail on one kernel
                c = Counts(exact=False, notes=(f"not counted: {type(err).__name__}: {err}",))
            self._counts[key] = (rec.func, c)
        return self._counts[key][1]

    def rows(self) -> list[Row]:
        """One row per kernel, sizes and backend, in order of first launch."""
        groups: dict = {}
        for rec in self.launches:
            groups.setdefault(rec.key, []).append(rec)
        roof = self.roof() if groups else None
        out = []
        for recs in groups.values():
            c = self.counts(recs[0])
            secs = [r.seconds for r in recs]
            out.append(Row(recs[0].name, recs[0].backend, recs[0].sizes, len(recs),
                           sum(secs), min(secs), c.flops, c.global_bytes, c.exact,
                           roof.gflops, roof.gbs))
        return out

    def table(self) -> str:
        """A markdown table: per kernel, calls, best and total time, achieved GFLOP/s and GB/s
        (from the best call) and their fraction of the roofline at the kernel's intensity."""
        return format_table(self.rows(), self.roof() if self.launches else None)

    def trace(self, path=None) -> dict:
        """The launches as a Chrome/Perfetto trace (chrome://tracing's JSON object format);
        written to `path` when given."""
        from tilepy.profiling.trace import chrome_trace, write

        doc = chrome_trace(self)
        if path is not None:
            write(doc, path)
        return doc

    def roofline(self, path) -> str:
        """A roofline plot of the profiled kernels, saved as PNG (needs matplotlib: the
        `viz` extra). Returns the path."""
        from tilepy.profiling.roofline import plot

        return plot(self.rows(), self.roof(), path)


def format_table(rows: list[Row], roof) -> str:
    if not rows:
        return "(no kernel launches were recorded)"
    head = ("| kernel | backend | sizes | calls | best ms | total ms | GFLOP/s | GB/s | "
            "flop/byte | bound | % of roof |")
    lines = [head, "|---" * 11 + "|"]
    for r in rows:
        sizes = " ".join(f"{k}={v}" for k, v in r.sizes.items()) or "-"
        share = r.gflops / r.roof_gflops * 100 if r.roof_gflops else 0.0
        star = "" if r.exact_counts else "*"
        lines.append(f"| {r.name} | {r.backend} | {sizes} | {r.calls} | {r.best_s * 1e3:.3f} "
                     f"| {r.total_s * 1e3:.3f} | {r.gflops:.2f}{star} | {r.gbs:.2f}{star} | "
                     f"{r.intensity:.2f} | {r.bound} | {share:.1f} |")
    lines.append(f"\nroofline: {roof.gflops:.1f} GFLOP/s ({roof.flops_source}), "
                 f"{roof.gbs:.1f} GB/s ({roof.bytes_source})")
    if any(not r.exact_counts for r in rows):
        lines.append("* counts bounded (data-dependent control flow) or not counted")
    return "\n".join(lines)


_ACTIVE: list[Profile] = []


@contextlib.contextmanager
def profile(roofline=None):
    """`with tilepy.profile() as p:` records every kernel launch in the block; `print(
    p.table())` after it. Sessions nest (the innermost records). `roofline`: a
    `Roofline` to compare against instead of this machine's measured one."""
    hook = importlib.import_module("tilepy.backend")  # the module, not tilepy.backend()
    session = Profile(roofline)
    _ACTIVE.append(session)
    hook.PROFILER = session
    try:
        yield session
    finally:
        _ACTIVE.remove(session)
        hook.PROFILER = _ACTIVE[-1] if _ACTIVE else None


def do_bench(fn, warmup: int = 1, rep: int = 5) -> list[float]:
    """Call `fn()` `warmup` times, then `rep` times inside a profiling session; the seconds
    of each kernel launch of the timed calls (the launches alone, not Python around them)."""
    for _ in range(warmup):
        fn()
    with profile() as p:
        for _ in range(rep):
            fn()
    return [r.seconds for r in p.launches]

