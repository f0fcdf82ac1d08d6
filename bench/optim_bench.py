"""Time per optimiser step on the JIT for the parameters of a 64-256-256-10 MLP (85,002
values in 6 arrays): the flat layout's one launch per step against one launch per
parameter (the same kernel), bf16 weights with float32 masters and loss scaling (norm,
update and cast launches), plain numpy, and torch CPU when installed.

Run: TILEPY_QUIET=1 OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/optim_bench.py [rounds]
Prints the median time per step of interleaved rounds, launches per step, and ratios.
"""

import statistics
import sys
import time

import numpy as np

import tilepy
from tilepy.models import Parameter
from tilepy.models.optim import SGD, AdamW, MixedPrecision
from tilepy.models.optim.kernels import adam_kernel

SHAPES = [(64, 256), (256,), (256, 256), (256,), (256, 10), (10,)]
STEPS = 50


def _params():
    rng = np.random.default_rng(0)
    ps = [Parameter(rng.standard_normal(s).astype(np.float32)) for s in SHAPES]
    for p in ps:
        p.grad = rng.standard_normal(p.shape).astype(np.float32)
    return ps


def _ours(cls, kw, per_param):
    ps = _params()
    opts = [cls([p], **kw) for p in ps] if per_param else [cls(ps, **kw)]

    def step():
        for o in opts:
            o.step()
    step()  # compile / warm
    launches = sum(o.launches for o in opts)
    return step, launches


def _kernel_only():
    """The flat AdamW step's kernel call alone (tilepy's argument checks included)."""
    ps = _params()
    opt = AdamW(ps, lr=1e-3)
    opt.step()
    (b,) = opt._buckets
    active = list(range(len(ps)))
    args = (b.data, b.grad, b.state["exp_avg"], b.state["exp_avg_sq"],
            b.blocks(active, active), opt._table(b, active))
    kernel = adam_kernel(block=b.block, dtype="float32")
    return (lambda: kernel(*args)), 1


def _mixed():
    ps = _params()
    mp = MixedPrecision(ps, AdamW, lr=1e-3, policy="bf16")
    mp.step()
    return mp.step, (mp.launches + mp.optimizer.launches)


def _numpy_adamw():
    ps = _params()
    st = [(np.zeros_like(p.data), np.zeros_like(p.data)) for p in ps]
    t = [0]

    def step():
        t[0] += 1
        for p, (m, v) in zip(ps, st):
            p.data *= np.float32(1 - 1e-3 * 1e-2)
            m += np.float32(0.1) * (p.grad - m)
            v *= np.float32(0.999)
            v += np.float32(0.001) * p.grad * p.grad
            denom = np.sqrt(v) / np.float32(np.sqrt(1 - 0.999 ** t[0])) + np.float32(1e-8)
            p.data += np.float32(-1e-3 / (1 - 0.9 ** t[0])) * m / denom
    return step, 0


def _torch(name):
    import torch

    torch.set_num_threads(2)
    ps = [torch.nn.Parameter(torch.from_numpy(p.data)) for p in _params()]
    for p in ps:
        p.grad = torch.randn_like(p)
    opt = (torch.optim.AdamW(ps, lr=1e-3) if name == "adamw"
           else torch.optim.SGD(ps, lr=1e-3, momentum=0.9))
    return opt.step, 0


def main(rounds: int = 7) -> None:
    cases = {
        "AdamW flat (tilepy)": lambda: _ours(AdamW, dict(lr=1e-3), False),
        "AdamW flat: kernel call only": _kernel_only,
        "AdamW per-parameter launches": lambda: _ours(AdamW, dict(lr=1e-3), True),
        "AdamW numpy (6 arrays)": _numpy_adamw,
        "AdamW bf16 + fp32 masters": _mixed,
        "SGD momentum flat (tilepy)": lambda: _ours(SGD, dict(lr=1e-3, momentum=0.9), False),
        "SGD momentum per-parameter": lambda: _ours(SGD, dict(lr=1e-3, momentum=0.9), True),
    }
    try:
        import torch  # noqa: F401

        cases["AdamW torch CPU"] = lambda: _torch("adamw")
        cases["SGD momentum torch CPU"] = lambda: _torch("sgd")
    except ImportError:
        pass
    with tilepy.backend("jit"):
        made = {name: make() for name, make in cases.items()}
        times = {name: [] for name in cases}
        for _ in range(rounds):  # interleaved rounds: the host drifts
            for name, (step, _) in made.items():
                t0 = time.perf_counter()
                for _ in range(STEPS):
                    step()
                times[name].append((time.perf_counter() - t0) / STEPS)
    base = statistics.median(times["AdamW flat (tilepy)"])
    print(f"{'case':32s} {'us/step':>9s} {'launches/step':>14s} {'vs AdamW flat':>14s}")
    for name, ts in times.items():
        med = statistics.median(ts)
        launches = made[name][1]
        lps = "-" if not launches else str(launches)
        print(f"{name:32s} {med * 1e6:9.1f} {lps:>14s} {med / base:14.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
