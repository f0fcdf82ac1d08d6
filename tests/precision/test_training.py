"""Mixed-precision training helpers: policies and autocast, GradScaler-style loss scaling,
FP8 delayed / current scaling, and the precision-switching controller."""

import numpy as np
import pytest

from tilepy.precision import UnknownFormatError, cast
from tilepy.precision.policy import Policy, PolicyTable, autocast, current_policy
from tilepy.precision.scaling import DelayedScaling, DynamicLossScaler, current_scaling
from tilepy.precision.switching import PrecisionController, SwitchConfig, range_stats


def test_policy_names_are_normalised_and_checked():
    assert Policy("bf16", "fp32", "float").storage == "bfloat16"
    with pytest.raises(UnknownFormatError):
        Policy("bfloat17")


def test_table_lookup_order_layer_then_op_then_default():
    fp8 = Policy("float8_e4m3fn", "bfloat16", "float32")
    t = PolicyTable.preset("bf16")
    t.layers.update({"encoder.*": fp8, "encoder.0.attn": Policy()})
    assert t.lookup("matmul").storage == "bfloat16"
    assert t.lookup("softmax") == Policy()  # kept in float32 by the preset
    assert t.lookup("matmul", "encoder.3.mlp") == fp8
    assert t.lookup("matmul", "encoder.0.attn") == Policy()  # most specific pattern wins
    assert t.lookup("matmul", "decoder.1") .storage == "bfloat16"


def test_autocast_nests_and_restores():
    assert current_policy("matmul") == Policy()
    with autocast("bf16"):
        assert current_policy("matmul").compute == "bfloat16"
        with autocast(Policy("float16", "float16", "float32")):
            assert current_policy("matmul").storage == "float16"
        with autocast("fp8", enabled=False):
            assert current_policy("matmul") == Policy()
        assert current_policy("matmul").compute == "bfloat16"
    assert current_policy("matmul") == Policy()
    with pytest.raises(ValueError, match="bf16"):
        with autocast("bf32"):
            pass


def test_loss_scaler_follows_gradscaler_schedule():
    s = DynamicLossScaler(growth_interval=2000)
    assert s.scale == 65536.0
    assert s.update(found_inf=True) is False and s.scale == 32768.0
    for _ in range(1999):
        assert s.update(False)
    assert s.scale == 32768.0
    s.update(False)
    assert s.scale == 65536.0 and s.growth_tracker == 0
    for _ in range(1500):
        s.update(False)
    s.update(True)  # an overflow resets the clean-step count
    for _ in range(1999):
        s.update(False)
    assert s.scale == 32768.0 and s.skipped_steps == 2
    state = s.state_dict()
    t = DynamicLossScaler()
    t.load_state_dict(state)
    assert t.state_dict() == state


def test_loss_scaling_keeps_fp16_gradients_alive():
    g = np.float32([2e-8, -1e-7, 2e-6])  # under half float16's smallest subnormal, or near
    plain = cast(g, "float16").astype(np.float32)
    assert plain[0] == 0
    s = DynamicLossScaler()
    scaled = cast(g * np.float32(s.scale), "float16")
    (back,), found_inf = s.unscale([scaled.astype(np.float32)])
    assert not found_inf
    assert np.all(np.abs(back - g) <= np.abs(g) * 2.0**-10)
    _, found_inf = s.unscale([np.float32([1.0, np.inf])])
    assert found_inf


def test_delayed_scaling_uses_previous_amax_with_margin_and_history():
    d = DelayedScaling(margin=1, history_len=2)
    first = d(np.float32([2.0, -1.0]))
    assert first.scale_inv == 1  # the first step has no history
    assert d.scale == 448 / 2 / 2
    d(np.float32([8.0]))
    d(np.float32([1.0]))  # history [1, 8]: max 8
    assert d.scale == 448 / 8 / 2
    d(np.float32([0.5]))  # history [0.5, 1]: the 8 fell out
    assert d.scale == 448 / 1 / 2
    one = DelayedScaling(history_len=1)
    one.observe(2.0)
    assert one.scale == 224
    one.observe(0.0)
    one.observe(float("inf"))  # zero / non-finite amax keep the previous scale
    assert one.scale == 224
    recent = DelayedScaling(algo="most_recent")
    recent(np.float32([4.0]))
    recent(np.float32([1.0]))
    assert recent.scale == 448.0


def test_delayed_scaling_saturates_a_spike_instead_of_nan():
    d = DelayedScaling()
    d(np.float32([1.0]))
    out = d(np.float32([1.0, 1000.0]))  # scale 448 from the last step: 1000 * 448 clamps
    assert out.data.astype(np.float32)[1] == 448 and np.isfinite(out.dequantize()).all()


def test_current_scaling_maps_amax_to_format_max():
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 37
    t = current_scaling(x)
    y = t.dequantize()
    assert abs(np.abs(y).max() - np.abs(x).max()) <= np.abs(x).max() * 2.0**-4
    rel = np.abs(y - x) / np.maximum(np.abs(x), np.abs(x).max() * 2.0**-6)
    assert rel.max() <= 2.0**-4
    assert current_scaling(np.zeros(4)).scale_inv == 1


def test_range_stats():
    x = np.float32([1e6, np.inf, 1.0, 1e-4, 0.0, -1e-9, 2.0, 3.0])
    over, under = range_stats(x, "float8_e4m3fn")  # max 448, min normal 2^-6
    assert over == 2 / 8 and under == 2 / 8
    assert range_stats(x, "float32") == (1 / 8, 0.0)


def _run(ctrl, fracs, layer="l0"):
    return [ctrl.observe(layer, f, 0.0) for f in fracs]


def test_controller_widens_after_patience_and_narrows_after_cooldown():
    c = PrecisionController(SwitchConfig(patience=3, cooldown=5))
    got = _run(c, [0.01, 0.01, 0.0, 0.01, 0.01, 0.01])  # a clean step breaks the run
    assert got == ["float8_e4m3fn"] * 5 + ["bfloat16"]
    got = _run(c, [0.01] * 3)
    assert got[-1] == "float32"
    assert _run(c, [0.5] * 5)[-1] == "float32"  # top of the ladder
    got = _run(c, [0.0] * 5)
    assert got == ["float32"] * 4 + ["bfloat16"]
    assert [s[2:] for s in c.switches] == [("float8_e4m3fn", "bfloat16"),
                                           ("bfloat16", "float32"), ("float32", "bfloat16")]


def test_controller_dead_band_prevents_flapping():
    c = PrecisionController(SwitchConfig(patience=2, cooldown=3))
    _run(c, [0.01, 0.01])
    assert c.format("l0") == "bfloat16"
    rng = np.random.default_rng(1)
    band = rng.uniform(2e-5, 9e-4, 200)  # between narrow_below and widen_above
    assert set(_run(c, band)) == {"bfloat16"}
    assert c.format("other") == "float8_e4m3fn"  # layers are independent
    with pytest.raises(ValueError, match="dead band"):
        SwitchConfig(widen_above=1e-5, narrow_below=1e-3)


def test_controller_on_a_drifting_tensor():
    c = PrecisionController(SwitchConfig(patience=2, cooldown=4))
    rng = np.random.default_rng(2)
    formats = []
    for step in range(30):  # activations in fp8 range, 1e4x too big in steps 10..19
        scale = 1e4 if 10 <= step < 20 else 1.0
        x = rng.uniform(1, 100, 4096).astype(np.float32) * rng.choice([-1, 1], 4096) * scale
        formats.append(c.observe_tensor("mlp", x))
    assert formats[:11] == ["float8_e4m3fn"] * 11  # widened after 2 bad steps: 10, 11
    assert formats[11:23] == ["bfloat16"] * 12  # fp8 would still overflow until step 20
    assert formats[23:] == ["float8_e4m3fn"] * 7  # 4 clean steps (20..23) to narrow
    assert len(c.switches) == 2
