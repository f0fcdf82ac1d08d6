"""Data (tilepy.models.data): loader order and resume, packaged data sets, synthetic
generators: shapes, dtypes, determinism under a seed, and learnability where claimed."""

import numpy as np
import pytest

from tilepy.models.data import (
    CharDataset,
    DataLoader,
    TensorDataset,
    char_corpus,
    click_logs,
    load,
    random_graph,
    sequence_task,
    shapes_images,
    train_test_split,
)
from tilepy.models.training.errors import DataError


def _ds(n=10):
    return TensorDataset(np.arange(n * 2, dtype=np.float32).reshape(n, 2), np.arange(n))


def test_loader_batches_in_order_without_shuffle():
    batches = list(DataLoader(_ds(), batch_size=4))
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0][0].shape == (4, 2) and batches[0][0].dtype == np.float32
    assert [len(b[1]) for b in DataLoader(_ds(), 4, drop_last=True)] == [4, 4]
    assert len(DataLoader(_ds(), 4)) == 3 and len(DataLoader(_ds(), 4, drop_last=True)) == 2


def test_shuffle_is_seeded_per_epoch_and_covers_every_sample():
    a, b = DataLoader(_ds(), 3, shuffle=True, seed=5), DataLoader(_ds(), 3, shuffle=True, seed=5)
    ea1, ea2 = [np.concatenate([y for _, y in a]) for _ in range(2)]
    eb1 = np.concatenate([y for _, y in b])
    assert np.array_equal(ea1, eb1) and not np.array_equal(ea1, ea2)
    assert sorted(ea1.tolist()) == list(range(10)) and sorted(ea2.tolist()) == list(range(10))
    other = np.concatenate([y for _, y in DataLoader(_ds(), 3, shuffle=True, seed=6)])
    assert not np.array_equal(ea1, other)


def test_loader_resumes_mid_epoch_from_its_state():
    ref = DataLoader(_ds(), 3, shuffle=True, seed=1)
    want = [y for _ in range(2) for _, y in ref]
    a = DataLoader(_ds(), 3, shuffle=True, seed=1)
    it = iter(a)
    got = [next(it)[1], next(it)[1]]
    b = DataLoader(_ds(), 3, shuffle=True)
    b.load_state_dict(a.state_dict())
    got += [y for _, y in b] + [y for _, y in b]
    assert all(np.array_equal(x, y) for x, y in zip(got, want)) and len(got) == len(want)


def test_loader_of_a_plain_indexable_dataset_stacks_samples():
    class Squares:
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return np.array([i, i * i]), i % 2

    (x, y), = list(DataLoader(Squares(), 5))[:1]
    assert x.tolist() == [[0, 0], [1, 1], [2, 4], [3, 9], [4, 16]] and y.tolist() == [0, 1, 0, 1, 0]


def test_bad_loader_and_dataset_arguments():
    with pytest.raises(DataError, match="batch_size must be a positive integer; got 0"):
        DataLoader(_ds(), 0)
    with pytest.raises(DataError, match="array 1 has 3 rows; array 0 has 4"):
        TensorDataset(np.zeros(4), np.zeros(3))


def test_stratified_split_keeps_class_shares_and_is_seeded():
    y = np.repeat([0, 1, 2], [50, 30, 20])
    x = np.arange(100)
    xtr, xte, ytr, yte = train_test_split(x, y, test_fraction=0.2, seed=3, stratify=y)
    assert np.bincount(yte).tolist() == [10, 6, 4] and len(xtr) == 80
    assert sorted(np.concatenate([xtr, xte]).tolist()) == list(range(100))
    again = train_test_split(x, y, test_fraction=0.2, seed=3, stratify=y)
    assert np.array_equal(again[1], xte)


@pytest.mark.parametrize("name,shape,classes", [("digits", (64,), 10), ("iris", (4,), 3),
                                                ("wine", (13,), 3),
                                                ("breast_cancer", (30,), 2)])
def test_packaged_datasets_are_split_and_standardised(name, shape, classes):
    pytest.importorskip("sklearn")
    s = load(name, seed=0)
    x, y = s.train.arrays
    assert x.shape[1:] == shape and x.dtype == np.float32 and y.dtype == np.int64
    assert s.classes == classes and set(np.unique(y)) == set(range(classes))
    assert np.allclose(x.mean(axis=0), 0, atol=1e-5)
    assert np.all(np.isclose(x.std(axis=0), 1, atol=1e-4) | (x.std(axis=0) == 0))
    # nearest centroid on the standardised features beats chance on the test part
    xt, yt = s.test.arrays
    cent = np.stack([x[y == c].mean(axis=0) for c in range(classes)])
    pred = np.argmin(((xt[:, None, :] - cent[None]) ** 2).sum(-1), axis=1)
    assert (pred == yt).mean() > 1.5 / classes


def test_digits_as_images():
    pytest.importorskip("sklearn")
    s = load("digits", normalize="scale", images=True)
    x, _ = s.train.arrays
    assert x.shape[1:] == (1, 8, 8) and 0 <= x.min() and x.max() == 1.0
    assert len(s.train) + len(s.test) == 1797


def test_char_corpus_from_the_python_docs():
    train, test = char_corpus(block_size=16)
    assert len(train) > 300_000 and len(test) > 30_000 and train.vocab == test.vocab
    x, y = train.take(np.array([0, 100]))
    assert x.shape == (2, 16) and x.dtype == np.int64 and np.array_equal(x[:, 1:], y[:, :-1])
    assert train.decode(train.encode("assert")) == "assert"
    with pytest.raises(DataError, match="outside the vocabulary"):
        CharDataset("abc", 1, vocab="ab")


def test_shape_images_are_deterministic_and_learnable():
    x, y = shapes_images(900, classes=4, seed=0)
    assert x.shape == (900, 3, 32, 32) and x.dtype == np.float32 and y.dtype == np.int64
    assert np.array_equal(shapes_images(900, seed=0)[0], x)
    assert not np.array_equal(shapes_images(5, seed=1)[0], shapes_images(5, seed=0)[0])
    # closed-form ridge regression on 4x4-pooled pixels: well above chance (0.25)
    pooled = x.reshape(900, 3, 8, 4, 8, 4).mean(axis=(3, 5)).reshape(900, -1)
    f = np.c_[pooled, np.ones(900)].astype(np.float64)
    a, t = f[:600], np.eye(4)[y[:600]]
    w = np.linalg.solve(a.T @ a + 10 * np.eye(f.shape[1]), a.T @ t)
    assert (np.argmax(f[600:] @ w, axis=1) == y[600:]).mean() > 0.4


@pytest.mark.parametrize("kind", ["copy", "reverse", "sort", "parity"])
def test_sequence_tasks(kind):
    x, y = sequence_task(kind, 50, length=12, vocab=5, seed=2)
    assert x.shape == (50, 12) and x.dtype == np.int64
    if kind == "parity":
        assert y.shape == (50,) and np.array_equal(y, x.sum(1) % 2)
    else:
        want = {"copy": x, "reverse": x[:, ::-1], "sort": np.sort(x, 1)}[kind]
        assert np.array_equal(y, want) and x.max() < 5
    assert np.array_equal(sequence_task(kind, 50, 12, 5, seed=2)[0], x)


def test_click_logs_carry_signal():
    d = click_logs(20000, seed=0)
    assert d["history"].shape == (20000, 5) and d["label"].dtype == np.float32
    tr, te = slice(0, 15000), slice(15000, None)
    # a per-item click rate learnt on the first part ranks the rest better than chance
    rate = np.bincount(d["item"][tr], d["label"][tr], 100) / np.maximum(
        np.bincount(d["item"][tr], minlength=100), 1)
    score, lab = rate[d["item"][te]], d["label"][te]
    pos, neg = score[lab == 1], score[lab == 0]
    auc = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    assert auc > 0.55
    pos, neg = d["logit"][te][lab == 1], d["logit"][te][lab == 0]
    assert (pos[:, None] > neg[None, :]).mean() > 0.75  # what a perfect model could reach
    assert np.array_equal(click_logs(100, seed=0)["item"], click_logs(100, seed=0)["item"])


def test_random_graph_neighbours_help_classification():
    g = random_graph(seed=0)
    a, x, y, m = g["adjacency"], g["features"], g["labels"], g["train_mask"]
    assert np.array_equal(a, a.T) and np.all(np.diag(a) == 0) and a.dtype == np.float32

    def nearest_centroid(f):
        cent = np.stack([f[m & (y == c)].mean(0) for c in range(3)])
        pred = np.argmin(((f[:, None] - cent[None]) ** 2).sum(-1), axis=1)
        return (pred[~m] == y[~m]).mean()

    ahat = a + np.eye(len(a))
    smooth = (ahat / ahat.sum(1, keepdims=True)) @ x  # one GCN-style propagation
    plain, graph = nearest_centroid(x), nearest_centroid(smooth)
    assert plain > 0.4 and graph > plain + 0.1
