"""tilepy.validate on real H200 outputs (tests/data/gpu, captured by capture.py there):
no false alarm of the sound tier, accumulation models told apart, injected bugs caught."""

import glob
import json
import os

import numpy as np
import pytest

import tilepy
from tests.validate import inject
from tilepy.validation import load_case
from tilepy.validation.api import prepare

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "gpu")
CASES = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(DATA, "*.npz")))
_CHECKS = {}


def case(name):
    return load_case(os.path.join(DATA, name + ".npz"))


def checker(name):
    if name not in _CHECKS:
        out, op, inp, cfg = case(name)
        _CHECKS[name] = (out, prepare(op, inp, out.dtype, **cfg))
    return _CHECKS[name]


def test_the_captures_are_all_there():
    with open(os.path.join(DATA, "MANIFEST.json")) as fh:
        manifest = json.load(fh)
    assert sorted(c["case"] for c in manifest["cases"]) == CASES and len(CASES) == 41


@pytest.mark.parametrize("name", CASES)
def test_sound_tier_never_flags_a_gpu_output(name):
    out, op, inp, cfg = case(name)
    report = tilepy.validate(out, op, inp, **cfg)
    assert report.sound_passed, str(report)
    assert int(report.flagged.sum()) == 0
    assert 0 < report.max_ratio < 1


# (case, models the output must fit, models it must not fit)
KINDS = [
    ("gemm_fp32_tf32off", {"fp32"}, {"tf32", "tf32 (truncated inputs)"}),
    ("gemm_fp32_tf32on", {"tf32"}, {"fp32", "tf32 (truncated inputs)"}),
    ("conv2d_nchw_plain_fp32_tf32off", {"fp32"}, {"tf32"}),
    ("conv2d_nchw_s2_d2_g2_fp32_tf32off", {"fp32"}, {"tf32"}),
    # cuDNN ran these without TF32 although allowed: the outputs equal the tf32off ones
    ("conv2d_nchw_plain_fp32_tf32on", {"fp32"}, {"tf32"}),
    ("conv2d_nchw_s2_d2_g2_fp32_tf32on", {"fp32"}, {"tf32"}),
    ("scaled_mm_e4m3_fast_f32", {"fast"}, {"fp32", "promote"}),
    ("scaled_mm_e4m3_promoted_f32", {"promote"}, {"fp32", "fast"}),
    ("scaled_mm_e4m3_promoted_bf16", {"promote"}, {"fp32", "fast"}),
    ("scaled_mm_e4m3_fast_bf16", {"fast"}, {"fp32", "promote"}),
    ("sdpa_bf16_full", {"probs bfloat16"}, {"probs float32"}),
    ("softmax_bf16", {"compute float32"}, {"compute bfloat16"}),
]


@pytest.mark.parametrize("name,fits,not_fits", KINDS)
def test_accumulation_models_told_apart(name, fits, not_fits):
    out, op, inp, cfg = case(name)
    report = tilepy.validate(out, op, inp, **cfg)
    got = {f.name: f.consistent for f in report.stats.fits}
    assert {m for m in fits if got[m]} == fits, report.stats.evidence
    assert not {m for m in not_fits if got[m]}, report.stats.evidence


def test_tf32_configured_on_a_non_tf32_conv_fails_the_statistical_tier_with_the_reason():
    out, op, inp, cfg = case("conv2d_nchw_plain_fp32_tf32on")
    report = tilepy.validate(out, op, inp, **cfg)
    assert report.sound_passed and not report.stats.passed
    assert report.stats.summary.startswith("consistent with fp32, not with tf32")


def test_every_correct_gpu_output_with_its_true_model_passes_both_tiers():
    wrong_config = {"conv2d_nchw_plain_fp32_tf32on", "conv2d_nchw_s2_d2_g2_fp32_tf32on"}
    failed = [n for n in CASES if n not in wrong_config and not checker(n)[1](checker(n)[0])]
    assert failed == []


def _rates(bug, seeds, cases=None):
    caught = above = total = 0
    missed = []
    for name in cases or CASES:
        out, check = checker(name)
        exact = check(out).exact
        for seed in range(seeds):
            bad, size = inject.BUGS[bug](out, exact, np.random.default_rng(seed))
            if size <= 2:
                continue
            above += 1
            hit = not check(bad).passed
            caught += hit
            if not hit:
                missed.append((name, seed))
        total += seeds
    return caught, above, missed


@pytest.mark.parametrize("bug", sorted(inject.BUGS))
def test_injected_bugs_above_the_natural_error_are_caught(bug):
    # a "row" of a 1-D output (per-sample losses) is one element: scale_row is about 2-D
    cases = [n for n in CASES if not n.startswith("cross_entropy")] \
        if bug == "scale_row" else None
    caught, above, missed = _rates(bug, 3, cases)
    assert above > 0
    assert caught >= 0.99 * above, missed


def test_softmax_without_max_subtraction():
    """On the captured inputs (|x| <= 14) skipping the max changes a float32-compute softmax
    by at most 1 ulp in a few elements (a correct output); in the storage dtype it overflows
    (fp16) or rounds every exp (bf16): caught. On logits up to 100, float32 overflows too."""
    for name in ("softmax_bf16", "softmax_fp16", "triton_softmax_bf16", "triton_softmax_fp16"):
        out, check = checker(name)
        x = case(name)[2]["x"]
        assert check(inject.softmax_no_max(x, out.dtype, "float32")).sound_passed
        assert not check(inject.softmax_no_max(x, out.dtype, x.dtype.name)).passed, name
    x = (np.random.default_rng(0).standard_normal((8, 256)) * 30).astype(np.float32)
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    good = (e / e.sum(-1, keepdims=True)).astype(np.float32)
    bad = inject.softmax_no_max(x, np.float32, "float32")
    assert tilepy.validate(good, "softmax", (x,)).passed
    rep = tilepy.validate(bad, "softmax", (x,))
    assert not rep.sound_passed and np.isnan(bad).any()
