"""The host operations of a captured training step (optimiser step, zero_grad, gradient
bindings, the labels' range check) against the code before they were made cheap, in one
process: two captured steps of bench/train_bench.py's row, one recorded and replayed
with the earlier paths swapped in, replayed in alternating rounds:

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/host_ab.py \\
        --model transformer [--fast] [--adam] [--rounds 30] [--steps 10]

Prints per variant the minimum over the rounds of the one-thread CPU time
(`time.process_time`) of each host operation (timed alone inside the replay, so its
caches are as cold as the kernels leave them; an empty operation timed the same way is
printed too: the clock's own cost) and of a whole replayed step. Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import train_bench as B  # noqa: E402

import tilepy  # noqa: E402
from tilepy.models import capture, replay  # noqa: E402
from tilepy.models.kernels import launch as L  # noqa: E402
from tilepy.models.kernels import record as hooks  # noqa: E402
from tilepy.models.nn import functional as F  # noqa: E402
from tilepy.models.nn import module  # noqa: E402
from tilepy.models.optim import flat, optimizer, table  # noqa: E402
from tilepy.models.replay_grads import plan  # noqa: E402

# ---- the earlier paths

def _old_table_step(self, opt, active):
    """The table as before: every row computed, state views looked up, every step."""
    ct = np.float64 if self.bucket.dtype == np.float64 else np.float32
    rows = np.zeros((len(self.bucket.params), len(opt.columns)), np.float64)
    for i in active:
        p = self.bucket.params[i]
        st = opt.state[p]
        st["step"] += 1
        g = opt.param_groups[opt._group_of[id(p)]]
        row = opt._row(g, st)
        opt._prepare(g, st, self.bucket, i)
        row["grad_scale"] = opt.grad_scale
        rows[i] = [row[c] for c in opt.columns]
    return rows.astype(ct)


def _old_run(self, key, kernel, *arrays):
    L.launch(kernel(), *arrays)


def _old_gather(self):
    """sync_data, the active list and the gradient copies as three passes."""
    self.sync_data()
    active = [i for i, p in enumerate(self.params) if p.grad is not None]
    for i in active:
        if self.params[i].grad is not self.grad_views[i]:
            self._copy_grad(i, self.params[i].grad)
    return active


@hooks.host_op
def _old_zero_grad(self) -> None:
    for p in self.parameters():
        p.grad = None


@hooks.host_op
def _old_labels_in_range(labels, c) -> None:
    if labels.size and (labels.min() < 0 or labels.max() >= c):
        raise ValueError("labels out of range")


def _old_plan(rec, result):
    """Each gradient copied into the flat buffer's view (no kernel writes it)."""
    _, grads = plan(rec, result)
    return {}, {k: (t, dst, src if src is not None else rec.steps[k][3])
                for k, (t, dst, src) in grads.items()}


@contextlib.contextmanager
def old_run_paths():
    """What the replay of a 'before' recording calls at run time."""
    saved = table.Table.step, optimizer.Optimizer._run, flat.FlatBucket.gather
    table.Table.step, optimizer.Optimizer._run = _old_table_step, _old_run
    flat.FlatBucket.gather = _old_gather
    try:
        yield
    finally:
        table.Table.step, optimizer.Optimizer._run, flat.FlatBucket.gather = saved


def before_graph(kind: str, adam: bool):
    """The step recorded with the earlier host operations, one gradient copy an op."""
    saved = module.Module.zero_grad, F._labels_in_range, replay.grad_plan
    module.Module.zero_grad, F._labels_in_range = _old_zero_grad, _old_labels_in_range
    replay.grad_plan = _old_plan
    try:
        with old_run_paths():
            graph = captured(kind, adam)
    finally:
        module.Module.zero_grad, F._labels_in_range, replay.grad_plan = saved
    ops, names = [], []
    for (call, big), name in zip(graph.ops, graph.names):
        if getattr(call, "func", None) is replay.bind_grads:
            for item in call.args[0]:
                ops.append((functools.partial(replay.bind_grads, (item,)), None))
                names.append(None)
            continue
        ops.append((call, big))
        names.append(name)
    graph.ops, graph.names = ops, names
    return graph


def captured(kind: str, adam: bool):
    body, x, y = B.train_step(B.MAKERS[kind], B.SHAPES[kind], adam)
    step = capture(body)
    for _ in range(5):
        step(x, y)
    (graph,) = step._graphs.values()
    return graph


# ---- timing

def label(call) -> str:
    f = getattr(call, "func", call)
    name = getattr(f, "__name__", type(f).__name__)
    return {"bind": "gradient bindings", "_forget_grads": "zero_grad",
            "_old_zero_grad": "zero_grad", "_old_labels_in_range": "_labels_in_range"}.get(
                name, name)


def _nothing() -> None:
    pass


def time_ops(ops, names, per: dict) -> None:
    """Replay once, timing each host operation (and an empty one) alone."""
    for (call, big), name in zip(ops + [(_nothing, None)], names + [None]):
        if big is not None and big is not L._THREADS[2]:
            L._threads(big)
        if name is not None:
            call()
            continue
        t0 = time.process_time()
        call()
        dt = time.process_time() - t0
        key = "(empty operation)" if call is _nothing else label(call)
        per[key] = per.get(key, 0.0) + dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(B.SHAPES), default="transformer")
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--adam", action="store_true")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    ctx = tilepy.backend("jit", fast=True) if args.fast else contextlib.nullcontext()
    with ctx:
        graphs = {"before": before_graph(args.model, args.adam),
                  "after": captured(args.model, args.adam)}
        runs = {"before": old_run_paths, "after": contextlib.nullcontext}
        step = dict.fromkeys(graphs, float("inf"))
        per: dict = {k: {} for k in graphs}
        for _ in range(args.rounds):
            for name, g in graphs.items():
                with runs[name]():
                    one: dict = {}
                    time_ops(g.ops, g.names, one)
                    for k, v in one.items():
                        per[name][k] = min(per[name].get(k, float("inf")), v)
                    c0 = time.process_time()
                    for _ in range(args.steps):
                        L.replay(g.ops)
                    step[name] = min(step[name], (time.process_time() - c0) / args.steps)
    print(f"{args.model} {'fast' if args.fast else 'exact'} {'Adam' if args.adam else 'SGD'}, "
          f"load {os.getloadavg()[0]:.2f}; one-thread CPU us, min of {args.rounds} rounds "
          "(host operations: summed per kind within a replay)")
    keys = list(dict.fromkeys(list(per["before"]) + list(per["after"])))
    for k in keys:
        print(f"  {k:26s} " + "  ".join(f"{n} {per[n].get(k, 0.0) * 1e6:7.1f}" for n in graphs))
    print(f"  {'whole replayed step':26s} " + "  ".join(f"{n} {step[n] * 1e6:7.1f}"
                                                        for n in graphs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
