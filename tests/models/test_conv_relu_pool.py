"""Conv2d, ReLU, MaxPool2d in a Sequential run as one op (F.conv2d_relu_maxpool: the ReLU
in conv2d_padded's store, its mask in the tiled pool's argmax): the three ops' bits forward
and backward, no ReLU launch either way, the three ops where the windows do not tile the
conv's output, the JIT's bits, and a captured step's replay."""

import numpy as np
import pytest

import tilepy
from tilepy.models import Tensor, capture, nn, optim
from tilepy.models import kops as K
from tilepy.models.kernels import pool as P
from tilepy.models.kernels.launch import launch
from tilepy.models.nn import functional as F
from tilepy.models.nn import padded


def _block(pool_stride=None, seed=0):
    nn.manual_seed(seed)
    block = nn.Sequential(nn.Conv2d(2, 5, 3, padding=1), nn.ReLU(),
                          nn.MaxPool2d(2, pool_stride))
    block[0].bias.data[1] = -20.0  # a plane of zeros after the ReLU: every window masked
    return block


def _input(shape, seed=1):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    x[0, 0, :3, :3] = -4.0  # windows whose maximum is 0 in other planes too
    return x


def _run(block, x, fused: bool, names: list, monkeypatch):
    def spy(kernel, *arrays):
        names.append(kernel.func.name)
        return launch(kernel, *arrays)
    for module in (F, K, padded):  # the launches of the three ops
        monkeypatch.setattr(module, "launch", spy)
    t = Tensor(x.copy(), requires_grad=True)
    y = block(t) if fused else block[2](block[1](block[0](t)))
    g = np.random.default_rng(2).standard_normal(y.shape).astype(np.float32)
    g.reshape(-1)[::3] = -0.0
    block.zero_grad()
    (y * Tensor(g)).sum().backward()
    return [y.data, t.grad, block[0].weight.grad, block[0].bias.grad]


@pytest.mark.parametrize("shape", [(3, 2, 6, 4), (2, 2, 5, 4)])  # 5 rows: not tiled
def test_the_fused_block_gives_the_three_ops_bits(shape, monkeypatch):
    block, x = _block(), _input(shape)
    with tilepy.backend("interp"):
        fused_names, plain_names = [], []
        got = _run(block, x, True, fused_names, monkeypatch)
        want = _run(block, x, False, plain_names, monkeypatch)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.tobytes() == b.tobytes()
    assert float(got[0].min()) == 0.0 and (got[0][:, 1] == 0).all()
    # the ReLU's two launches (the binary kernel) left out where the windows tile
    assert "conv2d_padded" in fused_names and "row_reduce" in fused_names
    assert len(plain_names) - len(fused_names) == (0 if shape[2] % 2 else 2)
    assert plain_names.count("binary") - fused_names.count("binary") == len(plain_names) - \
        len(fused_names)


def test_a_pool_whose_stride_is_not_its_window_is_not_fused(monkeypatch):
    used = []
    monkeypatch.setattr(F, "conv2d_relu_maxpool", lambda *a, **k: used.append(a))
    block, x = _block(pool_stride=1), _input((1, 2, 4, 4))
    with tilepy.backend("interp"):
        y = block(Tensor(x))
    assert not used and y.shape == (1, 5, 3, 3)


def test_the_jit_fused_conv_and_masked_pool_give_the_interpreters_bits():
    rng = np.random.default_rng(3)
    # 11 filters: conv2d_padded's 16-row tiles (the compile its other JIT test makes)
    xp = padded.pad(_input((4, 6, 6, 6), 4), 2)
    w, b = rng.standard_normal((11, 6, 5, 5)).astype(np.float32), np.zeros(11, np.float32)
    b[2] = -50.0
    got = padded.conv(xp, w, b, 1, (6, 6), relu=True)
    with tilepy.backend("interp"):
        want = padded.conv(xp, w, b, 1, (6, 6), relu=True)
        plain = padded.conv(xp, w, b, 1, (6, 6))
    assert got.tobytes() == want.tobytes()
    assert want.tobytes() == np.where(plain > 0, plain, np.float32(0)).tobytes()
    assert (want[:, 2] == 0).all() and (want > 0).any()


@pytest.mark.exhaustive  # one more JIT compile (the tiled max pool's forward)
def test_the_jit_masked_pool_gives_the_interpreters_bits():
    y = np.maximum(_input((3, 4, 6, 6), 5), 0)
    S = np.array([2, 2, 0, 1, 1], np.int32)
    runs = []
    for be in ("jit", "interp"):
        out, arg = np.empty((3, 4, 3, 3), np.float32), np.empty((3, 4, 3, 3), np.int32)
        with tilepy.backend(be):
            launch(P.pool2d_tiled_fwd(kind="max", dtype="float32"), y, S, out, arg)
        runs.append((out.tobytes(), arg.tobytes()))
    assert runs[0] == runs[1] and (arg == -1).any() and (arg >= 0).any()


def test_a_captured_step_of_the_fused_block_replays_the_eager_bits():
    rng = np.random.default_rng(6)
    data = [(_input((4, 2, 4, 4), i), rng.integers(0, 3, 4).astype(np.int32))
            for i in range(4)]
    runs = []
    with tilepy.backend("interp"):
        for captured in (False, True):
            model = nn.Sequential(*_block(), nn.Flatten(), nn.Linear(20, 3))
            opt = optim.SGD(model.parameters(), 0.1)

            def step(x, y, model=model, opt=opt):
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                return loss
            run = capture(step) if captured else step
            losses = [run(x, y).data.copy() for x, y in data]
            runs.append([*losses, *(p.data.copy() for p in model.parameters())])
    assert run.replays == 1
    assert all(a.tobytes() == b.tobytes() for a, b in zip(*runs))
