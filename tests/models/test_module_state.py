"""Every module the issue lists (interpreter): a state_dict loaded into a module built from
another seed gives the same outputs (BatchNorm's running statistics included); another
model's checkpoint is refused with the keys named and nothing changed; a wrong input shape
names the layer on one line and both shapes."""

import re

import numpy as np
import pytest

import tilepy
from tilepy.models import nn
from tilepy.models.errors import ModelError

F32 = np.float32
_IDS = np.array([[1, 4, 2], [0, 0, 3]])


def _mha(m, x):
    return m(x, x, x)[0]


def _rnn(m, x):
    return m(x)[0]


# name -> (constructor, call, good input, wrong input, the shape the error must name)
CASES = {
    "Linear": (lambda: nn.Linear(4, 3), None, (2, 4), (2, 5), r"\(\.\.\., 4\); got \(2, 5\)"),
    "Conv2d": (lambda: nn.Conv2d(2, 3, 3, padding=1, groups=1), None, (1, 2, 4, 4),
               (1, 3, 4, 4), r"\(N, 2, H, W\); got \(1, 3, 4, 4\)"),
    "BatchNorm2d": (lambda: nn.BatchNorm2d(2), None, (3, 2, 2, 2), (3, 4, 2, 2),
                    r"\(N, 2, \.\.\.\); got \(3, 4, 2, 2\)"),
    "LayerNorm": (lambda: nn.LayerNorm(4), None, (2, 4), (2, 5), r"got \(2, 5\)"),
    "RMSNorm": (lambda: nn.RMSNorm(4), None, (2, 4), (2, 5), r"got \(2, 5\)"),
    "Embedding": (lambda: nn.Embedding(5, 3), None, _IDS, None, None),
    "EmbeddingBag": (lambda: nn.EmbeddingBag(5, 3), None, _IDS, None, None),
    "MultiheadAttention": (lambda: nn.MultiheadAttention(4, 2, batch_first=True), _mha,
                           (2, 3, 4), (2, 3, 6), r"\(N, L, E\) with E=4; got \(2, 3, 6\)"),
    "TransformerBlock": (lambda: nn.TransformerBlock(4, 2, 8), None, (2, 3, 4), (2, 3, 5),
                         r"\(N, T, 4\); got \(2, 3, 5\)"),
    "LSTM": (lambda: nn.LSTM(4, 3, num_layers=2), _rnn, (2, 1, 4), (2, 1, 5),
             r"input_size=4; got \(2, 1, 5\)"),
    "GRU": (lambda: nn.GRU(4, 3, bidirectional=True), _rnn, (2, 1, 4), (2, 1, 5),
            r"input_size=4; got \(2, 1, 5\)"),
    "Sequential": (lambda: nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Dropout(0.5),
                                         nn.Linear(3, 2)), None, (2, 4), (2, 5),
                   r"Linear\(in_features=4.*got \(2, 5\)"),
}


@pytest.fixture(autouse=True)
def interp():
    with tilepy.backend("interp"):
        yield


def _input(spec):
    if isinstance(spec, np.ndarray):
        return spec
    return np.random.default_rng(7).standard_normal(spec).astype(F32)


def _run(name, m, x):
    call = CASES[name][1]
    return (call(m, x) if call else m(x)).data


@pytest.mark.parametrize("name", sorted(CASES))
def test_state_dict_round_trip_gives_the_same_outputs(name):
    make, _, good, _, _ = CASES[name]
    nn.manual_seed(1)
    a = make()
    if name == "BatchNorm2d":  # running statistics away from their initial values
        a(np.random.default_rng(3).standard_normal(good).astype(F32) * 3 + 1)
    b = make()
    rng = np.random.default_rng(2)
    b.load_state_dict({k: (rng.standard_normal(v.shape) + 2).astype(v.dtype)  # away from
                       for k, v in b.state_dict().items()})  # a's (norms start at 1, 0)
    x = _input(good)
    a.eval()
    b.eval()
    assert not np.array_equal(_run(name, a, x), _run(name, b, x))
    b.load_state_dict(a.state_dict())
    assert np.array_equal(_run(name, a, x), _run(name, b, x))
    assert list(a.state_dict()) == list(b.state_dict())


@pytest.mark.parametrize("name", sorted(CASES))
def test_another_models_checkpoint_is_refused_before_anything_changes(name):
    make = CASES[name][0]
    nn.manual_seed(1)
    m = make()
    before = {k: v.copy() for k, v in m.state_dict().items()}
    other = {"head.weight": np.zeros((3, 7), F32), "head.bias": np.zeros(3, F32)}
    with pytest.raises(ModelError, match=r"does not match the model \(missing keys .*"
                                         r"unexpected keys \['head.weight', 'head.bias'\]"):
        m.load_state_dict(other)
    for k, v in m.state_dict().items():
        assert np.array_equal(v, before[k])
    wrong = {k: np.zeros((v.shape[0] + 1,) + v.shape[1:], v.dtype) for k, v in before.items()}
    with pytest.raises(ModelError, match=r"has shape \(\d+.*in the checkpoint but \(\d+"):
        m.load_state_dict(wrong)


@pytest.mark.parametrize("name", sorted(n for n in CASES if CASES[n][3] is not None))
def test_a_wrong_input_shape_names_the_layer_on_one_line_and_both_shapes(name):
    make, _, _, bad, shapes = CASES[name]
    with pytest.raises(ModelError, match=shapes) as info:
        _run(name, make(), _input(bad))
    first = str(info.value).splitlines()[0]
    assert __file__.rsplit("/", 1)[1] in first and re.search("expected (input|query)", first)
    assert "got" in first  # the layer, the expected and the actual shape on one line
