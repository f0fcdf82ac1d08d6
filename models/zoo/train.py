"""Train a zoo model added with EmbeddingBag and LSTM to a stated figure:
`python -m tilepy.models.zoo.train --model dlrm` (click logs: test accuracy beside the
Bayes-optimal accuracy of the generating model) or `--model lstm` (scikit-learn's digits
read as 8 rows of 8 pixels: test accuracy). AdamW, seeded; needs the `data` extra for
the digits and `train` (tqdm) for the progress bar.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tilepy.models import nn, no_grad, optim
from tilepy.models.data import synthetic
from tilepy.models.zoo import digits, recsys, recurrent

F = nn.functional


def _steps(model, batches, loss_fn, opt, progress: bool, name: str) -> tuple[int, float]:
    bar = digits._bar(len(batches), progress, name)
    spent = 0.0
    for args in batches:
        t0 = time.perf_counter()
        loss = loss_fn(*args)
        model.zero_grad()
        loss.backward()
        opt.step()
        spent += time.perf_counter() - t0
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    bar.close()
    return len(batches), spent


def train_dlrm(epochs: int = 6, batch: int = 256, lr: float = 1e-2, seed: int = 0,
               progress: bool = True) -> dict:
    """DLRM on 25,000 click-log events (20,000 to train, 5,000 to test)."""
    c = synthetic.click_logs(25000, seed=seed)
    bags = [c["user"][:, None], c["item"][:, None], c["history"]]
    nn.manual_seed(seed)
    model = recsys.dlrm((200, 100, 100), dim=8)
    opt = optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(epochs):
        order = rng.permutation(20000)
        batches += [order[i:i + batch] for i in range(0, 20000, batch)]
    loss_fn = lambda idx: recsys.click_loss(model([b[idx] for b in bags]), c["label"][idx])  # noqa: E731
    steps, spent = _steps(model, [(i,) for i in batches], loss_fn, opt, progress, "dlrm")
    test = np.arange(20000, 25000)
    with no_grad():
        logit = model([b[test] for b in bags]).numpy()
    label = c["label"][test]
    return {"accuracy": float(np.mean((logit > 0) == (label > 0.5))),
            "bayes_accuracy": float(np.mean((c["logit"][test] > 0) == (label > 0.5))),
            "steps": steps, "seconds": spent}


def train_lstm(epochs: int = 15, batch: int = 32, lr: float = 1e-2, seed: int = 0,
               progress: bool = True) -> dict:
    """An LSTM (hidden 64) over the 8 pixel rows of each digit, 10 classes."""
    xtr, ytr, xte, yte = digits.load("mlp", seed)
    xtr, xte = xtr.reshape(-1, 8, 8), xte.reshape(-1, 8, 8)
    nn.manual_seed(seed)
    model = recurrent.lstm_classifier(classes=10, hidden=64, in_features=8)
    opt = optim.AdamW(model.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(epochs):
        order = rng.permutation(len(xtr))
        batches += [order[i:i + batch] for i in range(0, len(xtr) - batch + 1, batch)]
    loss_fn = lambda idx: F.cross_entropy(model(xtr[idx]), ytr[idx])  # noqa: E731
    steps, spent = _steps(model, [(i,) for i in batches], loss_fn, opt, progress, "lstm")
    return {"accuracy": digits.accuracy(model, xte, yte), "steps": steps, "seconds": spent}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["dlrm", "lstm"], default="lstm")
    ap.add_argument("--epochs", type=int, default=None)
    args = ap.parse_args(argv)
    run = train_dlrm if args.model == "dlrm" else train_lstm
    t0 = time.perf_counter()
    r = run() if args.epochs is None else run(epochs=args.epochs)
    extra = (f" (Bayes-optimal {r['bayes_accuracy']:.4f})" if "bayes_accuracy" in r else "")
    print(f"{args.model}: test accuracy {r['accuracy']:.4f}{extra} after {r['steps']} steps; "
          f"{r['steps'] / r['seconds']:.1f} steps/s, {time.perf_counter() - t0:.1f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
