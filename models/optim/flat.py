"""The ZeRO-ready state layout: parameters, gradients and optimiser moments packed into one
flat buffer per dtype, each parameter starting on a block boundary.

A `FlatBucket` owns the buffers of one dtype; every parameter's `.data` becomes a view of
its slice, so one kernel launch updates them all, and a contiguous range of blocks is a
shard a rank could own. It knows nothing of any update rule.
"""

from __future__ import annotations

import numpy as np

from tilepy.models.training.errors import OptimizerError, user_loc

DTYPES = ("float32", "float64", "bfloat16", "float16")


class FlatBucket:
    """The flat buffers (data, grad, optimiser state by name) of the parameters of one
    dtype."""

    def __init__(self, params: list, block: int, labels=None):
        self.params, self.block = params, block
        # each parameter's index in the optimiser's parameter list, for messages
        self.labels = list(labels) if labels is not None else list(range(len(params)))
        self.dtype = params[0].data.dtype
        self.offsets, off = [], 0
        for p in params:
            self.offsets.append(off)
            off += -(-max(p.data.size, 1) // block) * block
        self.size = off
        self.data = np.zeros(off, self.dtype)
        self.grad = np.zeros(off, self.dtype)
        self.state: dict[str, np.ndarray] = {}  # made on first use by buffer()
        self.views, self.grad_views = [], []
        for p, o in zip(params, self.offsets):
            view = self.data[o:o + p.data.size].reshape(p.data.shape)
            view[...] = p.data
            p.data = view
            self.views.append(view)
            self.grad_views.append(self.grad[o:o + view.size].reshape(view.shape))
        self._blocks_key, self._blocks = None, None

    def buffer(self, name: str) -> np.ndarray:
        """The flat state buffer `name`, made (zeros) on first use."""
        if name not in self.state:
            self.state[name] = np.zeros(self.size, self.dtype)
        return self.state[name]

    def slot(self, buf: np.ndarray, i: int) -> np.ndarray:
        """Parameter i's slice of the flat buffer `buf`, in the parameter's shape."""
        o = self.offsets[i]
        return buf[o:o + self.views[i].size].reshape(self.views[i].shape)

    def sync_data(self) -> None:
        """Re-attach parameters whose `.data` was replaced (e.g. by load_state_dict)."""
        for i, p in enumerate(self.params):
            if p.data is not self.views[i]:
                self._attach_data(i)

    def gather(self) -> list[int]:
        """sync_data, then copy each parameter's `.grad` into the flat gradient (unless it is
        already its view), in one pass: the indices of the parameters with a gradient."""
        active = []
        for i, (p, view, gview) in enumerate(zip(self.params, self.views, self.grad_views)):
            if p.data is not view:
                self._attach_data(i)
            g = p.grad
            if g is None:
                continue
            if g is not gview:
                self._copy_grad(i, g)
            active.append(i)
        return active

    def _attach_data(self, i: int) -> None:
        p = self.params[i]
        value = np.asarray(p.data)
        if value.shape != self.views[i].shape:
            raise OptimizerError(
                f"parameter {self.labels[i]} changed shape from "
                f"{self.views[i].shape} to {value.shape} after the optimiser was made",
                user_loc(), hint="make a new optimiser after changing the model")
        self.views[i][...] = value
        p.data = self.views[i]

    def _copy_grad(self, i: int, grad) -> None:
        g, dst = np.asarray(grad), self.grad_views[i]
        if g.shape != dst.shape:
            raise OptimizerError(
                f"gradient of parameter {self.labels[i]} has shape {g.shape}; expected "
                f"{dst.shape} "
                "(the parameter's shape)", user_loc(),
                hint="a backward pass must give each parameter a gradient of its shape")
        dst[...] = g

    def shard(self, rank: int, world: int) -> tuple[int, int]:
        """Elements [lo, hi) that rank `rank` of `world` owns: contiguous whole blocks,
        the ranks' runs differing by at most one block."""
        if not (isinstance(world, int) and world >= 1 and 0 <= rank < world):
            raise OptimizerError(f"shard needs 0 <= rank < world; got rank {rank}, world "
                                 f"{world}", user_loc())
        nb = self.size // self.block
        return nb * rank // world * self.block, nb * (rank + 1) // world * self.block

    def blocks(self, active: list[int], rows: list[int]) -> np.ndarray:
        """(start, row) of every block of the active parameters: the kernel's grid."""
        key = (tuple(active), tuple(rows))
        if key != self._blocks_key:
            out = []
            for i, r in zip(active, rows):
                nblk = -(-max(self.views[i].size, 1) // self.block)
                out += [(self.offsets[i] + b * self.block, r) for b in range(nblk)]
            self._blocks = np.array(out, np.int32).reshape(-1, 2)
            self._blocks_key = key
        return self._blocks


def dtype_name(p, index: int) -> str:
    """The parameter's dtype name, refused unless the optimiser kernels handle it."""
    name = str(np.asarray(p.data).dtype)
    if name not in DTYPES:
        raise OptimizerError(f"parameter {index} has dtype {name}; optimisers update "
                             f"{', '.join(DTYPES)} parameters", user_loc(),
                             hint="keep trainable parameters in a floating-point dtype")
    return name
