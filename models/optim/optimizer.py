"""The optimiser base: PyTorch's interface (param_groups, zero_grad, step, state_dict) over
the flat per-dtype layout of flat.py, with one kernel launch per dtype and step.

Subclasses give the state buffers they keep (`_prepare`), one hyper-parameter row per
parameter (`_row`: it reads only the group, the names of the parameter's state entries and,
where `row_reads_step`, its step count) and the launch; this module owns grouping,
per-parameter state, the hyper-parameter table and (de)serialisation.
"""

from __future__ import annotations

import numpy as np

from tilepy.models.kernels import record as hooks
from tilepy.models.kernels.launch import Held
from tilepy.models.optim.flat import FlatBucket, dtype_name
from tilepy.models.optim.table import Table
from tilepy.models.training.errors import OptimizerError, user_loc


class ParamState(dict):
    """`optimizer.state`: per-parameter state dicts, keyed by the parameter object itself."""

    def __init__(self):
        super().__init__()
        self._params = {}

    def __getitem__(self, p):
        return super().__getitem__(id(p))

    def __contains__(self, p):
        return super().__contains__(id(p))

    def get(self, p, default=None):
        return super().get(id(p), default)

    def set(self, p, value: dict) -> None:
        self._params[id(p)] = p
        super().__setitem__(id(p), value)


class Optimizer:
    """Base of SGD, Adam, AdamW: `param_groups` (dicts with 'params' and the
    hyper-parameters), `state` (per parameter), `zero_grad`, `step`, `state_dict`."""

    block = 1024  # elements per kernel block; each parameter starts on a block boundary
    row_reads_step = False  # whether _row reads the state's step count (Adam's corrections)

    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self.state = ParamState()
        self._buckets: list[FlatBucket] | None = None
        self._hp: dict = {}  # id(bucket) -> its hyper-parameter Table
        self._held: dict = {}  # (id(bucket), kernel choice) -> its Held launch
        self.launches = 0  # kernel launches so far (one per dtype and step)
        self.grad_scale = 1.0  # gradients are multiplied by this inside the kernel
        groups = list(params)
        if not groups:
            raise OptimizerError(f"{type(self).__name__} got an empty parameter list",
                                 user_loc(), hint="pass model.parameters()")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, group: dict) -> None:
        """Add a dict with 'params' and optional hyper-parameters (others default)."""
        group = dict(group)
        ps = group.get("params")
        ps = [ps] if hasattr(ps, "data") else list(ps or [])
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in ps:
            if not hasattr(p, "data") or not hasattr(p, "grad"):
                raise OptimizerError(f"{type(self).__name__} takes Parameters (or dicts of "
                                     f"them); got {type(p).__name__}", user_loc(),
                                     hint="pass model.parameters()")
            if id(p) in seen:
                raise OptimizerError("a parameter appears in more than one parameter group",
                                     user_loc(), hint="list each parameter once")
            seen.add(id(p))
        group["params"] = ps
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        self._check_group(group)
        self.param_groups.append(group)
        self._buckets = None  # rebuilt (keeping the state) at the next step

    def _check_group(self, group: dict) -> None:
        if group["lr"] < 0:
            raise OptimizerError(f"learning rate must be >= 0; got {group['lr']}", user_loc())

    def _all_params(self) -> list:
        return [p for g in self.param_groups for p in g["params"]]

    # ------------------------------------------------------------------ layout

    def _build(self) -> None:
        """Pack every parameter into flat buffers per dtype, keeping existing state."""
        by_dtype: dict[str, list] = {}
        group_of = {}
        for gi, g in enumerate(self.param_groups):
            for p in g["params"]:
                by_dtype.setdefault(dtype_name(p, len(group_of)), []).append((len(group_of), p))
                group_of[id(p)] = gi
        old = {k: dict(v) for k, v in dict.items(self.state)}
        self._buckets, self._group_of, self._hp, self._held = [], group_of, {}, {}
        for pairs in by_dtype.values():
            params = [p for _, p in pairs]
            bucket = FlatBucket(params, self.block, labels=[k for k, _ in pairs])
            self._buckets.append(bucket)
            for i, p in enumerate(params):
                self.state.set(p, self._attach(bucket, i, old.get(id(p), {})))

    def _attach(self, bucket: FlatBucket, i: int, old: dict) -> dict:
        """Parameter i's state dict: its step and views of the bucket's state buffers,
        filled from `old` (a previous layout's state)."""
        st = {"step": old.get("step", 0)}
        for name, value in old.items():
            if isinstance(value, np.ndarray):
                st[name] = bucket.slot(bucket.buffer(name), i)
                st[name][...] = value
        return st

    def _state_view(self, bucket: FlatBucket, i: int, name: str) -> np.ndarray:
        st = self.state[bucket.params[i]]
        if name not in st:
            st[name] = bucket.slot(bucket.buffer(name), i)
        return st[name]

    # ------------------------------------------------------------------ the step

    @hooks.host_op
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients (None), or zero them in place as views of the flat
        gradient buffer, which a backward pass may then accumulate into."""
        if set_to_none or self._buckets is None:
            for p in self._all_params():
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad = np.zeros_like(p.data)
            return
        for bucket in self._buckets:
            bucket.grad[...] = 0
            for p, view in zip(bucket.params, bucket.grad_views):
                p.grad = view

    @hooks.host_op
    def step(self, closure=None, shard: tuple[int, int] | None = None):
        """Update every parameter that has a gradient: one kernel launch per dtype.
        shard=(rank, world) updates only that rank's run of blocks of each flat buffer
        (ZeRO-1: the ranks' runs together make the whole step, with the same bits)."""
        loss = closure() if closure is not None else None
        self._update(self._gather(), shard)
        return loss

    def _gather(self) -> list:
        """Pack the gradients into the flat buffers: [(bucket, active indices)]."""
        if self._buckets is None:
            self._build()
        plan = []
        for bucket in self._buckets:
            active = bucket.gather()
            if active:
                plan.append((bucket, active))
        return plan

    def _update(self, plan: list, shard: tuple[int, int] | None = None) -> None:
        """Advance the step counts of the active parameters and launch the update."""
        for bucket, active in plan:
            hp = self._table(bucket, active)
            blocks = bucket.blocks(active, active)
            if shard is not None:
                lo, hi = bucket.shard(*shard)
                blocks = np.ascontiguousarray(blocks[(blocks[:, 0] >= lo) & (blocks[:, 0] < hi)])
                if not len(blocks):
                    continue
            self._launch(bucket, blocks, hp)
            self.launches += 1

    def _run(self, key: tuple, kernel, *arrays: np.ndarray) -> None:
        """launch(kernel(), *arrays), bound once while `key` (the kernel's choice) and the
        arrays repeat: `kernel` makes the Kernel, called only when the launch is bound."""
        held = self._held.get(key)
        if held is None or not held.holds(arrays):
            held = self._held[key] = Held(kernel(), arrays)
        held()

    def _table(self, bucket: FlatBucket, active: list[int]) -> np.ndarray:
        """This step's hyper-parameter table (advancing the active parameters' step
        counts): the bucket's table.py Table, kept across steps."""
        held = self._hp.get(id(bucket))
        if held is None or held.bucket is not bucket:
            held = self._hp[id(bucket)] = Table(self, bucket)
        return held.step(self, active)

    # ------------------------------------------------------------------ serialisation

    def state_dict(self) -> dict:
        """{'state': {index: {'step': int, buffer name: array copy}}, 'param_groups':
        [hyper-parameters with 'params' as indices]}, as torch.optim."""
        index = {id(p): k for k, p in enumerate(self._all_params())}
        state = {}
        for p in self._all_params():
            st = self.state.get(p)
            if st and st.get("step", 0):
                state[index[id(p)]] = {k: (v.copy() if isinstance(v, np.ndarray) else v)
                                       for k, v in st.items()}
        groups = [{**{k: v for k, v in g.items() if k != "params"},
                   "params": [index[id(p)] for p in g["params"]]} for g in self.param_groups]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore hyper-parameters and state saved by state_dict() of a like optimiser."""
        groups = state_dict.get("param_groups") if isinstance(state_dict, dict) else None
        if groups is None or "state" not in state_dict:
            raise OptimizerError("optimizer state dict must have 'state' and 'param_groups'",
                                 user_loc(), hint="pass what optimizer.state_dict() returned")
        if len(groups) != len(self.param_groups) or any(
                len(a["params"]) != len(b["params"]) for a, b in zip(groups, self.param_groups)):
            raise OptimizerError(
                "optimizer state dict does not fit: its groups have "
                f"{[len(g['params']) for g in groups]} parameters, this optimiser's "
                f"{[len(g['params']) for g in self.param_groups]}", user_loc(),
                hint="load the state of an optimiser made for the same model")
        if self._buckets is None:
            self._build()
        params = self._all_params()
        states = [state_dict["state"].get(k, state_dict["state"].get(str(k)))
                  for k in range(len(params))]
        for k, (p, saved) in enumerate(zip(params, states)):  # check all before changing any
            for name, value in (saved or {}).items():
                if name != "step" and value is not None and np.shape(value) != p.data.shape:
                    raise OptimizerError(
                        f"optimizer state '{name}' of parameter {k} has shape "
                        f"{np.shape(value)}; the parameter has {p.data.shape}", user_loc(),
                        hint="load the state of an optimiser made for the same model")
        for g, saved in zip(self.param_groups, groups):
            g.update({k: v for k, v in saved.items() if k != "params"})
        for p, saved in zip(params, states):
            self._load_param(p, saved)

    def _load_param(self, p, saved) -> None:
        """Parameter p's state from `saved` (None: no state, as before its first step)."""
        st = self.state[p]
        for name in [n for n in st if n != "step"]:
            st[name][...] = 0
            del st[name]  # a buffer is absent until used (SGD's first momentum step)
        st["step"] = int(saved["step"]) if saved else 0
        if not saved:
            return
        bucket = next(b for b in self._buckets if any(q is p for q in b.params))
        i = next(j for j, q in enumerate(bucket.params) if q is p)
        for name, value in saved.items():
            if name != "step" and value is not None:
                self._state_view(bucket, i, name)[...] = np.asarray(value)
