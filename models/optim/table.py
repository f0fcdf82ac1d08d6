"""An optimiser's hyper-parameter table for one flat bucket, kept across steps: a row per
parameter in the kernel's compute dtype (each coefficient rounded once), computed again
only when what the rule's `_row` reads has changed (the group's hyper-parameters, the
names of the parameter's state entries and, where the rule reads it, the step count);
the grad_scale column is written on its own when the scale changes.
"""

from __future__ import annotations

import math
import operator

import numpy as np

_STEP = operator.itemgetter("step")


class Table:
    """The table of one bucket; `step(opt, active)` advances the active parameters' step
    counts and returns the array (the same one every step)."""

    def __init__(self, opt, bucket):
        ct = np.float64 if bucket.dtype == np.float64 else np.float32
        n = len(bucket.params)
        self.bucket = bucket
        self.array = np.zeros((n, len(opt.columns)), ct)
        self.states = [opt.state[p] for p in bucket.params]
        self.groups = [opt._group_of[id(p)] for p in bucket.params]
        # what each row was computed from: (group, its version, state entry names), step
        self.bases: list = [None] * n
        self.steps: list = [None] * n
        self.hyper: list = []  # the groups' hyper-parameters at the last step
        self.versions: list[int] = []  # per group, counts the changes of its hyper-parameters
        self.active: list[int] | None = None  # the last step's active parameters
        self.live: list = []  # their state dicts
        self.seen = None  # (group versions, their state entry names) at the last step
        self.group = None  # the active parameters' group when they are all in one
        self.fresh = True  # whether bases and steps say what every row holds
        self.scale = None
        self.scale_col = opt.columns.index("grad_scale")
        # cell writes (each rounded once, as numpy's): between a replay's kernels a numpy
        # call costs tens of us of CPU, a few cells through a memoryview a few
        self.cells = memoryview(self.array)
        self.last = None  # the row _stepped last wrote to every active row

    def step(self, opt, active: list[int]) -> np.ndarray:
        versions = tuple(self._versions(opt.param_groups))
        if active != self.active:
            self.active, self.live, self.seen = list(active), [self.states[i] for i in active], None
            gs = {self.groups[i] for i in active}
            self.group = gs.pop() if len(gs) == 1 else None  # the active parameters' group
            self.last = None
        live = self.live
        for st in live:
            st["step"] += 1
        seen = (versions, list(map(tuple, live)))  # each one's state entry names
        if seen != self.seen:
            self._rows(opt, versions)
            self.seen = seen
        elif opt.row_reads_step:
            self._stepped(opt)
        scale = opt.grad_scale
        if scale is not self.scale and not _same(scale, self.scale):
            for i in range(len(self.states)):  # MixedPrecision's unscale and clip factor
                self.cells[i, self.scale_col] = scale
        self.scale = scale
        return self.array

    def _stepped(self, opt) -> None:
        """Only the step counts changed: one row for all where they are alike (one group,
        one step count, the same state entries), else row by row."""
        live, gi = self.live, self.group
        steps, names = list(map(_STEP, live)), self.seen[1]
        if (gi is None or steps.count(steps[0]) != len(steps)
                or names.count(names[0]) != len(names)):
            self._rows(opt, self.seen[0])
            return
        values = {**opt._row(opt.param_groups[gi], live[0]), "grad_scale": opt.grad_scale}
        row, last = [float(values[c]) for c in opt.columns], self.last
        if last is None:
            self.array[self.active] = row
        else:  # the columns that changed (Adam's two bias-corrected ones), cell by cell
            for c, (v, w) in enumerate(zip(row, last)):
                if v != w or (v == 0 and math.copysign(1.0, v) != math.copysign(1.0, w)):
                    for i in self.active:
                        self.cells[i, c] = v
        self.last = row
        self.fresh = False  # bases and steps no longer say what the rows hold

    def _rows(self, opt, versions: tuple) -> None:
        """Compute again each active row whose key changed (all of them after _stepped)."""
        if not self.fresh:
            self.bases, self.steps = [None] * len(self.bases), [None] * len(self.steps)
        self.last = None
        reads_step, bases, steps = opt.row_reads_step, self.bases, self.steps
        rows: dict = {}  # (base, step) -> [row, indices of the rows it goes to]
        for i, st in zip(self.active, self.live):
            t = st["step"] if reads_step else 0
            gi = self.groups[i]
            base = (gi, versions[gi], tuple(st))
            if base == bases[i] and t == steps[i]:
                continue
            todo = rows.get((base, t))
            if todo is None:  # computed before _prepare adds state entries (SGD's first step)
                values = {**opt._row(opt.param_groups[gi], st), "grad_scale": opt.grad_scale}
                todo = rows[(base, t)] = [[float(values[c]) for c in opt.columns], []]
            todo[1].append(i)
            if base != bases[i]:  # settings or state entries changed: make what they need
                opt._prepare(opt.param_groups[gi], st, self.bucket, i)
            bases[i], steps[i] = base, t
        for row, where in rows.values():
            self.array[where] = row
        self.fresh = True

    def _versions(self, groups: list) -> list[int]:
        """Each group's version, advanced where its hyper-parameters changed: the same
        objects as at the last step are unchanged, others are compared by value."""
        for gi, g in enumerate(groups):
            h = tuple(g.values())
            if gi == len(self.hyper):
                self.hyper.append(h)
                self.versions.append(0)
                continue
            old = self.hyper[gi]
            if len(h) == len(old) and all(map(operator.is_, h, old)):
                continue
            if not _same(h, old):
                self.versions[gi] += 1
            self.hyper[gi] = h
        return self.versions


def _same(a, b) -> bool:
    """Whether a and b (hyper-parameter values) are equal and give the same rows: a float
    zero's sign counts (0.0 == -0.0, yet a -0.0 learning rate can give other bits)."""
    if a is b:
        return True
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating)):
        return bool(a == b) and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, (bool, int, str, np.integer, np.bool_)) and type(a) is type(b):
        return bool(a == b)
    return False  # another object (or type): counted as a change
