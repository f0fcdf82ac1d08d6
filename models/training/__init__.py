"""tilepy.models.training: fit() and evaluate() with metrics, a progress bar and logs;
checkpoints without pickle (`save`/`load`, `save_checkpoint`/`load_checkpoint`) that
resume training with the same bits; the loss-curve plot.
"""

from tilepy.models.training.checkpoint import load, save
from tilepy.models.training.errors import CheckpointError, DataError, OptimizerError, TrainingError
from tilepy.models.training.fit import History, accuracy, evaluate, fit
from tilepy.models.training.log import plot_history, write_log
from tilepy.models.training.state import load_checkpoint, save_checkpoint

__all__ = [
    "CheckpointError", "DataError", "History", "OptimizerError", "TrainingError", "accuracy",
    "evaluate", "fit", "load", "load_checkpoint", "plot_history", "save", "save_checkpoint",
    "write_log",
]
