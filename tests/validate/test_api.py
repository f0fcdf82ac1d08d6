"""tilepy.validate's interface on data made here: errors, assert_matches, the CLI, reports."""

import os
import subprocess
import sys

import numpy as np
import pytest

import tilepy
import tilepy.validation.api
from tilepy.errors import MismatchError, ValidationError
from tilepy.testing import assert_matches
from tilepy.validation.models import round_mantissa

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "gpu")


def _tf32_gemm(seed=0, m=48, k=256, n=40):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    out = (round_mantissa(a, 10) @ round_mantissa(b, 10)).astype(np.float32)
    return a, b, out


def test_a_simulated_tf32_output_is_classified_as_tf32():
    a, b, out = _tf32_gemm()
    rep = tilepy.validate(out, "gemm", (a, b), accumulate="tf32")
    assert rep.passed, str(rep)
    assert rep.stats.summary.startswith("consistent with tf32, not with fp32")


def test_assert_matches_names_the_model_that_fits_better():
    a, b, out = _tf32_gemm()
    with pytest.raises(MismatchError) as info:
        assert_matches(out, "gemm", {"a": a, "b": b}, accumulate="fp32")
    msg = str(info.value)
    assert "test_api.py" in msg and "statistical tier: FAIL" in msg
    assert "hint: the output fits tf32, not the configured fp32" in msg
    assert "worst elements" in msg


def test_a_zeroed_tile_is_named_by_its_tile_coordinates():
    a, b, out = _tf32_gemm()
    bad = out.copy()
    bad[16:32, 0:16] = 0
    rep = tilepy.validate(bad, "gemm", (a, b), accumulate="tf32", tile=(16, 16))
    assert not rep.sound_passed
    assert {w["tile"] for w in rep.worst(5)} == {(1, 0)}


def test_mistakes_raise_validation_errors_at_the_callers_line():
    a, b, out = _tf32_gemm()
    with pytest.raises(ValidationError, match="unknown op 'gemmm'") as info:
        tilepy.validate(out, "gemmm", (a, b))
    assert "test_api.py" in str(info.value)
    with pytest.raises(ValidationError, match="unknown accumulation model 'tf33'"):
        tilepy.validate(out, "gemm", (a, b), accumulate="tf33")
    with pytest.raises(ValidationError, match="needs input"):
        tilepy.validate(out, "gemm", {"a": a})
    with pytest.raises(ValidationError, match=r"shape \(40, 48\), expected \(48, 40\)"):
        tilepy.validate(out.T, "gemm", (a, b))


def test_report_text_and_html():
    a, b, out = _tf32_gemm()
    rep = tilepy.validate(out, "gemm", (a, b), accumulate="tf32")
    text = str(rep)
    assert text.startswith("validate gemm (48, 40) -> float32: PASS")
    assert "error/bound histogram" in text and "mean bias" in text
    assert rep._repr_html_().startswith("<div><b>validate gemm</b>: PASS")
    assert rep.ulps.shape == out.shape and 0 < rep.max_ratio < 1


def test_cli_validate_exit_status():
    path = os.path.join(DATA, "gemm_fp32_tf32on.npz")
    cmd = [sys.executable, "-m", "tilepy.cli", "validate", path]
    ok = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "consistent with tf32, not with fp32" in ok.stdout
    bad = subprocess.run(cmd + ["--accumulate", "fp32"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 1 and "statistical tier: FAIL" in bad.stdout
    typo = subprocess.run(cmd + ["--accumulate", "tf33"], capture_output=True, text=True,
                          timeout=120)
    assert typo.returncode == 2 and typo.stdout == ""
    assert typo.stderr == ("tilepy: unknown accumulation model 'tf33' (use one of fp32, "
                           "tf32, fp16, bf16, fast, promote, exact)\n")


def test_the_float32_reference_path_keeps_the_verdicts_of_the_float64_one():
    """Large gemms take a float32 BLAS reference and a Cauchy-Schwarz bound refined where
    it decides (reference="float32" forces that path here)."""
    a, b, out = _tf32_gemm(seed=3)
    exact = tilepy.validate(out, "gemm", (a, b), accumulate="tf32", reference="float64")
    bound64 = exact.bound
    rng = np.random.default_rng(1)
    bad = out.astype(np.float64)
    idx = rng.choice(out.size, 40, replace=False)
    sign = rng.choice([-1.0, 1.0], 40)
    bad.flat[idx[:20]] = exact.exact.flat[idx[:20]] + sign[:20] * 0.5 * bound64.flat[idx[:20]]
    bad.flat[idx[20:]] = exact.exact.flat[idx[20:]] + sign[20:] * 2.0 * bound64.flat[idx[20:]]
    bad = bad.astype(np.float32)
    r64 = tilepy.validate(bad, "gemm", (a, b), accumulate="tf32", reference="float64")
    r32 = tilepy.validate(bad, "gemm", (a, b), accumulate="tf32", reference="float32")
    assert set(np.flatnonzero(r64.flagged)) == set(idx[20:])
    assert set(np.flatnonzero(r32.flagged)) == set(idx[20:])
    assert (r32.bound >= bound64).all()


def test_plot_draws_a_heat_map():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    a, b, out = _tf32_gemm()
    ax = tilepy.validate(out, "gemm", (a, b), accumulate="tf32").plot()
    assert ax.get_title() == "gemm: PASS"
    assert ax.images[0].get_array().shape == out.shape


def test_plot_without_matplotlib_says_how_to_install_it(monkeypatch):
    import sys as _sys

    monkeypatch.setitem(_sys.modules, "matplotlib", None)
    monkeypatch.setitem(_sys.modules, "matplotlib.pyplot", None)
    a, b, out = _tf32_gemm()
    rep = tilepy.validate(out, "gemm", (a, b), accumulate="tf32")
    with pytest.raises(ValidationError, match="needs matplotlib") as info:
        rep.plot()
    assert "pip install 'tilepy-runtime[viz]'" in str(info.value)


def test_a_tilepy_kernel_as_the_reference():
    from tilepy.kernels import softmax, vector_add
    from tilepy.validation.rowops import softmax_exact

    x = (np.random.default_rng(0).standard_normal((16, 300)) * 3).astype(np.float32)
    out = softmax_exact(x.astype(np.float64)).astype(np.float32)
    with tilepy.backend("interp"):
        mine = softmax(8, 256)(x)
    rep = tilepy.validate(out, softmax(8, 256), (x,))
    assert rep.passed and "kernel softmax" in [f.name for f in rep.stats.fits]
    assert tilepy.validate(mine, softmax(8, 256), (x,)).stats.fits[-1].ratio == 0
    a, b = np.ones(300, np.float32), np.full(300, 2, np.float32)
    with pytest.raises(ValidationError, match="no bound is derived for the kernel"):
        tilepy.validate(a + b, vector_add(128), (a, b))
    rep = tilepy.validate(a + b + np.float32(1e-6), vector_add(128), (a, b), atol=1e-5)
    assert rep.sound_passed and rep.notes == ["sound tier: the given atol/rtol, not a derived "
                                              "bound"]


def test_the_probabilistic_sqrt_k_bound_is_tighter_and_fails_only_under_nearest():
    a, b, out = _tf32_gemm(seed=4, k=1024)
    exact = (a.astype(np.float64) @ b.astype(np.float64))
    fp32 = (a @ b)
    rep = tilepy.validate(fp32, "gemm", (a, b))
    assert rep.stats.prob_over == 0 and rep.stats.passed
    prob = tilepy.validation.api._prepare(fp32, "gemm", (a, b), {})[3].prob_bound
    assert (prob < 0.2 * rep.bound).all()  # sqrt(K) against K growth
    bad = (exact + 0.5 * (prob + rep.bound) * np.sign(exact)).astype(np.float32)
    soft = tilepy.validate(bad, "gemm", (a, b))
    strict = tilepy.validate(bad, "gemm", (a, b), rounding="nearest")
    assert soft.sound_passed and soft.stats.prob_over > 0
    assert not strict.stats.passed and strict.stats.prob_over > 0


def test_batched_nan_and_empty_outputs():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5, 7)).astype(np.float32)
    b, b3 = (rng.standard_normal(s).astype(np.float32) for s in ((7, 4), (3, 7, 4)))
    assert tilepy.validate(a @ b, "gemm", (a, b)).passed
    assert tilepy.validate(a @ b3, "gemm", (a, b3)).passed
    bad = a @ b
    bad[1, 2, 3] = np.nan
    rep = tilepy.validate(bad, "gemm", (a, b))
    assert not rep.sound_passed and rep.max_ratio == np.inf
    assert rep.worst(1)[0]["index"] == (1, 2, 3)
    x, y = np.zeros((0, 5), np.float32), np.zeros((5, 3), np.float32)
    assert tilepy.validate(x @ y, "gemm", (x, y)).passed


def test_softmax_along_another_axis():
    from tilepy.validation.rowops import softmax_exact

    x = np.random.default_rng(0).standard_normal((6, 40, 5)).astype(np.float32)
    y = np.moveaxis(softmax_exact(np.moveaxis(x, 1, -1).astype(np.float64)), -1, 1)
    y = y.astype(np.float32)
    assert tilepy.validate(y, "softmax", (x,), dim=1).passed
    assert not tilepy.validate(y, "softmax", (x,)).sound_passed
