"""A training recipe for every zoo model: its data (packaged or generated, nothing
fetched), optimiser, epochs, batch size, the metric on held-out data and the figure the
recipe is stated to reach. `tilepy.models.zoo.train` runs them; docs/models.md records
what each reached. The data builders for the models' families live in recipes_data.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tilepy.models import zoo
from tilepy.models.zoo import recipes_data as D


@dataclass(frozen=True)
class Recipe:
    """`setup(seed)` builds the model and returns a Task; `target` is the stated figure
    (a floor for accuracies, a ceiling when `lower` is true). batch None: full batch."""

    data: str
    metric: str
    target: float
    epochs: int
    batch: int | None
    lr: float
    setup: Callable
    lower: bool = False
    optimizer: str = "adamw"
    weight_decay: float = 0.01


def _r(data, metric, target, epochs, batch, lr, setup, **kw) -> Recipe:
    return Recipe(data, metric, target, epochs, batch, lr, setup, **kw)


_ACC, _FVU, _NATS = "test accuracy", "test MSE / variance", "test loss (nats/char)"
_DIG, _IMG = "digits (1437 train, 360 test)", "shapes_images 3x8x8, 4 classes (4000/1000)"
_CLICK = "click_logs: 20,000 events to train, 5,000 to test"
_GRAPH = "random_graph: 300 nodes, 90 labelled, 210 to test"
_TEXT = "char_corpus (Python's docs), windows of 16: 4096 sampled once, 512 to test"

RECIPES: dict[str, Recipe] = {
    "mlp": _r(_DIG, _ACC, 0.97, 20, 32, 2e-3, D.digits(lambda: zoo.mlp(), images=False)),
    "lenet5": _r(_DIG, _ACC, 0.97, 20, 32, 3e-3, D.digits(lambda: zoo.lenet5())),
    "mlp_mixer": _r(_DIG, _ACC, 0.95, 20, 32, 3e-3, D.digits(lambda: zoo.mlp_mixer())),
    "vit_tiny": _r(_DIG, _ACC, 0.95, 40, 32, 3e-3, D.digits(lambda: zoo.vit_tiny())),
    "lstm_classifier": _r(_DIG + " as 8 rows of 8 pixels", _ACC, 0.97, 15, 32, 1e-2,
                          D.digit_rows(lambda: zoo.lstm_classifier(
                              classes=10, hidden=64, in_features=8))),
    "autoencoder": _r(_DIG, _FVU, 0.4, 30, 32, 3e-3, D.reconstruct(
        lambda: zoo.autoencoder(), images=False), lower=True),
    "conv_autoencoder": _r(_DIG, _FVU, 0.5, 30, 32, 1e-2, D.reconstruct(
        lambda: zoo.conv_autoencoder(), images=True), lower=True),
    "vae": _r(_DIG, _FVU, 0.6, 40, 32, 3e-3, D.reconstruct(lambda: zoo.vae(), images=False,
                                                          vae=True), lower=True),
    "resnet8": _r(_IMG, _ACC, 0.9, 8, 64, 3e-3, D.shapes(
        lambda: zoo.resnet8(3, image=8, classes=4, width=8))),
    "mobilenet_tiny": _r(_IMG, _ACC, 0.85, 8, 64, 1e-2, D.shapes(
        lambda: zoo.mobilenet_tiny(3, image=8, classes=4, width=8))),
    "densenet_tiny": _r(_IMG, _ACC, 0.85, 8, 64, 3e-3, D.shapes(
        lambda: zoo.densenet_tiny(3, image=8, classes=4))),
    "unet_tiny": _r("shapes_images 3x8x8: pixels of the shape vs background (1000/250)",
                    "test pixel accuracy", 0.97, 8, 32, 3e-3, D.segmentation(
                        lambda: zoo.unet_tiny(3, classes=2, width=4))),
    "softmax_regression": _r("iris (120/30)", _ACC, 0.9, 200, None, 0.1,
                             D.tabular("iris", lambda: zoo.softmax_regression(4, 3))),
    "wide_deep": _r("breast cancer (455/114)", _ACC, 0.95, 30, 32, 3e-3,
                    D.tabular("breast_cancer", lambda: zoo.wide_deep(30, 2))),
    "residual_mlp": _r("wine (142/36)", _ACC, 0.95, 60, 32, 3e-3,
                       D.tabular("wine", lambda: zoo.residual_mlp(13, 3))),
    "pointnet": _r("point sets: circle, square outline, segment; 16 points (2000/500)",
                   _ACC, 0.95, 10, 32, 3e-3, D.point_sets(lambda: zoo.pointnet(2, 3))),
    "gru_classifier": _r("first-token recall: 4 classes, 6 steps (2000/500)", _ACC, 0.99,
                         5, 32, 1e-2, D.recall(lambda: zoo.gru_classifier(5, 4))),
    "sequence_tagger": _r("sequence_task('sort'), length 8 (4000/1000)",
                          "test token accuracy", 0.9, 20, 64, 3e-3, D.sort_task(
                              lambda: zoo.sequence_tagger(8, 8, length=8))),
    "bilstm_tagger": _r("repeat_tagging: lengths 2-8, vocab 4 (4000/1000)",
                        "test token accuracy", 0.97, 8, 64, 1e-2, D.tagging(
                            lambda: zoo.bilstm_tagger(4, 2, hidden=32))),
    "gru_seq2seq": _r("sequence_task('reverse'), length 6, vocab 8 (4000/1000)",
                      "test token accuracy (greedy decoding)", 0.9, 20, 64, 1e-2,
                      D.seq2seq(lambda: zoo.gru_seq2seq(8, hidden=64))),
    "char_mlp": _r(_TEXT.replace("4096", "65536"), _NATS, 2.3, 2, 64, 3e-3,
                   D.chars("mlp", windows=65536), lower=True),
    "char_gpt": _r(_TEXT, _NATS, 2.3, 8, 64, 3e-3, D.chars("gpt"), lower=True),
    "char_llama": _r(_TEXT, _NATS, 2.3, 8, 64, 3e-3, D.chars("llama"), lower=True),
    "matrix_factorization": _r(_CLICK, _ACC, 0.68, 6, 256, 1e-2,
                               D.clicks(lambda: zoo.matrix_factorization(), "pair")),
    "neural_cf": _r(_CLICK, _ACC, 0.68, 4, 256, 1e-2,
                    D.clicks(lambda: zoo.neural_cf(), "pair")),
    "deep_cross": _r(_CLICK, _ACC, 0.68, 6, 256, 1e-2,
                     D.clicks(lambda: zoo.deep_cross(), "pair")),
    "dlrm": _r(_CLICK, _ACC, 0.68, 6, 256, 1e-2, D.clicks(lambda: zoo.dlrm(dim=8), "bags"),
               weight_decay=0.0),
    "deepfm": _r(_CLICK, _ACC, 0.68, 6, 256, 1e-2, D.clicks(lambda: zoo.deepfm(), "fields")),
    "gcn": _r(_GRAPH, _ACC, 0.8, 100, None, 1e-2, D.graph(lambda: zoo.gcn(), "gcn")),
    "graphsage": _r(_GRAPH, _ACC, 0.8, 100, None, 1e-2,
                    D.graph(lambda: zoo.graphsage(), "sage")),
    "gat": _r(_GRAPH, _ACC, 0.8, 100, None, 1e-2, D.graph(lambda: zoo.gat(), "gat")),
}
