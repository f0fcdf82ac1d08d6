"""Seeded synthetic data for the models real packaged data sets do not cover: CIFAR-like
shape images, sequence tasks (copy, reverse, parity, repeat tagging), point sets, click
logs for recommenders and random graphs (stochastic block model) for graph networks.

Every generator takes a seed and returns numpy arrays; the same seed gives the same bits.
"""

from __future__ import annotations

import numpy as np

from tilepy.models.training.errors import DataError, user_loc

SHAPES = ("square", "disk", "hbar", "vbar", "cross", "ring", "triangle", "diagonal")


def _mask(kind: str, yy, xx, cy, cx, r):
    dy, dx = yy - cy, xx - cx
    if kind == "square":
        return (np.abs(dy) <= r) & (np.abs(dx) <= r)
    if kind == "disk":
        return dy * dy + dx * dx <= r * r
    if kind == "hbar":
        return (np.abs(dy) <= r / 3) & (np.abs(dx) <= r)
    if kind == "vbar":
        return (np.abs(dx) <= r / 3) & (np.abs(dy) <= r)
    if kind == "cross":
        return ((np.abs(dy) <= r / 4) | (np.abs(dx) <= r / 4)) & (np.maximum(abs(dy), abs(dx)) <= r)
    if kind == "ring":
        d = dy * dy + dx * dx
        return (d <= r * r) & (d >= (0.55 * r) ** 2)
    if kind == "triangle":
        return (dy <= r) & (dy >= -r) & (np.abs(dx) <= (dy + r) / 2)
    return (np.abs(dy - dx) <= r / 3) & (np.abs(dy) <= r)


def shapes_images(n: int, classes: int = 4, size: int = 32, channels: int = 3,
                  noise: float = 0.1, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(images (n, channels, size, size) float32 in about [0, 1], labels (n,) int64): a
    shape of class label's kind at a random place, size and colour on a noisy background."""
    if not 2 <= classes <= len(SHAPES):
        raise DataError(f"shapes_images has 2 to {len(SHAPES)} classes; got {classes}",
                        user_loc())
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    out = rng.uniform(0, noise, (n, channels, size, size)).astype(np.float32)
    for i, c in enumerate(labels):
        r = rng.uniform(size / 6, size / 3.5)
        cy, cx = rng.uniform(r, size - r, 2)
        colour = rng.uniform(0.5, 1.0, channels).astype(np.float32)
        m = _mask(SHAPES[c], yy, xx, cy, cx, r)
        out[i][:, m] += colour[:, None]
    return out, labels.astype(np.int64)


def sequence_task(kind: str, n: int, length: int = 16, vocab: int = 8,
                  seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Token sequences (n, length) int64 and targets: 'copy' (the same tokens), 'reverse'
    (reversed), 'sort' (sorted) or 'parity' (x in {0, 1}; y the parity of the ones, (n,))."""
    rng = np.random.default_rng(seed)
    if kind == "parity":
        x = rng.integers(0, 2, (n, length))
        return x.astype(np.int64), (x.sum(axis=1) % 2).astype(np.int64)
    x = rng.integers(0, vocab, (n, length)).astype(np.int64)
    if kind == "copy":
        return x, x.copy()
    if kind == "reverse":
        return x, x[:, ::-1].copy()
    if kind == "sort":
        return x, np.sort(x, axis=1)
    raise DataError(f"unknown sequence task {kind!r}; expected copy, reverse, sort or parity",
                    user_loc())


def click_logs(n_events: int, n_users: int = 200, n_items: int = 100, dim: int = 8,
               history: int = 5, seed: int = 0) -> dict[str, np.ndarray]:
    """Clicks drawn from a latent-factor model: P(click) = sigmoid(u . v + b_item).
    Returns user, item (n,) int64, history (n, history) int64 (items the user saw before,
    for embedding bags), label (n,) float32 and the true logit (n,) float64."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((n_users, dim)) / np.sqrt(dim) * 2
    v = rng.standard_normal((n_items, dim)) / np.sqrt(dim) * 2
    bias = rng.standard_normal(n_items) * 0.5
    user = rng.integers(0, n_users, n_events)
    item = rng.integers(0, n_items, n_events)
    logit = np.einsum("nd,nd->n", u[user], v[item]) + bias[item]
    label = (rng.random(n_events) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    hist = rng.integers(0, n_items, (n_events, history))
    return {"user": user.astype(np.int64), "item": item.astype(np.int64),
            "history": hist.astype(np.int64), "label": label, "logit": logit}


def random_graph(n_nodes: int = 300, classes: int = 3, p_in: float = 0.05,
                 p_out: float = 0.005, features: int = 16, feature_noise: float = 2.0,
                 train_fraction: float = 0.3, seed: int = 0) -> dict[str, np.ndarray]:
    """A stochastic block model: nodes of one class link with probability p_in, of two
    classes with p_out; features are a class centroid plus noise. Returns adjacency
    (n, n) float32 symmetric without self loops, features (n, f) float32, labels (n,)
    int64 and a boolean train_mask (the rest is the test part)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n_nodes)
    same = labels[:, None] == labels[None, :]
    upper = np.triu(rng.random((n_nodes, n_nodes)) < np.where(same, p_in, p_out), 1)
    adj = (upper | upper.T).astype(np.float32)
    centroids = rng.standard_normal((classes, features))
    x = centroids[labels] + feature_noise * rng.standard_normal((n_nodes, features))
    train = np.zeros(n_nodes, bool)
    train[rng.permutation(n_nodes)[:int(n_nodes * train_fraction)]] = True
    return {"adjacency": adj, "features": x.astype(np.float32),
            "labels": labels.astype(np.int64), "train_mask": train}


def repeat_tagging(n: int, length: int = 8, vocab: int = 4, min_length: int = 2,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token sequences of random lengths in [min_length, length] (n, length) int64, their
    lengths (n,) int64 and per-token tags (n, length): 1 where a token equals its left or
    right neighbour within its sequence, else 0 (0 past the length). Positions past a
    length hold random tokens, so a tagger must stop each direction at the sequence's own
    end (packed sequences) and read both directions."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_length, length + 1, n)
    x = rng.integers(0, vocab, (n, length))
    inside = np.arange(length)[None, :] < lengths[:, None]
    same = x[:, 1:] == x[:, :-1]
    same &= inside[:, 1:]  # a pair counts when both tokens are inside
    y = np.zeros((n, length), bool)
    y[:, 1:] |= same
    y[:, :-1] |= same
    return x.astype(np.int64), lengths.astype(np.int64), (y & inside).astype(np.int64)


def point_sets(n: int, points: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """2-d point clouds (n, points, 2) float32 of 3 classes (n,) int64: a circle (0), a
    square's outline (1), a segment (2); random scale in [0.5, 1.5], noise 0.05."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    t = rng.uniform(0, 2 * np.pi, (n, points))
    circle = np.stack([np.cos(t), np.sin(t)], -1)
    shapes = np.stack([circle, np.clip(1.4 * circle, -1, 1),
                       np.stack([np.cos(t), np.zeros_like(t)], -1)])
    pts = shapes[y, np.arange(n)] * rng.uniform(0.5, 1.5, (n, 1, 1))
    return (pts + 0.05 * rng.standard_normal(pts.shape)).astype(np.float32), y.astype(np.int64)
