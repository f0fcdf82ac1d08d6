"""tilepy.models.zoo: ready-made models built from tilepy.models.nn, each with a test that
trains it a few steps (tests/models/test_zoo_models.py) and the table in docs/models.md;
`python -m tilepy.models.zoo.digits` trains the MLP or LeNet-5 to a stated accuracy."""

from tilepy.models.zoo.autoencoder import autoencoder, conv_autoencoder, mse_loss, vae, vae_loss
from tilepy.models.zoo.dense import densenet_tiny, unet_tiny
from tilepy.models.zoo.graph import (
    attention_mask,
    gat,
    gcn,
    graphsage,
    mean_adjacency,
    normalized_adjacency,
)
from tilepy.models.zoo.recsys import (
    click_loss,
    deep_cross,
    deepfm,
    dlrm,
    matrix_factorization,
    neural_cf,
)
from tilepy.models.zoo.recurrent import (
    bilstm_tagger,
    gru_classifier,
    gru_seq2seq,
    lstm_classifier,
    sequence_loss,
)
from tilepy.models.zoo.sets import pointnet
from tilepy.models.zoo.tabular import residual_mlp, softmax_regression, wide_deep
from tilepy.models.zoo.text import char_gpt, char_llama, char_mlp
from tilepy.models.zoo.transformer import mlp_mixer, sequence_tagger, vit_tiny
from tilepy.models.zoo.vision import lenet5, mlp, mobilenet_tiny, resnet8

__all__ = ["autoencoder", "char_gpt", "char_llama", "char_mlp", "click_loss",
           "conv_autoencoder", "deep_cross", "densenet_tiny", "dlrm", "gcn", "graphsage",
           "gru_classifier", "lenet5", "lstm_classifier", "matrix_factorization",
           "mean_adjacency", "mlp",
           "mlp_mixer", "mobilenet_tiny", "mse_loss", "neural_cf", "normalized_adjacency",
           "pointnet", "residual_mlp", "resnet8", "sequence_tagger", "softmax_regression",
           "unet_tiny", "vae", "vae_loss", "vit_tiny", "wide_deep"]
__all__ += ["attention_mask", "bilstm_tagger", "deepfm", "gat", "gru_seq2seq",
            "sequence_loss"]
