"""An optimiser's hyper-parameter table for one flat bucket, kept across steps: a row per
parameter in the kernel's compute dtype (each coefficient rounded once), computed again
only when what the rule's `_row` reads has changed (the group's hyper-parameters, the
names of the parameter's state entries and, where the rule reads it, the step count);
the grad_scale column is written on its own when the scale changes.
"""

from __future__ import annotations

import math

import numpy as np


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
        self.fresh = True  # whether bases and steps say what every row holds
        self.scale = None
        self.scale_col = opt.columns.index("grad_scale")

    def step(self, opt, active: list[int]) -> np.ndarray:
        versions = tuple(self._versions(opt.param_groups))
        if active != self.active:
            self.active, self.live, self.seen = list(active), [self.states[i] for i in active], None
        live = self.live
        for st in live:
            st["step"] += 1
        seen = (versions, [tuple(st) for st in live])
        if seen != self.seen:
            self._rows(opt, versions)
            self.seen, self.fresh = seen, True
        elif opt.row_reads_step:
            self._stepped(opt)
        scale = _key_value(opt.grad_scale)
        if scale != self.scale:  # MixedPrecision's unscale (and clip) factor
            self.array[:, self.scale_col] = opt.grad_scale
            self.scale = scale
        return self.array

    def _stepped(self, opt) -> None:
        """Only the step counts changed: one row for all where they are alike (one group,
        one step count, the same state entries), else row by row."""
        live, groups = self.live, self.groups
        steps, names = [st["step"] for st in live], self.seen[1]
        gi = groups[self.active[0]]
        if (steps.count(steps[0]) != len(steps) or names.count(names[0]) != len(names)
                or any(groups[i] != gi for i in self.active)):
            self._rows(opt, self.seen[0])
            return
        values = {**opt._row(opt.param_groups[gi], live[0]), "grad_scale": opt.grad_scale}
        self.array[self.active] = [float(values[c]) for c in opt.columns]
        self.fresh = False  # bases and steps no longer say what the rows hold

    def _rows(self, opt, versions: tuple) -> None:
        """Compute again each active row whose key changed (all of them after _stepped)."""
        if not self.fresh:
            self.bases, self.steps = [None] * len(self.bases), [None] * len(self.steps)
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

    def _versions(self, groups: list) -> list[int]:
        """Each group's version, advanced where its hyper-parameters changed."""
        for gi, g in enumerate(groups):
            h = tuple(_key_value(v) for k, v in g.items() if k != "params")
            if gi == len(self.hyper):
                self.hyper.append(h)
                self.versions.append(0)
            elif h != self.hyper[gi]:
                self.hyper[gi] = h
                self.versions[gi] += 1
        return self.versions


def _key_value(v):
    """v for comparing with a later value: a float zero keeps its sign (0.0 == -0.0, yet
    they can give different bits) and NaN equals itself."""
    if isinstance(v, (float, np.floating)):
        if v == 0:
            return (0.0, math.copysign(1.0, v))
        if v != v:
            return "nan"
    return v
