"""tilepy.models.optim: optimisers as fused tile kernels over a flat per-dtype state layout
(SGD, Adam, AdamW), learning-rate schedules (`optim.lr_scheduler`), gradient clipping by
global norm (`clip_grad_norm_`) and mixed precision (`MixedPrecision`: float32 master
weights, loss scaling).
"""

from tilepy.models.optim import lr_scheduler
from tilepy.models.optim.clip import clip_grad_norm_
from tilepy.models.optim.mixed import MixedPrecision
from tilepy.models.optim.optimizer import Optimizer
from tilepy.models.optim.rules import SGD, Adam, AdamW

__all__ = ["SGD", "Adam", "AdamW", "MixedPrecision", "Optimizer", "clip_grad_norm_",
           "lr_scheduler"]
