"""tilepy.models: autograd tensors, layers, optimisers, data sets and training loops whose
every op is a tilepy kernel (docs/models.md). `from tilepy.models import Tensor, nn`.
"""

from tilepy.models import nn
from tilepy.models.autograd import no_grad
from tilepy.models.ops import cat
from tilepy.models.tensor import Parameter, Tensor

__all__ = ["Parameter", "Tensor", "cat", "nn", "no_grad"]

# training side (optimisers, data, fit, checkpoints): tilepy.models.optim / data / training
from tilepy.models import data, optim, training  # noqa: E402
from tilepy.models.training import fit, load, save  # noqa: E402

__all__ += ["data", "fit", "load", "optim", "save", "training"]

from tilepy.models.capture import Capture, capture  # noqa: E402

__all__ += ["Capture", "capture"]
