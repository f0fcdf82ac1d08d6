"""Step capture and replay (tilepy.models.capture): replayed steps give the eager steps'
bits (losses, parameters, optimiser state) on the JIT's exact mode and on the interpreter;
what re-captures (a new input shape, train/eval, a replaced parameter) and what is refused
(host reads, host-made arrays, data-dependent control flow, a dynamic loss scale, an RNN
over a packed sequence)."""

import importlib

import numpy as np
import pytest

import tilepy
from tilepy.models import Tensor, capture, nn, optim
from tilepy.models.errors import CaptureError, ModelError
from tilepy.models.optim import clip_grad_norm_
from tilepy.models.optim.lr_scheduler import CosineAnnealingLR

F = nn.functional


def _mlp(width=32):
    nn.manual_seed(0)
    return nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 10))


def _batches(n, batch=8, seed=0, features=16):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch, features)).astype(np.float32),
             rng.integers(0, 10, batch).astype(np.int32)) for _ in range(n)]


def _sgd_step(model):
    opt = optim.SGD(model.parameters(), 0.05, momentum=0.9, nesterov=True)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step, opt


def _adamw_step(model):
    opt = optim.AdamW(model.parameters(), 3e-3, weight_decay=0.1)
    sched = CosineAnnealingLR(opt, T_max=5)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        model.zero_grad()
        loss.backward()
        clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        sched.step()
        return loss
    return step, opt


def _state(model, opt):
    sd = opt.state_dict()["state"]
    return ([p.data.copy() for p in model.parameters()],
            [v.copy() for k in sorted(sd) for n, v in sorted(sd[k].items())
             if isinstance(v, np.ndarray)])


def _same_bits(a, b) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and
                                    x.tobytes() == y.tobytes() for x, y in zip(a, b))


def _eager_vs_replay(make, data):
    """(losses, params, state) of eager steps and of the captured step, and the capture."""
    runs = []
    for captured in (False, True):
        model = _mlp()
        step, opt = make(model)
        if captured:
            step = capture(step)
        losses = [step(x, y).data.copy() for x, y in data]
        runs.append((losses, *_state(model, opt)))
    return runs, step


@pytest.mark.parametrize("make", [_sgd_step, _adamw_step], ids=["sgd", "adamw_cosine_clip"])
def test_replayed_steps_give_the_eager_bits_on_the_jit(make):
    data = _batches(7)
    with tilepy.backend("jit"):
        (eager, replayed), step = _eager_vs_replay(make, data)
    assert step.replays == 4 and step.captures == 1  # 1 warm-up, 2 recorded, 4 replayed
    for a, b in zip(eager, replayed):
        assert _same_bits(a, b)
    assert len(set(float(v) for v in eager[0])) == len(data)  # the losses did change


def test_replayed_gradients_are_written_by_their_kernels_into_the_flat_buffer():
    from tilepy.models.replay_grads import bind

    data = _batches(5)
    with tilepy.backend("jit"):
        (eager, replayed), step = _eager_vs_replay(_sgd_step, data)
    for a, b in zip(eager, replayed):
        assert _same_bits(a, b)
    (graph,) = step._graphs.values()
    binds = [call.args[0] for call, _ in graph.ops if getattr(call, "func", None) is bind]
    opt = next(call.args[0] for call, _ in graph.ops if hasattr(call, "args") and call.args
               and isinstance(call.args[0], optim.SGD))
    (bucket,) = opt._buckets
    # one operation binds all six gradients, none copied: the kernels wrote the views
    assert len(binds) == 1 and len(binds[0]) == 6
    assert all(src is None for _, _, src in binds[0])
    assert all(p.grad is view for p, view in zip(bucket.params, bucket.grad_views))


def test_replayed_steps_give_the_eager_bits_on_the_interpreter():
    data = _batches(5, batch=3, features=16)
    with tilepy.backend("interp"):
        (eager, replayed), step = _eager_vs_replay(_sgd_step, data)
    assert step.replays == 2
    for a, b in zip(eager, replayed):
        assert _same_bits(a, b)


def test_returned_loss_is_a_fresh_array_each_call():
    model = _mlp()
    step = capture(_sgd_step(model)[0])
    data = _batches(6)
    out, kept = [], []
    with tilepy.backend("jit"):
        for x, y in data:
            out.append(step(x, y))
            kept.append(out[-1].data.copy())
    assert step.replays == 3
    assert all(o.data.tobytes() == k.tobytes() for o, k in zip(out, kept))
    assert len({id(o.data) for o in out}) == len(out)
    assert not out[-1].requires_grad


def test_a_new_input_shape_captures_again_and_matches_eager():
    data = _batches(4) + _batches(4, batch=5, seed=1) + _batches(2, seed=2)
    with tilepy.backend("jit"):
        (eager, replayed), step = _eager_vs_replay(_sgd_step, data)
    assert step.captures == 2 and step.replays == 4  # batch 8: 6 calls, 3 replayed; 5: 4, 1
    for a, b in zip(eager, replayed):
        assert _same_bits(a, b)


def test_train_eval_switch_and_a_replaced_parameter_invalidate_the_recording():
    model = _mlp()
    step = capture(_sgd_step(model)[0])
    data = _batches(4)
    with tilepy.backend("jit"):
        for x, y in data:
            step(x, y)
        assert step.replays == 1
        model.eval()
        step(*data[0])  # a different mode: eager again (warm-up of a new recording)
        assert step.replays == 1
        model.train()
        first = model[0]
        first.weight.data = first.weight.data.copy()  # replaced: the optimiser re-attaches it
        step(*data[1])
        assert step.replays == 1


def _refused(fn, match, batches=3):
    step = capture(fn)
    with tilepy.backend("jit"), pytest.raises(CaptureError, match=match) as info:
        for x, y in _batches(batches):
            step(x, y)
    assert "test_capture.py" in str(info.value)  # the user's line
    return info.value


def test_host_reads_are_refused():
    model = _mlp()

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        if loss.item() > 100.0:  # a NaN/overflow check on the host
            return None
        return loss
    _refused(step, r"reads a value on the host \(Tensor.item\(\)\)")


def test_arrays_made_on_the_host_each_call_are_refused():
    model = _mlp()

    def step(x, y):
        keep = Tensor((np.abs(x[:, :10]) > 0.5).astype(np.float32))  # a mask made in numpy
        return F.cross_entropy(model(x) * keep, y)
    _refused(step, r"kernel 'binary' reads an array \(argument 1, shape \(8, 10\), dtype "
                   r"float32\) made anew on the host")


def test_dropout_draws_its_keys_again_on_replay():
    data = _batches(5, batch=2)
    runs = []
    for captured in (False, True):
        model = _mlp(width=8)
        opt = optim.SGD(model.parameters(), 0.1)

        def step(x, y, model=model, opt=opt):
            loss = F.cross_entropy(F.dropout(model(x), 0.5), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        run = capture(step) if captured else step
        with tilepy.backend("interp"):
            runs.append([run(x, y).data.copy() for x, y in data] +
                        [p.data.copy() for p in model.parameters()])
    assert run.replays == 2 and _same_bits(runs[0], runs[1])


def test_data_dependent_control_flow_is_refused():
    model = _mlp()
    calls = []

    def step(x, y):
        calls.append(1)
        out = model(x)
        if len(calls) % 2:
            out = F.relu(out)
        return F.cross_entropy(out, y)
    _refused(step, r"ran different operations")


def test_a_python_number_returned_and_a_dynamic_loss_scale_are_refused():
    model = _mlp()

    def step(x, y):
        return clip_grad_norm_(model.parameters(), 1.0)  # a float from the host
    _refused(step, r"returned a float")
    mp = optim.MixedPrecision(_mlp().parameters(), optim.SGD, lr=0.1)  # scaler on

    def scaled(x, y):
        return mp.scale_loss(Tensor(x).sum())
    _refused(scaled, r"dynamic loss scale", batches=2)


def test_a_replayed_call_still_checks_its_labels():
    model = _mlp()
    step = capture(_sgd_step(model)[0])
    x, y = _batches(1)[0]
    with tilepy.backend("jit"):
        for _ in range(3):
            step(x, y)
        bad = y.copy()
        bad[0] = 10
        with pytest.raises(ModelError, match=r"labels must lie in \[0, 10\)"):
            step(x, bad)
        assert step.replays == 0


def test_a_replayed_embedding_step_sorts_and_checks_each_calls_indices():
    # the gradient's sort of positions by index is redone on replay (a repeated index sums
    # its rows in position order), and so is the indices' range check
    rng = np.random.default_rng(1)
    data = [(rng.integers(0, 5, (4, 3)), rng.integers(0, 3, 4).astype(np.int32))
            for _ in range(5)]
    runs = []
    for captured in (False, True):
        nn.manual_seed(0)
        emb, head = nn.Embedding(5, 4), nn.Linear(12, 3)
        opt = optim.SGD(list(emb.parameters()) + list(head.parameters()), 0.5)

        def step(i, y, emb=emb, head=head, opt=opt):
            loss = F.cross_entropy(head(emb(i).reshape(4, 12)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        run = capture(step) if captured else step
        with tilepy.backend("interp"):
            runs.append([run(i, y).data.copy() for i, y in data] + [emb.weight.data.copy()])
    assert run.replays == 2 and _same_bits(runs[0], runs[1])
    bad = data[0][0].copy()
    bad[1, 2] = 5
    with tilepy.backend("interp"), pytest.raises(
            ModelError, match=r"indices must lie in \[0, 5\); got values from 0 to 5") as info:
        run(bad, data[0][1])
    assert "test_capture.py" in str(info.value)


def test_an_rnn_over_a_packed_sequence_is_refused():
    nn.manual_seed(0)
    lstm = nn.LSTM(2, 3, batch_first=True)

    def step(x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(Tensor(x), lengths, batch_first=True,
                                                   enforce_sorted=False)
        return lstm(packed)[1][0].sum()
    x, lengths = np.ones((2, 3, 2), np.float32), np.array([3, 2])
    run = capture(step)
    with tilepy.backend("interp"), pytest.raises(
            CaptureError, match=r"cannot replay LSTM over a PackedSequence: its batch sizes, "
                                r"read on the host, set the rows every step updates") as info:
        for _ in range(2):
            run(x, lengths)
    assert "test_capture.py" in str(info.value) and "pad the batch" in str(info.value)


def test_the_digits_trainer_gives_the_same_model_captured_or_eager():
    pytest.importorskip("sklearn")
    pytest.importorskip("tqdm")
    from tilepy.models.zoo import digits

    runs = []
    with tilepy.backend("jit"):
        for captured in (False, True):
            model, acc, steps, _ = digits.train("mlp", epochs=1, batch=64, progress=False,
                                                captured=captured)
            runs.append(([p.data.copy() for p in model.parameters()], acc, steps))
    assert runs[0][2] == runs[1][2] == 22 and runs[0][1] == runs[1][1] > 0.5
    assert _same_bits(runs[0][0], runs[1][0])


def _two_backward_step():
    nn.manual_seed(1)
    tied, head = nn.Linear(16, 16), nn.Linear(16, 10)
    params = list(tied.parameters()) + list(head.parameters())
    opt = optim.SGD(params, 0.1)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(head(tied(F.relu(tied(Tensor(x))))), y)
        loss.backward()  # the leaves' gradients: copies
        F.cross_entropy(head(Tensor(x)), y).backward()  # head's: accumulated into
        opt.step()
        return loss
    return step, params


def test_two_backward_passes_accumulate_gradients_on_replay():
    runs = []
    for captured in (False, True):
        step, params = _two_backward_step()
        run = capture(step) if captured else step
        with tilepy.backend("jit"):
            losses = [run(x, y).data.copy() for x, y in _batches(6)]
        runs.append(losses + [p.data.copy() for p in params])
    assert _same_bits(runs[0], runs[1])


def test_fit_with_capture_gives_the_eager_history_and_parameters(monkeypatch):
    C = importlib.import_module("tilepy.models.capture")  # the module (not the function)
    from tilepy.models.data import DataLoader, TensorDataset, shapes_images
    from tilepy.models.training import fit

    replays, replay = [], C._Graph._replay
    monkeypatch.setattr(C._Graph, "_replay", lambda g: replays.append(1) or replay(g))
    x, y = shapes_images(96, classes=3, size=4, channels=1, seed=0)
    runs = []
    for captured in (False, True):
        nn.manual_seed(2)
        model = nn.Sequential(nn.Flatten(), nn.Linear(16, 12), nn.ReLU(), nn.Linear(12, 3))
        opt = optim.AdamW(model.parameters(), 0.02)
        loader = DataLoader(TensorDataset(x, y.astype(np.int32)), 16, shuffle=True, seed=0)
        with tilepy.backend("jit"):
            hist = fit(model, F.cross_entropy, opt, loader, epochs=2, progress=False,
                       clip_grad_norm=1.0, capture=captured)
        runs.append((hist.losses, [p.data.copy() for p in model.parameters()],
                     hist.epochs[-1]["train_accuracy"]))
    assert len(replays) == 9  # 12 steps: 1 warm-up, 2 recorded
    assert len(runs[0][0]) == 12 and runs[0][0] == runs[1][0]
    assert _same_bits(runs[0][1], runs[1][1]) and runs[0][2] == runs[1][2]


def test_other_arguments_are_part_of_the_signature_and_signatures_are_bounded():
    model = _mlp()
    inner, _ = _sgd_step(model)
    step = capture(lambda x, y, k: inner(x, y), max_signatures=2)
    data = _batches(4)
    with tilepy.backend("jit"):
        for x, y in data:
            step(x, y, 1)
        for x, y in data:
            step(x, y, np.float32(2.0))
        assert step.captures == 2 and step.replays == 2
        with pytest.raises(CaptureError, match=r"3 different input signatures"):
            step(*data[0], 3)


def test_another_backend_makes_another_recording():
    model = _mlp()
    step = capture(_sgd_step(model)[0])
    data = _batches(4, batch=2)
    for name in ("jit", "interp"):
        with tilepy.backend(name):
            for x, y in data:
                step(x, y)
    assert step.captures == 2 and step.replays == 2


def test_batch_norm_running_statistics_replay_on_the_interpreter():
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal((4, 1, 4, 4)).astype(np.float32),
             rng.integers(0, 10, 4).astype(np.int32)) for _ in range(5)]
    runs = []
    for captured in (False, True):
        nn.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm2d(2), nn.ReLU(),
                              nn.Flatten(), nn.Linear(32, 10))
        step, _ = _sgd_step(model)
        run = capture(step) if captured else step
        with tilepy.backend("interp"):
            losses = [run(x, y).data.copy() for x, y in data]
        runs.append(losses + [p.data.copy() for p in model.parameters()] +
                    [b.copy() for _, b in model.named_buffers()])
    assert run.replays == 2 and len(runs[0]) == 5 + 6 + 2
    assert _same_bits(runs[0], runs[1])


def _block_step():
    nn.manual_seed(0)
    block, head = nn.TransformerBlock(16, 2, 32), nn.Linear(16, 10)
    opt = optim.SGD(list(block.parameters()) + list(head.parameters()), 0.1)

    def step(x, y):
        loss = F.cross_entropy(head(block(x).mean(1)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step, block


def test_a_transformer_blocks_attention_replays_on_the_interpreter():
    # the packed self-attention's flash kernels, its copies and its packed gradient must
    # all be recorded: a host-made array anywhere in them is refused at the check
    rng = np.random.default_rng(1)
    data = [(rng.standard_normal((2, 4, 16)).astype(np.float32),
             rng.integers(0, 10, 2).astype(np.int32)) for _ in range(5)]
    runs = []
    for captured in (False, True):
        step, block = _block_step()
        run = capture(step) if captured else step
        with tilepy.backend("interp"):
            losses = [run(x, y).data.copy() for x, y in data]
        runs.append(losses + [p.data.copy() for p in block.parameters()])
    assert run.replays == 2
    assert _same_bits(runs[0], runs[1])
    assert len(set(float(v) for v in runs[0][:5])) == 5
