"""Input checks for the zoo's models: a wrong shape is a ModelError naming the model, the
expected and the given shape, instead of an error from a layer deep inside."""

from __future__ import annotations

import numpy as np

from tilepy.models.errors import model_error


def expect_shape(who: str, x, want: tuple, hint: str | None = None) -> None:
    """`want` holds sizes, or None where any size goes; x is a Tensor or an array."""
    shape = tuple(np.shape(x.data if hasattr(x, "data") else x))
    if len(shape) != len(want) or any(w is not None and w != s for w, s in zip(want, shape)):
        text = ", ".join("N" if i == 0 and w is None else "*" if w is None else str(w)
                         for i, w in enumerate(want))
        raise model_error(f"{who}: expected input of shape ({text}); got {shape}", hint=hint)
