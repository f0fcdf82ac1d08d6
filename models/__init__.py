"""tilepy.models: autograd tensors, layers, optimisers, data sets and training loops whose
every op is a tilepy kernel (being built; see docs/models.md once it exists).
"""

from tilepy.models.tensor import Parameter, Tensor

__all__ = ["Parameter", "Tensor"]

# training side (optimisers, data, fit, checkpoints): tilepy.models.optim / data / training
from tilepy.models import data, optim, training  # noqa: E402
from tilepy.models.training import fit, load, save  # noqa: E402

__all__ += ["data", "fit", "load", "optim", "save", "training"]
