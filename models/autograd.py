"""Reverse-mode autograd: the graph node an op records (`Node`), the backward pass over a
tensor's graph (`backward`), and `no_grad`. Gradients are numpy arrays; the arithmetic of
accumulating them is the `binary` add kernel. Knows nothing about particular ops.
"""

from __future__ import annotations

import contextlib
import contextvars

import numpy as np

from tilepy.models.kernels.record import leaf_grad

_GRAD = contextvars.ContextVar("tilepy_models_grad", default=True)


def is_grad_enabled() -> bool:
    return _GRAD.get()


@contextlib.contextmanager
def no_grad():
    """Ops inside record no graph (evaluation, optimiser updates)."""
    token = _GRAD.set(False)
    try:
        yield
    finally:
        _GRAD.reset(token)


class Node:
    """One recorded op: its inputs and the function from the output's gradient to theirs
    (a tuple aligned with `parents`, None where an input needs none)."""

    __slots__ = ("backward", "parents", "name")

    def __init__(self, backward, parents, name: str):
        self.backward = backward
        self.parents = parents
        self.name = name


def _topological(root) -> list:
    """Tensors reachable from `root` through nodes, each after every tensor it feeds.
    A depth-first post-order, a tensor expanded when first popped (not when first pushed:
    in x + f(x), x must finish after f's subtree, which also reaches it). Tensors hash by
    identity (they define no __eq__), so they key the sets and dicts here themselves."""
    order, expanded, stack = [], set(), [(root, False)]
    push, pop = stack.append, stack.pop
    while stack:
        t, done = pop()
        if done:
            order.append(t)
            continue
        if t in expanded:
            continue
        expanded.add(t)
        push((t, True))
        node = t._node
        if node is None:
            continue
        for p in node.parents:
            if p.requires_grad and p not in expanded:
                push((p, False))
    order.reverse()
    return order


def _add(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    from tilepy.models.kops import binary  # the kernel ops sit above this module

    return binary(a, b, "add", out=out)


def backward(root, grad: np.ndarray) -> None:
    """Accumulate d(root)/d(leaf) * grad into `.grad` of every leaf that requires it."""
    grads = {root: grad}
    for t in _topological(root):
        g = grads.pop(t, None)
        if g is None:
            continue
        node = t._node
        if node is None:  # a leaf: accumulate into .grad (its own array, never shared)
            if t.grad is None:
                leaf_grad(t, g)
            else:
                _add(t.grad, g, out=t.grad)
            continue
        for p, pg in zip(node.parents, node.backward(g)):
            if pg is None or not p.requires_grad:
                continue
            prev = grads.get(p)
            grads[p] = pg if prev is None else _add(prev, pg)
