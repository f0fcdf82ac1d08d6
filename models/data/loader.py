"""Data sets as arrays and a DataLoader with seeded shuffling, batching and drop_last.

A loader's order depends only on (seed, epoch): epoch e shuffles with
numpy.random.default_rng([seed, e]), so a loader restored from state_dict() (epoch and
position) yields exactly the batches the uninterrupted one would have.
"""

from __future__ import annotations

import numpy as np

from tilepy.models.training.errors import DataError, user_loc


class TensorDataset:
    """Samples are the i-th rows of equally long arrays: ds[i] = (a[i], b[i], ...)."""

    def __init__(self, *arrays):
        if not arrays:
            raise DataError("TensorDataset needs at least one array", user_loc())
        self.arrays = tuple(np.asarray(a) for a in arrays)
        n = len(self.arrays[0])
        for k, a in enumerate(self.arrays):
            if a.ndim == 0 or len(a) != n:
                raise DataError(f"TensorDataset: array {k} has {len(a) if a.ndim else 0} "
                                f"rows; array 0 has {n}", user_loc(),
                                hint="every array must have one row per sample")

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, i):
        return tuple(a[i] for a in self.arrays)

    def take(self, idx: np.ndarray) -> tuple:
        """The batch of rows `idx` (one fancy-indexing copy per array)."""
        return tuple(a[idx] for a in self.arrays)


def _collate(dataset, idx: np.ndarray) -> tuple:
    """A batch as arrays: the dataset's own `take` if it has one, else stacked samples."""
    if hasattr(dataset, "take"):
        return dataset.take(idx)
    samples = [dataset[int(i)] for i in idx]
    if not isinstance(samples[0], tuple):
        return (np.stack([np.asarray(s) for s in samples]),)
    return tuple(np.stack([np.asarray(s[k]) for s in samples]) for k in range(len(samples[0])))


class DataLoader:
    """Batches of a data set as tuples of numpy arrays, shuffled per epoch from `seed`."""

    def __init__(self, dataset, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, seed: int = 0):
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise DataError(f"batch_size must be a positive integer; got {batch_size!r}",
                            user_loc())
        self.dataset, self.batch_size = dataset, int(batch_size)
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, int(seed)
        self.epoch, self.position = 0, 0  # the next batch: `position` of epoch `epoch`

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def order(self, epoch: int) -> np.ndarray:
        """The sample order of `epoch`."""
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, epoch]).permutation(n)

    def __iter__(self):
        """One epoch's remaining batches; the epoch advances once they are all taken."""
        order, nbatch = self.order(self.epoch), len(self)
        while self.position < nbatch:
            k = self.position
            idx = order[k * self.batch_size:(k + 1) * self.batch_size]
            self.position += 1
            yield _collate(self.dataset, idx)
        self.epoch, self.position = self.epoch + 1, 0

    def state_dict(self) -> dict:
        return {"seed": self.seed, "epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.epoch = int(state["seed"]), int(state["epoch"])
        self.position = int(state["position"])


def train_test_split(*arrays, test_fraction: float = 0.2, seed: int = 0,
                     stratify=None) -> list[np.ndarray]:
    """[a_train, a_test, b_train, b_test, ...]: a seeded split, per class when `stratify`
    (an array of labels) is given, so each class keeps its share in both parts."""
    if not 0 < test_fraction < 1:
        raise DataError(f"test_fraction must lie in (0, 1); got {test_fraction}", user_loc())
    n = len(arrays[0])
    rng = np.random.default_rng(seed)
    if stratify is None:
        perm = rng.permutation(n)
        test = perm[:int(round(n * test_fraction))]
    else:
        labels = np.asarray(stratify)
        test = []
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            test.append(idx[:int(round(len(idx) * test_fraction))])
        test = np.concatenate(test)
    mask = np.zeros(n, bool)
    mask[test] = True
    out = []
    for a in arrays:
        a = np.asarray(a)
        out += [a[~mask], a[mask]]
    return out
