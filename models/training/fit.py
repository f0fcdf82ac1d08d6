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


def _captured_step(model, loss_fn, optimizer, clip):
    """_train_step without its host read of the loss, captured for replay."""
    from tilepy.models.capture import capture
    from tilepy.models.optim.clip import clip_grad_norm_

    params = [p for g in optimizer.param_groups for p in g["params"]]

    def step(x, y):
        optimizer.zero_grad()
        out = model(x)
        loss = loss_fn(out, y)
        if not hasattr(loss, "backward"):
            raise TrainingError(f"the loss function returned a {type(loss).__name__}; "
                                "expected a Tensor with backward()", user_loc())
        loss.backward()
        if clip is not None:
            clip_grad_norm_(params, clip)
        optimizer.step()
        return loss, out
    return capture(step)


def _replayed_step(captured, batch, where: str) -> tuple[float, object]:
    """One captured step: (loss, output); a non-finite loss is reported after its update."""
    loss, out = captured(*batch)
    value = float(_array(loss))
    if not math.isfinite(value):
        raise TrainingError(f"the loss is {value} {where}", user_loc(),
                            hint="lower the learning rate or clip gradients "
                                 "(clip_grad_norm=1.0)")
    return value, out


def fit(model, loss_fn, optimizer, train_loader, epochs: int = 1, val_loader=None,
        metrics=("accuracy",), progress: bool = True, scheduler=None,
        scheduler_interval: str = "step", clip_grad_norm: float | None = None,
        max_steps: int | None = None, start_step: int = 0, log_path=None,
        checkpoint_path=None, checkpoint_every: int | None = None,
        history: History | None = None, capture: bool = False) -> History:
    """Train until `epochs` epochs (counted by the loader, so a resumed loader continues its
    epoch) or `max_steps` steps; evaluate on val_loader after each epoch. Checkpoints go to
    checkpoint_path every `checkpoint_every` steps (else after each epoch); the log (.csv or
    .json) is rewritten after each epoch. Returns the History. `capture` replays the step
    (tilepy.models.capture: the same bits; a NaN loss is then reported after its update;
    an optimiser with a loss scaler runs eagerly)."""
    if scheduler_interval not in ("step", "epoch"):
        raise TrainingError(f"scheduler_interval must be 'step' or 'epoch'; got "
                            f"{scheduler_interval!r}", user_loc())
    run = _Run(model, loss_fn, optimizer, train_loader, scheduler, scheduler_interval,
               clip_grad_norm, list(metrics), max_steps, checkpoint_path, checkpoint_every,
               history if history is not None else History(), start_step)
    if capture and getattr(optimizer, "scaler", None) is None:
        run.captured = _captured_step(model, loss_fn, optimizer, clip_grad_norm)
    local_epoch = 0
    while True:
        epoch = getattr(train_loader, "epoch", local_epoch)
        if epoch >= epochs or (max_steps is not None and run.step >= max_steps):
            break
        bar = _bar(progress, len(train_loader) if hasattr(train_loader, "__len__") else None,
                   f"epoch {epoch + 1}/{epochs}")
        t0 = time.perf_counter()
        stats, stopped = run.epoch(epoch, bar)
        local_epoch += 1
        if train_loader.epoch <= epoch if hasattr(train_loader, "epoch") else stopped:
            break  # stopped mid-epoch at max_steps
        if scheduler is not None and scheduler_interval == "epoch":
            scheduler.step()
        _summary(run, val_loader, epoch, stats, t0, progress)
        if log_path:
            write_log(log_path, run.history)
        if checkpoint_path and not checkpoint_every:
            run.save()
    return run.history


@dataclass
class _Run:
    """One fit() call's objects and counters."""

    model: object
    loss_fn: object
    optimizer: object
    loader: object
    scheduler: object
    interval: str
    clip: float | None
    metrics: list
    max_steps: int | None
    checkpoint_path: object
    checkpoint_every: int | None
    history: History
    step: int
    captured: object = None  # the captured step (fit(capture=True)), else None

    def epoch(self, epoch: int, bar) -> tuple[dict, bool]:
        """Train over the loader's (remaining) batches: ({'losses', metric sums, 'seen'},
        whether max_steps stopped it)."""
        _set_mode(self.model, True)
        stats = {"losses": [], "seen": 0, **{_name(m): 0.0 for m in self.metrics}}
        try:
            for batch in self.loader:
                where = f"at step {self.step + 1} (epoch {epoch + 1})"
                if self.captured is not None:
                    value, out = _replayed_step(self.captured, batch, where)
                else:
                    value, out = _train_step(self.model, self.loss_fn, self.optimizer, batch,
                                             self.clip, where)
                self._record(epoch, batch, value, out, stats, bar)
                if self.max_steps is not None and self.step >= self.max_steps:
                    return stats, True
        finally:
            if bar is not None:
                bar.close()
        return stats, False

    def _record(self, epoch, batch, value, out, stats, bar) -> None:
        lr = self.optimizer.param_groups[0]["lr"]
        if self.scheduler is not None and self.interval == "step":
            self.scheduler.step()
        self.step += 1
        k = len(_array(batch[1]))
        for m in self.metrics:
            stats[_name(m)] += _metric(m)(out, batch[1]) * k
        stats["seen"] += k
        stats["losses"].append(value)
        self.history.steps.append({"step": self.step, "epoch": epoch + 1, "loss": value,
                                   "lr": lr})
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{value:.4f}", lr=f"{lr:.3g}")
        if self.checkpoint_path and self.checkpoint_every and \
                self.step % self.checkpoint_every == 0:
            self.save()

    def save(self) -> None:
        loader = self.loader if hasattr(self.loader, "state_dict") else None
        save_checkpoint(self.checkpoint_path, self.model, self.optimizer, self.scheduler,
                        loader, self.step)


def _summary(run: _Run, val_loader, epoch: int, stats: dict, t0: float, progress: bool):
    """Record (and with progress, print) the epoch's training and validation figures."""
    losses, seen = stats["losses"], max(stats["seen"], 1)
    rec = {"epoch": epoch + 1, "train_loss": float(np.mean(losses)) if losses else math.nan}
    rec.update({f"train_{_name(m)}": stats[_name(m)] / seen for m in run.metrics})
    if val_loader is not None:
        rec.update({f"val_{k}": v for k, v in evaluate(run.model, run.loss_fn, val_loader,
                                                         run.metrics).items()})
    rec["seconds"] = time.perf_counter() - t0
    run.history.epochs.append(rec)
    if progress:
        print("  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                        for k, v in rec.items()), file=sys.stderr)
