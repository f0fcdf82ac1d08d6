"""Sequence classifiers: a GRU whose cell is composed of existing ops (two Linears, sigmoid,
tanh, products and sums), unrolled over time in Python; an LSTM on nn.LSTM (fused gate
kernels, backward through time in one graph node).

GRU (PyTorch's gate order r, z, n): r = sigmoid(W_ir x + W_hr h), z = sigmoid(W_iz x +
W_hz h), n = tanh(W_in x + r * (W_hn h)), h' = (1 - z) * n + z * h.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import Tensor, nn
from tilepy.models.zoo.checks import expect_shape


class GRUCell(nn.Module):
    """One step: (x (N, input), h (N, hidden)) -> h' (N, hidden)."""

    def __init__(self, input_size: int, hidden_size: int, dtype=np.float32):
        super().__init__()
        self.hidden_size = hidden_size
        self.ih = nn.Linear(input_size, 3 * hidden_size, dtype=dtype)
        self.hh = nn.Linear(hidden_size, 3 * hidden_size, dtype=dtype)

    def forward(self, x, h):
        k = self.hidden_size
        gi, gh = self.ih(x), self.hh(h)
        r = (gi[:, :k] + gh[:, :k]).sigmoid()
        z = (gi[:, k:2 * k] + gh[:, k:2 * k]).sigmoid()
        n = (gi[:, 2 * k:] + r * gh[:, 2 * k:]).tanh()
        return (1.0 - z) * n + z * h


class GRUClassifier(nn.Module):
    """(N, T) token codes -> (N, classes): embed, run the GRU over the T steps from a zero
    state, a Linear on the last hidden state."""

    def __init__(self, vocab: int, classes: int, embed: int = 8, hidden: int = 16,
                 dtype=np.float32):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed, dtype=dtype)
        self.cell = GRUCell(embed, hidden, dtype)
        self.head = nn.Linear(hidden, classes, dtype=dtype)

    def forward(self, idx):
        expect_shape("GRUClassifier", idx, (None, None), hint="a batch of token sequences")
        e = self.embed(idx)
        h = Tensor(np.zeros((e.shape[0], self.cell.hidden_size), e.dtype))
        for t in range(e.shape[1]):
            h = self.cell(e[:, t], h)
        return self.head(h)


def gru_classifier(vocab: int = 2, classes: int = 2, embed: int = 8, hidden: int = 16,
                   dtype=np.float32) -> GRUClassifier:
    return GRUClassifier(vocab, classes, embed, hidden, dtype)


class LSTMClassifier(nn.Module):
    """(N, T) token codes -> (N, classes): embed, nn.LSTM (fused gate kernels, batch_first,
    `layers` deep) from a zero state, a Linear on the last layer's final hidden state.
    With `in_features`, the input is already a float sequence (N, T, in_features) (for
    instance an image read row by row) and there is no embedding."""

    def __init__(self, vocab: int, classes: int, embed: int = 8, hidden: int = 16,
                 layers: int = 1, in_features: int | None = None, dtype=np.float32):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed, dtype=dtype) if in_features is None else None
        self.lstm = nn.LSTM(embed if in_features is None else in_features, hidden,
                            num_layers=layers, batch_first=True, dtype=dtype)
        self.head = nn.Linear(hidden, classes, dtype=dtype)

    def forward(self, x):
        if self.embed is not None:
            expect_shape("LSTMClassifier", x, (None, None), hint="a batch of token sequences")
            x = self.embed(x)
        _, (h, _) = self.lstm(x)
        return self.head(h[-1])


def lstm_classifier(vocab: int = 2, classes: int = 2, embed: int = 8, hidden: int = 16,
                    layers: int = 1, in_features: int | None = None,
                    dtype=np.float32) -> LSTMClassifier:
    return LSTMClassifier(vocab, classes, embed, hidden, layers, in_features, dtype)
