"""Real data sets that ship inside installed packages (nothing is downloaded): scikit-learn's
digits, iris, wine and breast cancer (the `data` extra), and a character corpus from the
Python documentation that CPython ships (pydoc_data.topics).

Each loader returns a `Split`: seeded, stratified train and test TensorDatasets, features
in float32 standardised with the training part's statistics, labels in int64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilepy.models.data.loader import TensorDataset, train_test_split
from tilepy.models.training.errors import DataError, user_loc

SKLEARN = {"digits": "load_digits", "iris": "load_iris", "wine": "load_wine",
           "breast_cancer": "load_breast_cancer"}


@dataclass
class Split:
    """A data set's train and test parts and what describes them."""

    name: str
    train: TensorDataset
    test: TensorDataset
    classes: int
    mean: np.ndarray | None = None  # the training features' statistics used to normalise
    std: np.ndarray | None = None


def _sklearn(name: str):
    try:
        import sklearn.datasets
    except ImportError:
        raise DataError(f"the {name} data set comes with scikit-learn, which is not installed",
                        user_loc(), hint="pip install 'tilepy-runtime[data]'") from None
    return getattr(sklearn.datasets, SKLEARN[name])()


def load(name: str, test_fraction: float = 0.2, seed: int = 0, normalize: str | None = "standard",
         images: bool = False) -> Split:
    """scikit-learn's `name` (digits, iris, wine, breast_cancer), split and normalised.

    normalize: "standard" (per feature, train mean and std), "scale" (divide by the train
    maximum) or None. images=True gives digits as (N, 1, 8, 8) (NCHW) instead of (N, 64).
    """
    if name not in SKLEARN:
        raise DataError(f"unknown data set {name!r}; expected one of {', '.join(SKLEARN)}",
                        user_loc())
    if images and name != "digits":
        raise DataError(f"images=True is for digits; {name} has no images", user_loc())
    raw = _sklearn(name)
    x, y = raw.data.astype(np.float64), raw.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_fraction=test_fraction, seed=seed,
                                          stratify=y)
    mean = std = None
    if normalize == "standard":
        mean, std = xtr.mean(axis=0), xtr.std(axis=0)
        std = np.where(std > 0, std, 1.0)
        xtr, xte = (xtr - mean) / std, (xte - mean) / std
    elif normalize == "scale":
        top = max(float(np.abs(xtr).max()), 1e-12)
        xtr, xte = xtr / top, xte / top
    elif normalize is not None:
        raise DataError(f"normalize must be 'standard', 'scale' or None; got {normalize!r}",
                        user_loc())
    if images:
        xtr, xte = xtr.reshape(-1, 1, 8, 8), xte.reshape(-1, 1, 8, 8)
    return Split(name, TensorDataset(xtr.astype(np.float32), ytr),
                 TensorDataset(xte.astype(np.float32), yte), int(y.max()) + 1, mean, std)


def python_docs_text() -> str:
    """The text of the Python documentation's topics that CPython ships for pydoc (about
    460 KB of English and code; its exact content depends on the Python version)."""
    from pydoc_data.topics import topics

    return "\n".join(topics[k] for k in sorted(topics))


class CharDataset:
    """Next-character prediction: sample i is (x, y) = (text[i:i+T], text[i+1:i+T+1]) as
    int64 codes of a sorted character vocabulary."""

    def __init__(self, text: str, block_size: int = 64, vocab: str | None = None):
        self.vocab = vocab if vocab is not None else "".join(sorted(set(text)))
        self.index = {c: i for i, c in enumerate(self.vocab)}
        missing = sorted(set(text) - set(self.index))
        if missing:
            raise DataError(f"the text has characters outside the vocabulary: {missing[:5]}",
                            user_loc(), hint="build the vocabulary from all the text")
        if len(text) <= block_size:
            raise DataError(f"the text has {len(text)} characters; block_size {block_size} "
                            "needs more", user_loc())
        self.codes = np.array([self.index[c] for c in text], np.int64)
        self.block_size = block_size

    def __len__(self) -> int:
        return len(self.codes) - self.block_size

    def __getitem__(self, i):
        return self.take(np.array([i]))[0][0], self.take(np.array([i]))[1][0]

    def take(self, idx: np.ndarray) -> tuple:
        rows = np.asarray(idx)[:, None] + np.arange(self.block_size + 1)
        chunk = self.codes[rows]
        return chunk[:, :-1], chunk[:, 1:]

    def encode(self, s: str) -> np.ndarray:
        return np.array([self.index[c] for c in s], np.int64)

    def decode(self, codes) -> str:
        return "".join(self.vocab[int(c)] for c in codes)


def char_corpus(block_size: int = 64, test_fraction: float = 0.1) -> tuple:
    """(train, test) CharDatasets over the Python documentation text: the last
    `test_fraction` of the text is the test part; both share one vocabulary."""
    text = python_docs_text()
    cut = int(len(text) * (1 - test_fraction))
    vocab = "".join(sorted(set(text)))
    return CharDataset(text[:cut], block_size, vocab), CharDataset(text[cut:], block_size, vocab)
