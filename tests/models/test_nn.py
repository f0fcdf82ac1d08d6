"""Modules: registration, state_dict round trip and mismatch errors, train/eval, and input
checks that name the layer and both shapes."""

import numpy as np
import pytest

import tilepy
from tilepy.models import Parameter, Tensor, nn
from tilepy.models.errors import ModelError
from tilepy.models.zoo import lenet5, mlp


@pytest.fixture(autouse=True)
def interp():
    with tilepy.backend("interp"):
        yield


def test_named_parameters_follow_attribute_and_sequence_names():
    model = mlp(4, (3,), 2)
    assert [(k, p.shape) for k, p in model.named_parameters()] == [
        ("0.weight", (3, 4)), ("0.bias", (3,)), ("2.weight", (2, 3)), ("2.bias", (2,))]
    assert all(isinstance(p, Parameter) and p.requires_grad for p in model.parameters())


def test_custom_module_registers_children_and_runs():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)
            self.scale = Parameter(np.ones(2, np.float32))

        def forward(self, x):
            return self.fc(x) * self.scale

    net = Net()
    assert sorted(dict(net.named_parameters())) == ["fc.bias", "fc.weight", "scale"]
    out = net(np.ones((5, 3), np.float32))
    assert out.shape == (5, 2) and out.requires_grad


def test_reassigning_a_plain_attribute_to_a_module_or_parameter_registers_it():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.shortcut = None  # an optional part, filled in later
            self.shortcut = nn.Linear(3, 3)
            self.gain = 1.0
            self.gain = Parameter(np.ones(3, np.float32))

    net = Net()
    assert isinstance(net.shortcut, nn.Linear) and isinstance(net.gain, Parameter)
    assert sorted(dict(net.named_parameters())) == ["gain", "shortcut.bias", "shortcut.weight"]
    net.shortcut = None  # and back: unregistered
    assert net.shortcut is None and sorted(dict(net.named_parameters())) == ["gain"]


def test_state_dict_round_trip_gives_the_same_outputs():
    nn.manual_seed(1)
    a = lenet5()
    nn.manual_seed(2)
    b = lenet5()
    x = np.random.default_rng(0).random((2, 1, 8, 8), dtype=np.float32)
    assert not np.array_equal(a(x).data, b(x).data)
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(a(x).data, b(x).data)


def test_load_state_dict_names_the_mismatched_key_and_shapes():
    state = mlp(64, (32,), 10).state_dict()
    with pytest.raises(ModelError, match=r"'0.weight' has shape \(32, 64\) in the "
                                         r"checkpoint but \(256, 64\) in the model"):
        mlp().load_state_dict(state, strict=False)
    with pytest.raises(ModelError, match=r"missing keys \['4.weight', '4.bias'\]"):
        mlp().load_state_dict(state)


def test_train_and_eval_reach_every_submodule():
    model = lenet5()
    model.eval()
    assert not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())


def test_wrong_input_shape_names_the_layer_and_both_shapes():
    with pytest.raises(ModelError, match=r"Linear\(in_features=64, out_features=256, "
                                         r"bias=True\): expected input of shape \(\.\.\., 64\); "
                                         r"got \(8, 10\)"):
        mlp()(np.zeros((8, 10), np.float32))
    with pytest.raises(ModelError, match=r"Conv2d\(1, 6, .*\): expected input of shape "
                                         r"\(N, 1, H, W\); got \(2, 3, 8, 8\)"):
        lenet5()(np.zeros((2, 3, 8, 8), np.float32))


def test_wrong_input_dtype_names_the_layer():
    with pytest.raises(ModelError, match=r"Linear\(.*\): expected input of dtype float32; "
                                         r"got float64 \(shape \(2, 64\)\)"):
        mlp()(np.zeros((2, 64)))


def test_error_points_at_the_callers_line():
    with pytest.raises(ModelError) as info:
        mlp()(Tensor(np.zeros((1, 3), np.float32)))
    assert info.value.loc.file == __file__


def test_profile_counts_each_kernels_launches():
    from tilepy.models.kernels.launch import profile

    model = mlp(8, (4,), 3)
    with profile() as rec:
        nn.functional.cross_entropy(model(np.ones((2, 8), np.float32)), [0, 2]).backward()
    # forward: 2 gemms, 2 bias adds (binary_rows) and relu (binary), softmax_xent;
    # backward: 3 gemms (the input needs no gradient), 2 bias sums, relu's mask (binary)
    assert {k: v[0] for k, v in rec.items()} == {
        "gemm": 5, "binary": 2, "binary_rows": 2, "softmax_xent": 1, "row_reduce": 2}
