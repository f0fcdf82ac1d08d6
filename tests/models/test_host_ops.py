"""The host work of an optimiser step (models/optim/table.py's kept hyper-parameter table,
the launch bound once per backend) and of cross_entropy's labels check: the kept table
gives the bits of a table made anew every step while settings, skipped parameters, a
loaded state, removed state entries and the loss scale change; a steady step computes no
row (SGD) or one (Adam); the labels check names the range on short and long arrays."""

import numpy as np
import pytest

import tilepy
from tilepy.models import Parameter, Tensor, nn
from tilepy.models.errors import ModelError
from tilepy.models.kernels import launch as L
from tilepy.models.optim import SGD, Adam

SHAPES = [(3, 5), (5,), (1100,)]


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return [Parameter(rng.standard_normal(s).astype(np.float32)) for s in SHAPES]


def _grads(steps, seed=1):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(steps)]


def _anew(opt):
    """opt, its tables forgotten before each step (every row computed again)."""
    kept = opt._table

    def table(bucket, active):
        opt._hp.clear()
        return kept(bucket, active)
    opt._table = table
    return opt


def _set(key, value):
    def change(opt, params, saved):
        for g in opt.param_groups:
            g[key] = value
    return change


def _load(opt, params, saved):
    opt.load_state_dict(saved)


def _scale(opt, params, saved):
    opt.grad_scale = 0.25


def _forget_momentum(opt, params, saved):
    del opt.state[params[0]]["momentum_buffer"]


# step -> what changes before it; parameter 1 has no gradient at steps 3 and 4, so from
# step 5 on its step count lags (Adam's rows differ while nothing else changes at step 6)
CHANGES = {
    "sgd": {2: _set("lr", 0.05), 4: _scale, 5: _set("momentum", 0.5), 6: _load,
            7: _forget_momentum, 8: _set("weight_decay", 0.01), 9: _set("lr", 0.0)},
    "adam": {2: _set("lr", 0.005), 4: _scale, 7: _set("betas", (0.8, 0.99)), 8: _load,
             9: _set("weight_decay", 0.01)},
}
CHANGES["adam_one_group"] = CHANGES["adam"]
MAKE = {
    "sgd": lambda ps: SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "adam": lambda ps: Adam([{"params": ps[:2]}, {"params": ps[2:], "lr": 0.02, "name": "b"}],
                            lr=0.01),
    "adam_one_group": lambda ps: Adam(ps, lr=0.01),
}


def _run(rule: str, anew: bool) -> list:
    params = _params()
    opt = MAKE[rule](params)
    if anew:
        _anew(opt)
    out, saved = [], None
    for t, gs in enumerate(_grads(14)):  # steps 10-13: only the step counts change
        if t in CHANGES[rule]:
            CHANGES[rule][t](opt, params, saved)
        for i, (p, g) in enumerate(zip(params, gs)):
            p.grad = None if (i == 1 and t in (3, 4)) else g.copy()  # skipped twice
        opt.step()
        if t == 1:
            saved = opt.state_dict()
        out += [p.data.copy() for p in params]
    state = opt.state_dict()["state"]
    return out + [v for k in sorted(state) for _, v in sorted(state[k].items())]


@pytest.mark.parametrize("rule", ["sgd", "adam", "adam_one_group"])
def test_the_kept_table_gives_the_bits_of_a_table_made_anew_each_step(rule):
    kept, anew = _run(rule, False), _run(rule, True)
    assert len(kept) == len(anew)
    for a, b in zip(kept, anew):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert not np.array_equal(kept[0], kept[3 * 5])  # the parameters did move


def test_a_steady_step_computes_no_row_for_sgd_and_one_for_adam(monkeypatch):
    counts = {}
    for cls in (SGD, Adam):
        real = cls._row

        def counted(self, g, st, real=real, cls=cls):
            counts[cls] = counts.get(cls, 0) + 1
            return real(self, g, st)
        monkeypatch.setattr(cls, "_row", counted)
    for make, cls, per_step in ((MAKE["sgd"], SGD, 0), (lambda ps: Adam(ps, lr=0.01), Adam, 1)):
        params = _params()
        opt = make(params)
        grads = _grads(5)
        tables = []
        for t, gs in enumerate(grads):
            for p, g in zip(params, gs):
                p.grad = g
            if t == 2:
                counts[cls] = 0
            opt.step()
            tables.append(opt._hp[id(opt._buckets[0])].array)
        assert counts[cls] == 3 * per_step  # steps 2-4
        assert all(t is tables[0] for t in tables)


def test_the_optimisers_launch_is_bound_once_per_backend(monkeypatch):
    binds = []
    real = L.bound
    monkeypatch.setattr(L, "bound", lambda k, arrays: binds.append(k) or real(k, arrays))
    runs = []
    for backends in (["jit"] * 5, ["jit", "jit", "jit", "interp", "jit"]):
        params = _params()
        opt = SGD(params, lr=0.1, momentum=0.9)
        binds.clear()
        for name, gs in zip(backends, _grads(5)):
            for p, g in zip(params, gs):
                p.grad = g
            with tilepy.backend(name):
                opt.step()
        runs.append(([p.data.copy() for p in params], len(binds)))
    # one bind while the backend stays, one more at each change
    assert runs[0][1] == 1 and runs[1][1] == 3
    assert all(a.tobytes() == b.tobytes() for a, b in zip(runs[0][0], runs[1][0]))


@pytest.mark.parametrize("n,bad,shown", [(8, -3, "-3 to 7"), (8, 12, "0 to 12"),
                                         (600, -1, "-1 to 9"), (600, 10, "0 to 10")])
def test_labels_out_of_range_are_named_for_short_and_long_batches(n, bad, shown):
    labels = np.arange(n, dtype=np.int32) % 10
    labels[n // 2] = bad
    logits = Tensor(np.zeros((n, 10), np.float32), requires_grad=True)
    with pytest.raises(ModelError, match=rf"labels must lie in \[0, 10\); got values from "
                                         rf"{shown}"):
        nn.functional.cross_entropy(logits, labels)


def test_table_cells_round_as_numpys_cast():
    # Table writes single cells through a memoryview: the same rounding as astype
    rng = np.random.default_rng(2)
    vals = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.integers(-46, 39, 2000),
                           [1 + 2 ** -24, 1 + 3 * 2 ** -24, 2 ** -149 * 1.5, 3.5e38, -0.0,
                            np.inf, np.nan]])
    cells = np.zeros(len(vals), np.float32)
    view = memoryview(cells)
    for i, v in enumerate(vals.tolist()):
        view[i] = v
    with np.errstate(over="ignore"):
        assert cells.tobytes() == vals.astype(np.float32).tobytes()
