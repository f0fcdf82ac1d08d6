"""tilepy.models.nn.utils: helpers beside the layers, under torch's names
(`nn.utils.rnn`: packed variable-length sequences for LSTM and GRU)."""

from tilepy.models.nn.utils import rnn

__all__ = ["rnn"]
