"""tilepy.models.nn: modules with PyTorch's API whose ops are tile kernels
(`from tilepy.models import nn`; `nn.Linear`, `nn.Sequential`, `nn.functional`)."""

from tilepy.models.nn import functional
from tilepy.models.nn.init import manual_seed
from tilepy.models.nn.layers import (
    GELU,
    AvgPool2d,
    BatchNorm2d,
    Conv2d,
    Dropout,
    Embedding,
    EmbeddingBag,
    Flatten,
    LayerNorm,
    Linear,
    MaxPool2d,
    ReLU,
    RMSNorm,
    Sigmoid,
    SiLU,
    Tanh,
)
from tilepy.models.nn.module import Module, Sequential
from tilepy.models.nn.recurrent import GRU, LSTM
from tilepy.models.nn.transformer import MultiheadAttention, TransformerBlock

__all__ = ["AvgPool2d", "BatchNorm2d", "Conv2d", "Dropout", "Embedding", "EmbeddingBag",
           "Flatten", "GELU",
           "LayerNorm", "Linear", "MaxPool2d", "Module", "RMSNorm", "ReLU", "Sequential",
           "SiLU", "Sigmoid", "Tanh", "functional", "manual_seed"]
__all__ += ["GRU", "LSTM", "MultiheadAttention", "TransformerBlock"]

from tilepy.models.nn import utils  # noqa: E402 - nn.utils.rnn: packed sequences

__all__ += ["utils"]
