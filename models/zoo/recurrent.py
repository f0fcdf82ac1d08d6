"""Sequence models: classifiers (a GRU whose cell is composed of existing ops (two Linears,
sigmoid, tanh, products and sums), unrolled over time in Python; an LSTM on nn.LSTM: fused
gate kernels, backward through time in one graph node), a bidirectional-LSTM tagger over
packed sequences and a GRU encoder-decoder.

GRU (PyTorch's gate order r, z, n): r = sigmoid(W_ir x + W_hr h), z = sigmoid(W_iz x +
W_hz h), n = tanh(W_in x + r * (W_hn h)), h' = (1 - z) * n + z * h.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import Tensor, kops, nn, no_grad
from tilepy.models.kernels.record import filled
from tilepy.models.nn.utils import rnn
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
        h = Tensor(kops.zeros((e.shape[0], self.cell.hidden_size), e.dtype))
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


class BiLSTMTagger(nn.Module):
    """A sequence tagger: (N, T) token codes (and their lengths) -> (N, T, tags) logits.
    Embedding, a bidirectional nn.LSTM (over packed sequences when lengths are given, so
    the reverse direction starts at each sequence's own last token), a Linear on both
    directions' states per token. Positions past a length get zero states."""

    def __init__(self, vocab: int, tags: int, embed: int = 16, hidden: int = 32,
                 layers: int = 1, dtype=np.float32):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed, dtype=dtype)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True,
                            bidirectional=True, dtype=dtype)
        self.head = nn.Linear(2 * hidden, tags, dtype=dtype)

    def forward(self, idx, lengths=None):
        expect_shape("BiLSTMTagger", idx, (None, None), hint="a batch of token sequences")
        e = self.embed(idx)
        if lengths is None:
            y, _ = self.lstm(e)
        else:
            packed = rnn.pack_padded_sequence(e, lengths, batch_first=True,
                                              enforce_sorted=False)
            y, _ = rnn.pad_packed_sequence(self.lstm(packed)[0], batch_first=True,
                                           total_length=e.shape[1])
        return self.head(y)


def bilstm_tagger(vocab: int = 8, tags: int = 8, embed: int = 16, hidden: int = 32,
                  layers: int = 1, dtype=np.float32) -> BiLSTMTagger:
    return BiLSTMTagger(vocab, tags, embed, hidden, layers, dtype)


def sequence_loss(logits: Tensor, targets, lengths=None) -> Tensor:
    """Mean cross-entropy over the tokens of (N, T, C) logits within each sequence's
    length (all T without lengths)."""
    n, steps, c = logits.shape
    flat, y = logits.reshape(n * steps, c), np.asarray(targets).reshape(-1)
    if lengths is None:
        return nn.functional.cross_entropy(flat, y)
    keep = np.flatnonzero((np.arange(steps)[None, :] < np.asarray(lengths)[:, None]).ravel())
    return nn.functional.cross_entropy(rnn.gather_rows(flat, keep), y[keep])


class GRUSeq2Seq(nn.Module):
    """An encoder-decoder without attention (Cho et al. 2014, Sutskever et al. 2014): a GRU
    reads the source; its final state starts a GRU decoder fed the target shifted right
    (teacher forcing; the start token is code `vocab`); a Linear gives each target step's
    logits. forward(src (N, S), tgt (N, T)) -> (N, T, vocab); generate() decodes greedily."""

    def __init__(self, vocab: int, embed: int = 16, hidden: int = 32, dtype=np.float32):
        super().__init__()
        self.vocab = vocab
        self.src_embed = nn.Embedding(vocab, embed, dtype=dtype)
        self.tgt_embed = nn.Embedding(vocab + 1, embed, dtype=dtype)
        self.encoder = nn.GRU(embed, hidden, batch_first=True, dtype=dtype)
        self.decoder = nn.GRU(embed, hidden, batch_first=True, dtype=dtype)
        self.head = nn.Linear(hidden, vocab, dtype=dtype)

    def _encode(self, src):
        expect_shape("GRUSeq2Seq source", src, (None, None), hint="(N, S) token codes")
        return self.encoder(self.src_embed(src))[1]

    def forward(self, src, tgt):
        h = self._encode(src)
        tgt = np.asarray(tgt)
        expect_shape("GRUSeq2Seq target", tgt, (len(tgt), None), hint="(N, T) token codes")
        # the decoder's input: a host fill, so a captured step redoes it on replay
        shifted = filled(_shift_right, np.empty(tgt.shape, tgt.dtype), tgt, self.vocab)
        y, _ = self.decoder(self.tgt_embed(shifted), h)
        return self.head(y)

    def generate(self, src, steps: int) -> np.ndarray:
        """Greedy decoding: (N, steps) token codes, each step fed the previous choice."""
        with no_grad():
            h = self._encode(src)
            tok = np.full((len(h.data[0]), 1), self.vocab, np.int64)
            out = []
            for _ in range(steps):
                y, h = self.decoder(self.tgt_embed(tok), h)
                tok = self.head(y).numpy().argmax(-1)
                out.append(tok[:, 0])
        return np.stack(out, axis=1)


def _shift_right(out: np.ndarray, tgt: np.ndarray, start: int) -> None:
    """out = the start token, then tgt without its last step (teacher forcing's input)."""
    out[:, :1] = start
    out[:, 1:] = tgt[:, :-1]


def gru_seq2seq(vocab: int = 8, embed: int = 16, hidden: int = 32,
                dtype=np.float32) -> GRUSeq2Seq:
    return GRUSeq2Seq(vocab, embed, hidden, dtype)
