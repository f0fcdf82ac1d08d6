"""Where a replayed step puts its leaf gradients. A parameter that an optimiser stepped in
the recording gets its gradient in its view of the optimiser's flat gradient buffer, so
the optimiser's gather copies nothing. Where the kernels that made the gradient can
write that view themselves, they do, and the recorded copy goes. The step's gradient
bindings (`p.grad = ...`) run as one operation per run of them.
"""

from __future__ import annotations

import numpy as np

from tilepy.models.capture_check import _outputs, root


def plan(rec, result) -> tuple[dict, dict]:
    """({id(launch array): the flat-buffer view that replaces it}, {index of each 'grad'
    step: (tensor, array bound as its .grad, array copied into it or None)})."""
    views = _views(rec)
    uses = _uses(rec, result)
    per_param: dict = {}
    for step in rec.steps:
        if step[0] == "grad":
            per_param[id(step[1])] = per_param.get(id(step[1]), 0) + 1
    swap, grads = {}, {}
    for k, step in enumerate(rec.steps):
        if step[0] != "grad":
            continue
        t, dst, src = step[1:4]
        view = views.get(id(t))
        # the recorded .grad array must be the step's own (nothing else names it)
        if view is None or view.dtype != dst.dtype or view.shape != dst.shape \
                or len(uses.get(id(root(dst)), ())) > 1:
            grads[k] = (t, dst, src)
            continue
        direct = _writers(rec, k, src, view, uses) if per_param[id(t)] == 1 else None
        if direct is None:
            grads[k] = (t, view, src)
        else:
            swap.update(direct)
            grads[k] = (t, view, None)
    return swap, grads


def bind(items: tuple) -> None:
    """Replay a run of gradient bindings: copy where the kernels did not write the array,
    then make it the tensor's .grad (a replayed zero_grad may have set it to None)."""
    for t, dst, src in items:
        if src is not None:
            np.copyto(dst, src, casting="unsafe")
        t.grad = dst


def _views(rec) -> dict:
    """{id(parameter): its view of the flat gradient buffer} for the optimisers whose
    methods the step ran as host operations."""
    views = {}
    for step in rec.steps:
        opt = step[2][0] if step[0] == "host" and step[2] else None
        for bucket in getattr(opt, "_buckets", None) or ():
            for p, view in zip(bucket.params, bucket.grad_views):
                views[id(p)] = view
    return views


def _uses(rec, result) -> dict:
    """{id(root array): [(step index, array as the step names it)]} over the recording
    (a 'grad' step names the array it copies from; its destination is counted apart,
    as step index -1) and the returned value (index len(steps))."""
    uses: dict = {}
    for i, step in enumerate(rec.steps):
        if step[0] == "grad":
            named = [step[3]]
            uses.setdefault(id(root(step[2])), []).append((-1, step[2]))
        else:
            named = _arrays(list(step[1:-1]))
        for a in named:
            uses.setdefault(id(root(a)), []).append((i, a))
    for a in _arrays(result):
        uses.setdefault(id(root(a)), []).append((len(rec.steps), a))
    return uses


def _writers(rec, k: int, src, view, uses: dict) -> dict | None:
    """{id(array): replacement} that makes the launches writing grad step k's source
    write `view` instead, or None where that could change what any step sees: the
    source must be a whole array of view's size and dtype that only launches before step
    k name, the first of them writing it without reading it, with no host operation, and
    nothing naming the flat buffer, between that launch and step k."""
    r = root(src)
    if not _whole(src, r, view):
        return None
    named = [(i, a) for i, a in uses[id(r)] if i != k]
    if not named or any(i > k or rec.steps[i][0] != "launch" for i, a in named):
        return None
    first, a0 = named[0]
    launch = rec.steps[first]
    outs = _outputs(launch[1])
    if not any(x is a0 and j in outs for j, x in enumerate(launch[2])):
        return None
    if any(rec.steps[i][0] in ("host", "call", "fill") for i in range(first, k)):
        return None
    if any(first <= i < k for i, _ in uses.get(id(root(view)), ())):
        return None
    if not all(_whole(a, r, view) for _, a in named):
        return None
    return {id(a): view.reshape(a.shape) for _, a in named}


def _whole(a: np.ndarray, r: np.ndarray, view: np.ndarray) -> bool:
    """Whether `a` is all of r's memory, in C order, of view's dtype and size."""
    return (a.dtype == view.dtype and a.size == view.size == r.size and r.dtype == a.dtype
            and a.flags.c_contiguous and r.flags.c_contiguous
            and a.__array_interface__["data"][0] == r.__array_interface__["data"][0])


def _arrays(x) -> list:
    """The arrays in x (nested tuples, lists and dict values)."""
    if isinstance(x, np.ndarray):
        return [x]
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, (tuple, list)):
        return [a for v in x for a in _arrays(v)]
    return []
