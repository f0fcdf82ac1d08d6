"""Each zoo model trains on the interpreter (no compiles): a few optimiser steps on one
small batch of the data it is meant for, and the loss must fall at every step and end
below the loss of the best input-blind prediction: ln(classes) (a uniform guess) for
classifiers and language models, the label entropy for clicks, the batch mean's squared
error for the autoencoder. A wrong gradient sign, a detached layer or a broken update
fails one or the other."""

import numpy as np
import pytest

import tilepy
from tilepy.models import Tensor, nn, optim, zoo
from tilepy.models.data import datasets, synthetic
from tilepy.models.errors import ModelError
from tilepy.models.nn.utils.rnn import gather_rows

F = nn.functional


def _train(model, loss, opt, steps):
    """Losses of `steps` full-batch steps: loss() builds the graph, opt updates."""
    losses = []
    with tilepy.backend("interp"):
        for _ in range(steps):
            value = loss()
            model.zero_grad()
            value.backward()
            opt.step()
            losses.append(value.item())
    return losses


def _falls(losses, bound):
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < bound, (losses, bound)


@pytest.fixture(scope="module")
def digits():
    pytest.importorskip("sklearn")
    split = datasets.load("digits", images=True)
    x, y = split.train.arrays
    return x[:32], y[:32]


def _tabular(name, n=64):
    pytest.importorskip("sklearn")
    x, y = datasets.load(name).train.arrays
    return x[:n], y[:n]


def test_resnet8_on_shapes_images():
    x, y = synthetic.shapes_images(16, classes=4, size=8, channels=3, seed=0)
    nn.manual_seed(0)
    model = zoo.resnet8(3, image=8, classes=4, width=4)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _falls(_train(model, lambda: F.cross_entropy(model(x), y), opt, 5), np.log(4))


def test_softmax_regression_on_iris():
    x, y = _tabular("iris")
    nn.manual_seed(0)
    model = zoo.softmax_regression(4, 3)
    opt = optim.SGD(model.parameters(), lr=0.5)
    _falls(_train(model, lambda: F.cross_entropy(model(x), y), opt, 5), np.log(3))


def test_residual_mlp_on_wine():
    x, y = _tabular("wine")
    nn.manual_seed(0)
    model = zoo.residual_mlp(13, 3)  # dropout 0.1 on: a new mask every step
    opt = optim.AdamW(model.parameters(), lr=1e-2)
    _falls(_train(model, lambda: F.cross_entropy(model(x), y), opt, 5), np.log(3))


def test_autoencoder_on_digits(digits):
    x = digits[0].reshape(len(digits[0]), 64)
    nn.manual_seed(0)
    model = zoo.autoencoder(64, 32, 8)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    constant = float(((x - x.mean(axis=0)) ** 2).mean())
    _falls(_train(model, lambda: zoo.mse_loss(model(x), x), opt, 6), constant)


@pytest.mark.parametrize("make", [zoo.mlp_mixer, zoo.vit_tiny], ids=["mixer", "vit"])
def test_patch_models_on_digits(digits, make):
    x, y = digits[0][:16], digits[1][:16]
    nn.manual_seed(0)
    model = make()
    opt = optim.AdamW(model.parameters(), lr=3e-3)
    _falls(_train(model, lambda: F.cross_entropy(model(x), y), opt, 5), np.log(10))


@pytest.fixture(scope="module")
def chars():
    train, _ = datasets.char_corpus(block_size=16)
    x, y = train.take(np.arange(0, 8 * 80, 80))  # 8 windows spread over the text
    return x, y, len(train.vocab)


def test_char_gpt_on_char_corpus(chars):
    x, y, vocab = chars
    nn.manual_seed(0)
    model = zoo.char_gpt(vocab, block_size=16)
    opt = optim.AdamW(model.parameters(), lr=3e-3)
    loss = lambda: F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))  # noqa: E731
    _falls(_train(model, loss, opt, 5), np.log(vocab))


def test_char_llama_on_char_corpus(chars):
    x, y, vocab = chars
    nn.manual_seed(0)
    model = zoo.char_llama(vocab, block_size=16)
    opt = optim.AdamW(model.parameters(), lr=3e-3)
    loss = lambda: F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))  # noqa: E731
    _falls(_train(model, loss, opt, 5), np.log(vocab))


def test_pointnet_on_point_sets():
    x, y = synthetic.point_sets(24)
    nn.manual_seed(0)
    model = zoo.pointnet(2, 3)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    _falls(_train(model, lambda: F.cross_entropy(model(x), y), opt, 6), np.log(3))
    with tilepy.backend("interp"):  # the order of the points does not matter
        same = model(x[:, ::-1].copy()).numpy()
        assert np.array_equal(same, model(x).numpy())


def test_char_mlp_on_char_corpus(chars):
    x, y, vocab = chars
    nn.manual_seed(0)
    model = zoo.char_mlp(vocab, context=8)
    opt = optim.AdamW(model.parameters(), lr=1e-2)
    loss = lambda: F.cross_entropy(model(x[:, :8]), y[:, 7])  # noqa: E731
    _falls(_train(model, loss, opt, 5), np.log(vocab))


def test_matrix_factorization_on_click_logs():
    c = synthetic.click_logs(256, seed=1)
    nn.manual_seed(0)
    model = zoo.matrix_factorization(200, 100, 8)
    opt = optim.Adam(model.parameters(), lr=5e-2)
    p = float(c["label"].mean())
    entropy = -(p * np.log(p) + (1 - p) * np.log(1 - p))
    loss = lambda: zoo.click_loss(model(c["user"], c["item"]), c["label"])  # noqa: E731
    _falls(_train(model, loss, opt, 6), entropy)


def test_click_loss_is_binary_cross_entropy():
    z = np.array([-3.0, -0.5, 0.0, 2.0, 7.0], np.float32)
    label = np.array([0, 1, 1, 0, 1], np.float32)
    want = np.mean(np.logaddexp(0, z.astype(np.float64)) - label * z)
    with tilepy.backend("interp"):
        got = zoo.click_loss(Tensor(z), label).item()
    assert abs(got - want) < 1e-6 * abs(want)


def test_gcn_on_random_graph():
    g = synthetic.random_graph(seed=0)
    order = np.argsort(~g["train_mask"], kind="stable")  # training nodes first
    n_train = int(g["train_mask"].sum())
    a_hat = zoo.normalized_adjacency(g["adjacency"][np.ix_(order, order)])
    x, y = g["features"][order], g["labels"][order]
    nn.manual_seed(0)
    model = zoo.gcn(16, 16, 3)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    loss = lambda: F.cross_entropy(model(a_hat, x)[:n_train], y[:n_train])  # noqa: E731
    _falls(_train(model, loss, opt, 6), np.log(3))


def test_normalized_adjacency():
    adj = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], np.float32)
    deg = np.array([2.0, 3.0, 2.0])  # with the self loops
    want = (adj + np.eye(3)) / np.sqrt(deg[:, None] * deg[None, :])
    np.testing.assert_allclose(zoo.normalized_adjacency(adj), want, rtol=1e-6)


def test_mobilenet_tiny_on_shapes_images():
    x, y = synthetic.shapes_images(16, classes=4, size=8, channels=3, seed=0)
    nn.manual_seed(0)
    model = zoo.mobilenet_tiny(3, image=8, classes=4, width=4)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _falls(_train(model, lambda: F.cross_entropy(model(x), y), opt, 5), np.log(4))


def test_vae_on_digits(digits):
    x = digits[0].reshape(len(digits[0]), 64)
    nn.manual_seed(0)
    model = zoo.vae(64, 32, 4)  # a new eps every step: the loss is noisy, hence 8 steps

    def loss():
        recon, mean, logvar = model(x)
        return zoo.vae_loss(recon, x, mean, logvar)
    opt = optim.Adam(model.parameters(), lr=2e-2)
    constant = float(((x - x.mean(axis=0)) ** 2).sum(axis=1).mean())  # KL 0, SSE of the mean
    _falls(_train(model, loss, opt, 8), constant)


def test_gru_classifier_recalls_the_first_token():
    """The label is the first token; the other 5 are a filler token (4), so the embedding
    rows 0-3 get gradients only through all 6 unrolled steps."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 32)
    x = np.concatenate([y[:, None], np.full((32, 5), 4)], axis=1)
    nn.manual_seed(0)
    model = zoo.gru_classifier(vocab=5, classes=4)
    opt = optim.Adam(model.parameters(), lr=2e-2)
    _falls(_train(model, lambda: F.cross_entropy(model(x), y), opt, 6), np.log(4))
    assert np.all(np.abs(model.embed.weight.grad[:4]).sum(axis=1) > 0)


def test_gru_cell_matches_the_gru_equations():
    rng = np.random.default_rng(1)
    x, h = rng.standard_normal((3, 5)), rng.standard_normal((3, 4))
    nn.manual_seed(0)
    cell = zoo.recurrent.GRUCell(5, 4, dtype=np.float64)
    with tilepy.backend("interp"):
        got = cell(x, Tensor(h)).numpy()
    gi = x @ cell.ih.weight.data.T + cell.ih.bias.data
    gh = h @ cell.hh.weight.data.T + cell.hh.bias.data
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    r, z = sig(gi[:, :4] + gh[:, :4]), sig(gi[:, 4:8] + gh[:, 4:8])
    n = np.tanh(gi[:, 8:] + r * gh[:, 8:])
    np.testing.assert_allclose(got, (1 - z) * n + z * h, rtol=1e-12, atol=1e-12)


def test_neural_cf_on_click_logs():
    c = synthetic.click_logs(256, seed=1)
    nn.manual_seed(0)
    model = zoo.neural_cf(200, 100, 8)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    p = float(c["label"].mean())
    entropy = -(p * np.log(p) + (1 - p) * np.log(1 - p))
    loss = lambda: zoo.click_loss(model(c["user"], c["item"]), c["label"])  # noqa: E731
    _falls(_train(model, loss, opt, 6), entropy)


@pytest.mark.parametrize("make, x, message", [
    (zoo.vit_tiny, np.zeros((2, 1, 16, 16), np.float32),
     r"ViT: expected input of shape \(N, 1, 8, 8\); got \(2, 1, 16, 16\)"),
    (zoo.mlp_mixer, np.zeros((2, 64), np.float32),
     r"MLPMixer: expected input of shape \(N, 1, 8, 8\); got \(2, 64\)"),
    (lambda: zoo.char_gpt(10, block_size=4), np.zeros((2, 6), np.int64),
     r"CharGPT: expected sequences of at most block_size=4 codes; got shape \(2, 6\)"),
    (lambda: zoo.sequence_tagger(8, 8, length=4), np.zeros((2, 6), np.int64),
     r"SequenceTagger: expected sequences of at most length=4 tokens; got shape \(2, 6\)"),
    (zoo.pointnet, np.zeros((2, 5, 3), np.float32),
     r"PointNet: expected input of shape \(N, \*, 2\); got \(2, 5, 3\)"),
    (lambda: zoo.char_mlp(10, context=8), np.zeros((2, 5), np.int64),
     r"CharMLP: expected input of shape \(N, 8\); got \(2, 5\)"),
    (zoo.gru_classifier, np.zeros(6, np.int64),
     r"GRUClassifier: expected input of shape \(N, \*\); got \(6,\)"),
])
def test_wrong_input_names_the_model_and_both_shapes(make, x, message):
    with tilepy.backend("interp"), pytest.raises(ModelError, match=message) as e:
        make()(x)
    assert "test_zoo_models.py" in str(e.value)


def test_gcn_names_a_mismatched_adjacency():
    with tilepy.backend("interp"), pytest.raises(
            ModelError, match=r"GCN adjacency: expected input of shape \(4, 4\); got \(5, 5\)"):
        zoo.gcn()(np.eye(5, dtype=np.float32), np.zeros((4, 16), np.float32))


def test_densenet_tiny_on_shapes_images():
    x, y = synthetic.shapes_images(16, classes=4, size=8, channels=3, seed=0)
    nn.manual_seed(0)
    model = zoo.densenet_tiny(3, image=8, classes=4, growth=4, layers=2)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _falls(_train(model, lambda: F.cross_entropy(model(x), y), opt, 5), np.log(4))


def test_unet_tiny_segments_shapes_images():
    """Per-pixel foreground/background: the shape's pixels are >= 0.5 in some channel, the
    background below the noise level 0.1."""
    x, _ = synthetic.shapes_images(8, classes=4, size=8, channels=3, seed=0)
    mask = (x.max(axis=1) > 0.3).astype(np.int64)
    p = float(mask.mean())
    entropy = -(p * np.log(p) + (1 - p) * np.log(1 - p))
    nn.manual_seed(0)
    model = zoo.unet_tiny(3, classes=2, width=4)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def loss():
        return F.cross_entropy(model(x).permute(0, 2, 3, 1).reshape(-1, 2), mask.reshape(-1))
    _falls(_train(model, loss, opt, 6), entropy)


def test_upsample2_repeats_pixels_and_sums_their_gradients():
    x = Tensor(np.arange(8, dtype=np.float64).reshape(1, 2, 2, 2), requires_grad=True)
    g = np.arange(32, dtype=np.float64).reshape(1, 2, 4, 4)
    with tilepy.backend("interp"):
        y = zoo.dense.upsample2(x)
        (y * Tensor(g)).sum().backward()
    np.testing.assert_array_equal(y.numpy(), x.data.repeat(2, axis=2).repeat(2, axis=3))
    np.testing.assert_array_equal(x.grad, g.reshape(1, 2, 2, 2, 2, 2).sum(axis=(3, 5)))


def test_wide_deep_on_breast_cancer():
    x, y = _tabular("breast_cancer")
    nn.manual_seed(0)
    model = zoo.wide_deep(30, 2)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    _falls(_train(model, lambda: F.cross_entropy(model(x), y), opt, 5), np.log(2))


def test_graphsage_on_random_graph():
    g = synthetic.random_graph(seed=0)
    order = np.argsort(~g["train_mask"], kind="stable")  # training nodes first
    n_train = int(g["train_mask"].sum())
    a_mean = zoo.mean_adjacency(g["adjacency"][np.ix_(order, order)])
    x, y = g["features"][order], g["labels"][order]
    nn.manual_seed(0)
    model = zoo.graphsage(16, 16, 3)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    loss = lambda: F.cross_entropy(model(a_mean, x)[:n_train], y[:n_train])  # noqa: E731
    _falls(_train(model, loss, opt, 6), np.log(3))


def test_deep_cross_on_click_logs():
    c = synthetic.click_logs(256, seed=1)
    nn.manual_seed(0)
    model = zoo.deep_cross(200, 100, 8)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    p = float(c["label"].mean())
    entropy = -(p * np.log(p) + (1 - p) * np.log(1 - p))
    loss = lambda: zoo.click_loss(model(c["user"], c["item"]), c["label"])  # noqa: E731
    _falls(_train(model, loss, opt, 6), entropy)


def test_conv_autoencoder_on_digits(digits):
    x = digits[0][:16]
    nn.manual_seed(0)
    model = zoo.conv_autoencoder(1, 4)
    opt = optim.Adam(model.parameters(), lr=2e-2)
    constant = float(((x - x.mean(axis=0)) ** 2).mean())
    _falls(_train(model, lambda: zoo.mse_loss(model(x), x), opt, 6), constant)


def test_sequence_tagger_learns_to_sort():
    x, y = synthetic.sequence_task("sort", 8, length=8, vocab=8, seed=0)
    nn.manual_seed(0)
    model = zoo.sequence_tagger(8, 8, length=8, width=16)
    opt = optim.AdamW(model.parameters(), lr=1e-2)
    loss = lambda: F.cross_entropy(model(x).reshape(-1, 8), y.reshape(-1))  # noqa: E731
    _falls(_train(model, loss, opt, 5), np.log(8))


def _bits_of_a_step(backend, make, inputs, loss_of):
    """Loss, parameters and gradients after one AdamW step on `backend`."""
    nn.manual_seed(7)
    model = make()
    opt = optim.AdamW(model.parameters(), lr=1e-2)
    with tilepy.backend(backend):
        loss = loss_of(model, *inputs)
        model.zero_grad()
        loss.backward()
        opt.step()
    return [np.asarray(loss.item())] + [a for p in model.parameters() for a in (p.data, p.grad)]


def _xent(model, x, y):
    out = model(x)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), np.asarray(y).reshape(-1))


_RNG = np.random.default_rng(11)
_JIT_CASES = {
    "resnet8": (lambda: zoo.resnet8(3, 8, 4, width=4),
                synthetic.shapes_images(6, 4, size=8, seed=3), _xent),
    "mobilenet_tiny": (lambda: zoo.mobilenet_tiny(3, 8, 4, width=4),
                       synthetic.shapes_images(6, 4, size=8, seed=3), _xent),
    "densenet_tiny": (lambda: zoo.densenet_tiny(3, 8, 4, growth=2, layers=2),
                      synthetic.shapes_images(6, 4, size=8, seed=3), _xent),
    "unet_tiny": (lambda: zoo.unet_tiny(3, 2, width=2),
                  (synthetic.shapes_images(2, 4, size=8, seed=3)[0],
                   _RNG.integers(0, 2, (2, 8, 8))),
                  lambda m, x, y: F.cross_entropy(m(x).permute(0, 2, 3, 1).reshape(-1, 2),
                                                  y.reshape(-1))),
    "vit_tiny": (zoo.vit_tiny, (_RNG.standard_normal((4, 1, 8, 8)).astype(np.float32),
                                _RNG.integers(0, 10, 4)), _xent),
    "mlp_mixer": (zoo.mlp_mixer, (_RNG.standard_normal((4, 1, 8, 8)).astype(np.float32),
                                  _RNG.integers(0, 10, 4)), _xent),
    "char_gpt": (lambda: zoo.char_gpt(12, 8), (_RNG.integers(0, 12, (3, 8)),
                                               _RNG.integers(0, 12, (3, 8))), _xent),
    "gru_classifier": (lambda: zoo.gru_classifier(5, 4), (_RNG.integers(0, 5, (4, 3)),
                                                          _RNG.integers(0, 4, 4)), _xent),
    "char_llama": (lambda: zoo.char_llama(12, 8), (_RNG.integers(0, 12, (3, 8)),
                                                   _RNG.integers(0, 12, (3, 8))), _xent),
    "pointnet": (zoo.pointnet, synthetic.point_sets(5, seed=2), _xent),
    "graphsage": (zoo.graphsage, (_RNG.standard_normal((10, 16)).astype(np.float32),
                                  _RNG.integers(0, 3, 10)),
                  lambda m, x, y: F.cross_entropy(m(zoo.mean_adjacency(np.ones((10, 10)) -
                                                                       np.eye(10)), x), y)),
    "deep_cross": (lambda: zoo.deep_cross(6, 5), (np.arange(4), np.arange(4) % 5,
                                                  np.array([0, 1, 1, 0], np.float32)),
                   lambda m, u, i, label: zoo.click_loss(m(u, i), label)),
    "conv_autoencoder": (zoo.conv_autoencoder,
                         (_RNG.standard_normal((2, 1, 8, 8)).astype(np.float32),),
                         lambda m, x: zoo.mse_loss(m(x), x)),
    "sequence_tagger": (lambda: zoo.sequence_tagger(8, 8, 8, width=16),
                        synthetic.sequence_task("sort", 3, length=8, seed=1), _xent),
    "gcn": (zoo.gcn, (_RNG.standard_normal((10, 16)).astype(np.float32),
                      _RNG.integers(0, 3, 10)),
            lambda m, x, y: F.cross_entropy(m(zoo.normalized_adjacency(np.ones((10, 10)) -
                                                                       np.eye(10)), x), y)),
    "vae": (zoo.vae, (_RNG.standard_normal((4, 64)).astype(np.float32),),
            lambda m, x: zoo.vae_loss(*(lambda r: (r[0], x, r[1], r[2]))(m(x)))),
    "neural_cf": (lambda: zoo.neural_cf(6, 5), (np.arange(4), np.arange(4) % 5,
                                                np.array([0, 1, 1, 0], np.float32)),
                  lambda m, u, i, label: zoo.click_loss(m(u, i), label)),
    "dlrm": (lambda: zoo.dlrm((6, 5, 5), dim=4),
             ([np.arange(4)[:, None], np.arange(4)[:, None] % 5,
               np.array([[0, 1], [2, 2], [4, 3], [1, 1]])], np.array([0, 1, 1, 0], np.float32)),
             lambda m, bags, label: zoo.click_loss(m(bags), label)),
    "lstm_classifier": (lambda: zoo.lstm_classifier(5, 4, layers=2),
                        (_RNG.integers(0, 5, (3, 6)), _RNG.integers(0, 4, 3)), _xent),
    "bilstm_tagger": (lambda: zoo.bilstm_tagger(4, 2, 4, 4),
                      synthetic.repeat_tagging(3, length=5, vocab=4, seed=2),
                      lambda m, x, n, y: zoo.sequence_loss(m(x, n), y, n)),
    "gru_seq2seq": (lambda: zoo.gru_seq2seq(5, 4, 4),
                    synthetic.sequence_task("reverse", 3, length=4, vocab=5, seed=2),
                    lambda m, x, y: zoo.sequence_loss(m(x, y), y)),
    "gat": (lambda: zoo.gat(16, 4, 3, dropout=0.1),
            (_RNG.standard_normal((10, 16)).astype(np.float32), _RNG.integers(0, 3, 10)),
            lambda m, x, y: F.cross_entropy(m(zoo.attention_mask(np.ones((10, 10))), x), y)),
    "deepfm": (lambda: zoo.deepfm((6, 5), dim=4), (np.arange(4), np.arange(4) % 5,
                                                  np.array([0, 1, 1, 0], np.float32)),
               lambda m, u, i, label: zoo.click_loss(m([u, i]), label)),
}


@pytest.mark.exhaustive  # compiles most of the model kernels (minutes here)
@pytest.mark.parametrize("name", sorted(_JIT_CASES))
def test_zoo_training_step_same_bits_on_jit_and_interpreter(name):
    make, inputs, loss_of = _JIT_CASES[name]
    ref = _bits_of_a_step("interp", make, inputs, loss_of)
    got = _bits_of_a_step("jit", make, inputs, loss_of)
    assert len(ref) == len(got)
    for a, b in zip(ref, got):
        assert a.tobytes() == b.tobytes()


def test_dlrm_on_click_logs():
    c = synthetic.click_logs(256, seed=1)
    nn.manual_seed(0)
    model = zoo.dlrm((200, 100, 100), dim=8)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    p = float(c["label"].mean())
    entropy = -(p * np.log(p) + (1 - p) * np.log(1 - p))
    bags = [c["user"][:, None], c["item"][:, None], c["history"]]
    loss = lambda: zoo.click_loss(model(bags), c["label"])  # noqa: E731
    _falls(_train(model, loss, opt, 6), entropy)


def test_dlrm_with_dense_features_has_one_logit_per_row():
    nn.manual_seed(0)
    model = zoo.dlrm((10, 7), dim=4, n_dense=3)
    with tilepy.backend("interp"):
        out = model([np.array([[1, 2], [9, 9]]), np.array([[6], [0]])], np.ones((2, 3), np.float32))
    assert out.shape == (2,) and np.all(np.isfinite(out.data))
    assert model.top[0].in_features == 4 + 3  # the bottom vector and 3 pair dots


def test_lstm_classifier_recalls_the_first_token():
    """As the GRU's test: the label is the first of 6 tokens, the rest filler."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 32)
    x = np.concatenate([y[:, None], np.full((32, 5), 4)], axis=1)
    nn.manual_seed(0)
    model = zoo.lstm_classifier(vocab=5, classes=4)
    opt = optim.Adam(model.parameters(), lr=2e-2)
    _falls(_train(model, lambda: F.cross_entropy(model(x), y), opt, 6), np.log(4))
    assert np.all(np.abs(model.embed.weight.grad[:4]).sum(axis=1) > 0)


def test_bilstm_tagger_on_repeat_tagging():
    x, lengths, y = synthetic.repeat_tagging(8, length=6, vocab=4, seed=0)
    assert y[0].tolist() == [int(lengths[0] > t and (
        (t > 0 and x[0, t] == x[0, t - 1]) or (t + 1 < lengths[0] and x[0, t] == x[0, t + 1])))
        for t in range(6)]
    nn.manual_seed(0)
    model = zoo.bilstm_tagger(4, 2, embed=8, hidden=8)
    opt = optim.Adam(model.parameters(), lr=3e-2)
    loss = lambda: zoo.sequence_loss(model(x, lengths), y, lengths)  # noqa: E731
    p = float(y[np.arange(6)[None, :] < lengths[:, None]].mean())
    _falls(_train(model, loss, opt, 6), -(p * np.log(p) + (1 - p) * np.log(1 - p)))
    with tilepy.backend("interp"):  # a token past its sequence's length changes nothing
        x2 = x.copy()
        x2[lengths < 6, -1] = 3 - x2[lengths < 6, -1]
        same = model(x2, lengths).numpy()
        np.testing.assert_array_equal(same, model(x, lengths).numpy())


def test_gru_seq2seq_on_reversal():
    x, y = synthetic.sequence_task("reverse", 8, length=5, vocab=5, seed=0)
    nn.manual_seed(0)
    model = zoo.gru_seq2seq(5, embed=8, hidden=16)
    opt = optim.Adam(model.parameters(), lr=3e-2)
    loss = lambda: zoo.sequence_loss(model(x, y), y)  # noqa: E731
    _falls(_train(model, loss, opt, 5), np.log(5))
    with tilepy.backend("interp"):
        assert model.generate(x[:2], 5).shape == (2, 5)


def test_gat_on_random_graph():
    g = synthetic.random_graph(n_nodes=80, p_in=0.15, p_out=0.01, seed=0)
    mask, train = zoo.attention_mask(g["adjacency"]), g["train_mask"]
    nn.manual_seed(0)
    model = zoo.gat(16, 8, 3, heads=2, dropout=0.0)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    idx = np.flatnonzero(train)

    def loss():
        return F.cross_entropy(gather_rows(model(mask, g["features"]), idx), g["labels"][idx])
    _falls(_train(model, loss, opt, 6), np.log(3))
    with tilepy.backend("interp"):  # two layers: node 0 sees its 2-hop neighbourhood only
        near = (g["adjacency"] + np.eye(80)) @ (g["adjacency"] + np.eye(80))
        far = np.flatnonzero(near[0] == 0)
        assert len(far) > 40
        x2 = g["features"].copy()
        x2[far] += 1.0
        np.testing.assert_array_equal(model(mask, x2).numpy()[0],
                                      model(mask, g["features"]).numpy()[0])


def test_deepfm_on_click_logs():
    c = synthetic.click_logs(256, seed=1)
    nn.manual_seed(0)
    model = zoo.deepfm((200, 100), dim=8)
    opt = optim.Adam(model.parameters(), lr=3e-2)
    p = float(c["label"].mean())
    entropy = -(p * np.log(p) + (1 - p) * np.log(1 - p))
    loss = lambda: zoo.click_loss(model([c["user"], c["item"]]), c["label"])  # noqa: E731
    _falls(_train(model, loss, opt, 6), entropy)


def test_every_zoo_model_has_a_training_recipe():
    from tilepy.models.zoo.recipes import RECIPES

    helpers = {"attention_mask", "click_loss", "mean_adjacency", "mse_loss",
               "normalized_adjacency", "sequence_loss", "vae_loss"}
    assert set(RECIPES) == set(zoo.__all__) - helpers
    assert len(RECIPES) >= 30


def test_train_runs_a_recipe_and_reports_against_its_target():
    pytest.importorskip("sklearn")
    from tilepy.models.zoo import train

    with tilepy.backend("interp"):
        r = train.train("softmax_regression", epochs=30, progress=False)
    assert r["steps"] == 30 and r["metric"] == "test accuracy" and r["target"] == 0.9
    assert r["value"] > 0.8 and r["met"] == (r["value"] >= 0.9)
    assert "softmax_regression: test accuracy" in train._report(r, lower=False)
