"""The training step of a zoo recipe (tilepy.models.zoo.train): zero the gradients, the
task's loss on a batch's arrays, backward, the optimiser's step; captured for replay
(tilepy.models.capture) unless run eagerly. A step the capture refuses is redone eagerly
from the state before it, and the run goes on eagerly after one log line saying why.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import capture
from tilepy.models.errors import CaptureError
from tilepy.models.nn import init as nn_init


class RecipeStep:
    """`step(idx) -> loss Tensor` on the batch `task.batch(idx)`. `eager_reason` is None
    while the step is captured, else why it runs eagerly."""

    def __init__(self, task, opt, captured: bool = True, log=print):
        self.task, self.opt, self.log = task, opt, log
        self.scaled = getattr(opt, "scale_loss", lambda loss: loss)
        self.eager_reason = None if captured else "--eager"
        self._replays = 0
        if captured and getattr(getattr(opt, "scaler", None), "enabled", False):
            self._eager("the dynamic loss scaler (--precision bf16/fp16) changes its scale "
                        "on the host after an overflow")
        self.run = capture(self._step) if self.eager_reason is None else None

    @property
    def replays(self) -> int:
        """How many steps were replayed (0 for an eager run)."""
        return self.run.replays if self.run is not None else self._replays

    def _step(self, *arrays):
        self.task.model.zero_grad()
        loss = self.task.loss(*arrays)
        self.scaled(loss).backward()
        self.opt.step()
        return loss

    def __call__(self, idx):
        arrays = self.task.batch(idx)
        if self.run is None:
            return self._step(*arrays)
        if not self.run.records_next(*arrays):
            return self.run(*arrays)
        saved = self._save()
        try:
            return self.run(*arrays)
        except CaptureError as e:
            self._restore(saved)
            self._replays, self.run = self.run.replays, None
            self._eager(getattr(e, "message", str(e)))
            return self._step(*arrays)

    def _eager(self, why: str) -> None:
        self.eager_reason = why
        self.log(f"training step runs eagerly (not captured): {why}")

    def _save(self) -> tuple:
        """What a refused step may have changed: parameters and buffers, the optimiser's
        state, the generator that dropout keys are drawn from."""
        model = {k: np.array(v, copy=True) for k, v in self.task.model.state_dict().items()}
        return model, self.opt.state_dict(), nn_init._RNG[0].bit_generator.state

    def _restore(self, saved: tuple) -> None:
        self.task.model.load_state_dict(saved[0])
        self.opt.load_state_dict(saved[1])
        nn_init._RNG[0].bit_generator.state = saved[2]
