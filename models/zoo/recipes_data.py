"""The data side of the zoo's training recipes (recipes.py): per family of models, a
builder `setup(seed) -> Task` that loads or generates the data (nothing is fetched),
builds the model under nn.manual_seed(seed), and says how to compute a batch's loss and
the held-out metric.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tilepy.models import nn, no_grad, zoo
from tilepy.models.data import datasets, synthetic
from tilepy.models.nn.utils.rnn import gather_rows
from tilepy.models.zoo import digits as digit_data

F = nn.functional


@dataclass
class Task:
    """model; n_train samples: batch(idx) gathers a batch's arrays on the host (numpy
    indexing by the index array idx) and loss(*arrays) computes its loss, so that a
    training step takes the batch as its inputs (and can be captured); evaluate() gives
    the held-out metric; extra holds reference figures (a baseline, the optimum)."""

    model: nn.Module
    n_train: int
    batch: Callable
    loss: Callable
    evaluate: Callable
    extra: dict = field(default_factory=dict)


def _batched(model, fn, n: int, batch: int = 256) -> np.ndarray:
    """fn(slice) -> array for the held-out rows, in eval mode, without a graph."""
    model.eval()
    with no_grad():
        out = np.concatenate([fn(slice(i, i + batch)) for i in range(0, n, batch)])
    model.train()
    return out


def _classify(make, xtr, ytr, xte, yte, seed) -> Task:
    nn.manual_seed(seed)
    model = make()

    def evaluate():
        pred = _batched(model, lambda s: model(xte[s]).numpy().argmax(-1), len(xte))
        return float(np.mean(pred == yte))
    return Task(model, len(xtr), lambda i: (xtr[i], ytr[i]),
                lambda x, y: F.cross_entropy(model(x), y), evaluate)


def digits(make, images: bool = True):
    def setup(seed):
        xtr, ytr, xte, yte = digit_data.load("mlp", seed)
        if images:
            xtr, xte = xtr.reshape(-1, 1, 8, 8), xte.reshape(-1, 1, 8, 8)
        return _classify(make, xtr, ytr, xte, yte, seed)
    return setup


def digit_rows(make):
    def setup(seed):
        xtr, ytr, xte, yte = digit_data.load("mlp", seed)
        return _classify(make, xtr.reshape(-1, 8, 8), ytr, xte.reshape(-1, 8, 8), yte, seed)
    return setup


def tabular(name: str, make):
    def setup(seed):
        split = datasets.load(name, seed=seed)
        (xtr, ytr), (xte, yte) = split.train.arrays, split.test.arrays
        return _classify(make, xtr, ytr.astype(np.int32), xte, yte, seed)
    return setup


def shapes(make):
    def setup(seed):
        x, y = synthetic.shapes_images(5000, classes=4, size=8, channels=3, seed=seed)
        return _classify(make, x[:4000], y[:4000].astype(np.int32), x[4000:], y[4000:], seed)
    return setup


def point_sets(make):
    def setup(seed):
        x, y = synthetic.point_sets(2500, seed=seed)
        return _classify(make, x[:2000], y[:2000].astype(np.int32), x[2000:], y[2000:], seed)
    return setup


def recall(make):
    """The label is the first token (of 4); five filler tokens (code 4) follow."""
    def setup(seed):
        y = np.random.default_rng(seed).integers(0, 4, 2500)
        x = np.concatenate([y[:, None], np.full((2500, 5), 4)], axis=1)
        return _classify(make, x[:2000], y[:2000].astype(np.int32), x[2000:], y[2000:], seed)
    return setup


def reconstruct(make, images: bool, vae: bool = False):
    """Metric: test MSE over the MSE of predicting the training mean (lower is better)."""
    def setup(seed):
        xtr, _, xte, _ = digit_data.load("mlp", seed)
        if images:
            xtr, xte = xtr.reshape(-1, 1, 8, 8), xte.reshape(-1, 1, 8, 8)
        nn.manual_seed(seed)
        model = make()
        out = (lambda r: r[0]) if vae else (lambda r: r)
        base = float(np.mean((xte - xtr.mean(axis=0)) ** 2))

        def loss(x):
            if vae:
                r, mean, logvar = model(x)
                return zoo.vae_loss(r, x, mean, logvar)
            return zoo.mse_loss(model(x), x)

        def evaluate():
            rec = _batched(model, lambda s: out(model(xte[s])).numpy(), len(xte))
            return float(np.mean((rec - xte) ** 2)) / base
        return Task(model, len(xtr), lambda i: (xtr[i],), loss, evaluate)
    return setup


def segmentation(make):
    def setup(seed):
        x, _ = synthetic.shapes_images(1250, classes=4, size=8, channels=3, seed=seed)
        mask = (x.max(axis=1) > 0.3).astype(np.int32)
        nn.manual_seed(seed)
        model = make()

        def loss(xb, mb):
            return F.cross_entropy(model(xb).permute(0, 2, 3, 1).reshape(-1, 2), mb)

        def evaluate():
            pred = _batched(model, lambda s: model(x[1000:][s]).numpy().argmax(1), 250)
            return float(np.mean(pred == mask[1000:]))
        return Task(model, 1000, lambda i: (x[i], mask[i].reshape(-1)), loss, evaluate)
    return setup


def _token_task(model, batch, loss, predict, y_test) -> Task:
    def evaluate():
        return float(np.mean(_batched(model, predict, len(y_test)) == y_test))
    return Task(model, 4000, batch, loss, evaluate)


def sort_task(make):
    def setup(seed):
        x, y = synthetic.sequence_task("sort", 5000, length=8, vocab=8, seed=seed)
        nn.manual_seed(seed)
        m = make()
        return _token_task(m, lambda i: (x[i], y[i]), lambda a, b: zoo.sequence_loss(m(a), b),
                           lambda s: m(x[4000:][s]).numpy().argmax(-1), y[4000:])
    return setup


def tagging(make):
    """Token accuracy over the tokens within each sequence's length."""
    def setup(seed):
        x, n, y = synthetic.repeat_tagging(5000, length=8, vocab=4, seed=seed)
        nn.manual_seed(seed)
        m = make()
        xt, nt, yt = x[4000:], n[4000:], y[4000:]
        valid = np.arange(8)[None, :] < nt[:, None]

        def predict(s):
            return np.where(valid[s], m(xt[s], nt[s]).numpy().argmax(-1), -1)
        return _token_task(m, lambda i: (x[i], n[i], y[i]),
                           lambda a, k, b: zoo.sequence_loss(m(a, k), b, k), predict,
                           np.where(valid, yt, -1))
    return setup


def seq2seq(make):
    def setup(seed):
        x, y = synthetic.sequence_task("reverse", 5000, length=6, vocab=8, seed=seed)
        nn.manual_seed(seed)
        m = make()
        return _token_task(m, lambda i: (x[i], y[i]),
                           lambda a, b: zoo.sequence_loss(m(a, b), b),
                           lambda s: m.generate(x[4000:][s], 6), y[4000:])
    return setup


def chars(kind: str, windows: int = 4096):
    """Next-character loss (nats per character) on 512 test windows, training on `windows`
    sampled windows; extra: the unigram entropy of the test text (the best input-blind
    prediction)."""
    def setup(seed):
        train, test = datasets.char_corpus(block_size=16)
        vocab = len(train.vocab)
        rng = np.random.default_rng(seed)
        starts = rng.integers(0, len(train), windows)
        xtr, ytr = train.take(starts)
        xte, yte = test.take(np.linspace(0, len(test) - 1, 512).astype(np.int64))
        nn.manual_seed(seed)
        if kind == "mlp":
            m = zoo.char_mlp(vocab, context=8)
            logits = lambda x: m(x[:, 8:])  # noqa: E731 - the last 8 codes predict
            target = lambda y: y[:, -1]  # noqa: E731
        else:
            m = (zoo.char_gpt if kind == "gpt" else zoo.char_llama)(vocab, block_size=16)
            logits = lambda x: m(x).reshape(-1, vocab)  # noqa: E731
            target = lambda y: y.reshape(-1)  # noqa: E731

        def evaluate():
            m.eval()
            with no_grad():
                value = F.cross_entropy(logits(xte), target(yte)).item()
            m.train()
            return value
        counts = np.bincount(yte.reshape(-1), minlength=vocab) / yte.size
        unigram = float(-np.sum(counts[counts > 0] * np.log(counts[counts > 0])))
        return Task(m, len(xtr), lambda i: (xtr[i], ytr[i]),
                    lambda x, y: F.cross_entropy(logits(x), target(y)), evaluate,
                    {"unigram entropy": unigram})
    return setup


def clicks(make, inputs: str):
    """Click prediction; extra: the Bayes-optimal accuracy (the generating model's sign)."""
    def setup(seed):
        c = synthetic.click_logs(25000, seed=seed)
        nn.manual_seed(seed)
        m = make()

        def arrays(i):
            if inputs == "bags":
                return c["user"][i, None], c["item"][i, None], c["history"][i]
            return c["user"][i], c["item"][i]

        def call(*a):
            return m(*a) if inputs == "pair" else m(list(a))
        test = np.arange(20000, 25000)
        label = c["label"][test] > 0.5

        def evaluate():
            logit = _batched(m, lambda s: call(*arrays(test[s])).numpy(), len(test), 1024)
            return float(np.mean((logit > 0) == label))
        bayes = float(np.mean((c["logit"][test] > 0) == label))
        return Task(m, 20000, lambda i: (*arrays(i), c["label"][i]),
                    lambda *a: zoo.click_loss(call(*a[:-1]), a[-1]), evaluate,
                    {"Bayes-optimal accuracy": bayes})
    return setup


def graph(make, kind: str):
    """Full batch: the loss on the labelled nodes, accuracy on the others."""
    def setup(seed):
        g = synthetic.random_graph(seed=seed)
        adj = {"gcn": zoo.normalized_adjacency, "sage": zoo.mean_adjacency,
               "gat": zoo.attention_mask}[kind](g["adjacency"])
        x, y = g["features"], g["labels"].astype(np.int32)
        train, test = np.flatnonzero(g["train_mask"]), np.flatnonzero(~g["train_mask"])
        nn.manual_seed(seed)
        m = make()

        def evaluate():
            m.eval()
            with no_grad():
                pred = m(adj, x).numpy().argmax(1)
            m.train()
            return float(np.mean(pred[test] == y[test]))
        return Task(m, len(train), lambda i: (train[i], y[train[i]]),
                    lambda rows, labels: F.cross_entropy(gather_rows(m(adj, x), rows), labels),
                    evaluate)
    return setup
