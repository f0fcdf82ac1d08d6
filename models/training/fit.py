"""The training loop: fit() and evaluate() over the PyTorch-like protocol (model(x) gives
a Tensor, loss.backward() fills .grad, model.parameters(), train()/eval(), state_dict()),
with metrics, a progress bar (tqdm, the `train` extra), logs and periodic checkpoints.

Owns the loop's order of events only; the ops, the update rule and the data order belong
to the model, the optimiser and the loader.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from tilepy.models.training.errors import TrainingError, user_loc
from tilepy.models.training.log import write_log
from tilepy.models.training.state import save_checkpoint


def _array(t) -> np.ndarray:
    return np.asarray(t.data if hasattr(t, "data") else t)


def accuracy(output, target) -> float:
    """The fraction of rows whose largest output is the target class."""
    out, y = _array(output), _array(target)
    return float(np.mean(np.argmax(out, axis=-1) == y)) if y.size else 0.0


METRICS = {"accuracy": accuracy}


@dataclass
class History:
    """What fit() recorded: per-step losses and learning rates, per-epoch summaries."""

    steps: list = field(default_factory=list)   # dicts: step, epoch, loss, lr
    epochs: list = field(default_factory=list)  # dicts: epoch, train_loss, val_*, seconds

    @property
    def losses(self) -> list[float]:
        return [s["loss"] for s in self.steps]


def _no_grad():
    """tilepy.models.no_grad() when the autograd provides it, else a no-op context."""
    import contextlib

    models = sys.modules.get("tilepy.models")  # loaded already: it imports this package
    ctx = getattr(models, "no_grad", None)
    return ctx() if ctx is not None else contextlib.nullcontext()


def evaluate(model, loss_fn, loader, metrics=("accuracy",)) -> dict:
    """Mean loss and metrics over `loader` (weighted by batch size), in eval mode."""
    was_training = getattr(model, "training", True)
    _set_mode(model, False)
    total, n, sums = 0.0, 0, {_name(m): 0.0 for m in metrics}
    try:
        with _no_grad():
            for x, y in loader:
                out = model(x)
                k = len(_array(y))
                total += float(_array(loss_fn(out, y))) * k
                for m in metrics:
                    sums[_name(m)] += _metric(m)(out, y) * k
                n += k
    finally:
        _set_mode(model, was_training)
    if n == 0:
        raise TrainingError("evaluate() got an empty loader", user_loc())
    return {"loss": total / n, **{m: s / n for m, s in sums.items()}}


def _metric(m):
    if callable(m):
        return m
    if m not in METRICS:
        raise TrainingError(f"unknown metric {m!r}; expected one of {', '.join(METRICS)} or "
                            "a function (output, target) -> float", user_loc())
    return METRICS[m]


def _set_mode(model, training: bool) -> None:
    if hasattr(model, "train"):
        model.train(training)


def _bar(progress: bool, total: int, desc: str):
    """A tqdm bar over `total` batches, or None (no progress, or tqdm not installed)."""
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True)


def _name(m) -> str:
    return m if isinstance(m, str) else getattr(m, "__name__", "metric")


def _train_step(model, loss_fn, optimizer, batch, clip, where: str) -> tuple[float, object]:
    """One step: forward, loss, backward, optional clipping, update. Returns (loss, output)."""
    x, y = batch
    optimizer.zero_grad()
    out = model(x)
    loss = loss_fn(out, y)
    if not hasattr(loss, "backward"):
        raise TrainingError(f"the loss function returned a {type(loss).__name__} {where}; "
                            "expected a Tensor with backward()", user_loc(),
                            hint="compute the loss with tilepy.models ops (e.g. "
                                 "nn.functional.cross_entropy)")
    value = float(_array(loss))
    scaler = getattr(optimizer, "scaler", None)  # a MixedPrecision optimiser
    scaling = scaler is not None and scaler.enabled
    if not math.isfinite(value) and not scaling:
        raise TrainingError(f"the loss is {value} {where}", user_loc(),
                            hint="lower the learning rate, clip gradients (clip_grad_norm=1.0) "
                                 "or train with a loss scaler")
    (optimizer.scale_loss(loss) if scaling else loss).backward()
    if scaler is not None:
        optimizer.step(clip_grad_norm=clip)  # unscales, skips inf/NaN steps, clips
    else:
        if clip is not None:
            from tilepy.models.optim.clip import clip_grad_norm_

            clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], clip)
        optimizer.step()
    return value, out


def fit(model, loss_fn, optimizer, train_loader, epochs: int = 1, val_loader=None,
        metrics=("accuracy",), progress: bool = True, scheduler=None,
        scheduler_interval: str = "step", clip_grad_norm: float | None = None,
        max_steps: int | None = None, start_step: int = 0, log_path=None,
        checkpoint_path=None, checkpoint_every: int | None = None,
        history: History | None = None) -> History:
    """Train until `epochs` epochs (counted by the loader, so a resumed loader continues its
    epoch) or `max_steps` steps; evaluate on val_loader after each epoch. Checkpoints go to
    checkpoint_path every `checkpoint_every` steps (else after each epoch); the log (.csv or
    .json) is rewritten after each epoch. Returns the History."""
    history = history if history is not None else History()
    step, local_epoch = start_step, 0
    names = [_name(m) for m in metrics]
    while True:
        epoch = getattr(train_loader, "epoch", local_epoch)
        if epoch >= epochs or (max_steps is not None and step >= max_steps):
            break
        _set_mode(model, True)
        total = len(train_loader) if hasattr(train_loader, "__len__") else None
        bar = _bar(progress, total, f"epoch {epoch + 1}/{epochs}")
        t0, losses, sums, seen = time.perf_counter(), [], dict.fromkeys(names, 0.0), 0
        stopped = False
        for batch in train_loader:
            value, out = _train_step(model, loss_fn, optimizer, batch, clip_grad_norm,
                                     f"at step {step + 1} (epoch {epoch + 1})")
            lr = optimizer.param_groups[0]["lr"]
            if scheduler is not None and scheduler_interval == "step":
                scheduler.step()
            step += 1
            k = len(_array(batch[1]))
            for m, n in zip(metrics, names):
                sums[n] += _metric(m)(out, batch[1]) * k
            seen += k
            losses.append(value)
            history.steps.append({"step": step, "epoch": epoch + 1, "loss": value, "lr": lr})
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{value:.4f}", lr=f"{lr:.3g}")
            if checkpoint_path and checkpoint_every and step % checkpoint_every == 0:
                save_checkpoint(checkpoint_path, model, optimizer, scheduler,
                                _stateful(train_loader), step)
            if max_steps is not None and step >= max_steps:
                stopped = True
                break
        if bar is not None:
            bar.close()
        done = (train_loader.epoch > epoch if hasattr(train_loader, "epoch") else not stopped)
        local_epoch += 1
        if not done:
            break  # stopped mid-epoch at max_steps
        _end_epoch(model, loss_fn, optimizer, scheduler, scheduler_interval, train_loader,
                   val_loader, metrics, history, epoch, losses, sums, seen, t0, progress)
        if log_path:
            write_log(log_path, history)
        if checkpoint_path and not checkpoint_every:
            save_checkpoint(checkpoint_path, model, optimizer, scheduler,
                            _stateful(train_loader), step)
    return history


def _stateful(loader):
    return loader if hasattr(loader, "state_dict") else None


def _end_epoch(model, loss_fn, optimizer, scheduler, interval, train_loader, val_loader,
               metrics, history, epoch, losses, sums, seen, t0, progress) -> None:
    if scheduler is not None and interval == "epoch":
        scheduler.step()
    rec = {"epoch": epoch + 1, "train_loss": float(np.mean(losses)) if losses else math.nan}
    rec.update({f"train_{n}": s / max(seen, 1) for n, s in sums.items()})
    if val_loader is not None:
        rec.update({f"val_{k}": v for k, v in evaluate(model, loss_fn, val_loader,
                                                         metrics).items()})
    rec["seconds"] = time.perf_counter() - t0
    history.epochs.append(rec)
    if progress:
        text = "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                         for k, v in rec.items())
        print(text, file=sys.stderr)
