"""The library's convolutions against float64 within their derived bounds
(tilepy/kernels/checks.py): NHWC direct and im2col forms, NCHW forward, input gradient and
weight gradient with groups (depthwise too), strides, padding and dilation; in the
interpreter on many data, on the JIT (exact: the interpreter's bits; fast: the bound)."""

import numpy as np
import pytest

import tilepy
from tilepy.errors import ArgumentError
from tilepy.kernels import checks
from tilepy.kernels.conv_direct import Conv2d

NCHW = [  # (groups, stride, pad, dilation): plain, grouped+strided+dilated, depthwise
    (1, 1, 1, 1), (2, 2, 1, 2), (4, 1, 2, 2), (4, 3, 0, 1),
]


def _run(case, backend="interp", **options):
    with tilepy.backend(backend, **options):
        return case.kernel(*case.inputs)


def _assert_within(case, out):
    err, ratio = case.error(out)
    assert case.passes(out), f"{case.name} {case.shape}: error {err:.3g} is {ratio:.3g}x bound"


@pytest.mark.parametrize("kind", ["fwd", "dgrad", "wgrad"])
@pytest.mark.parametrize("groups, stride, pad, dil", NCHW)
def test_nchw_within_bound(kind, groups, stride, pad, dil):
    rng = np.random.default_rng([["fwd", "dgrad", "wgrad"].index(kind), groups, stride, pad, dil])
    for shape in [(2, 4, 9, 8, 8), (1, 8, 5, 11, 4)]:
        case = checks.conv_nchw_case(rng, kind, *shape, 3, 3, groups, stride, pad, dil)
        _assert_within(case, _run(case))


def test_nchw_dilation_moves_the_taps():
    # with dilation 2 the forward equals an undilated conv with a 5x5 filter whose odd
    # rows and columns are zero: a check that does not go through checks.py's reference
    rng = np.random.default_rng(3)
    case = checks.conv_nchw_case(rng, "fwd", 1, 2, 9, 9, 3, 3, 3, 1, 1, 1, 2)
    x, w, b, _ = case.inputs
    w5 = np.zeros((3, 2, 5, 5), np.float32)
    w5[:, :, ::2, ::2] = w
    wide = checks.conv_nchw_case(rng, "fwd", 1, 2, 9, 9, 3, 5, 5, 1, 1, 1, 1)
    wide.inputs = [x, w5, b, np.array([1, 1, 1], np.int32)]
    np.testing.assert_array_equal(_run(case), _run(wide))


@pytest.mark.parametrize("form", ["direct", "im2col"])
def test_nhwc_forms_within_bound(form):
    rng = np.random.default_rng(11)
    for shape, kw in [((2, 7, 9, 5, 6), dict(pad=1)), ((1, 6, 6, 70, 3), dict(pad=0)),
                      ((2, 9, 8, 3, 4), dict(pad=2, dilation=2))]:
        _assert_within(case := checks.conv_form_case(rng, *shape, form=form, **kw), _run(case))
    if form == "im2col":
        case = checks.conv_form_case(rng, 1, 9, 8, 3, 4, stride=2, pad=1, form=form)
        _assert_within(case, _run(case))


def test_direct_form_refuses_strides_with_a_hint():
    with pytest.raises(ArgumentError, match="stride 1; got 2") as err:
        Conv2d(1, 8, 8, 3, 4, stride=2, form="direct")
    assert "form='im2col'" in str(err.value) and "test_conv.py" in str(err.value)


def test_direct_form_on_the_jit_gives_the_interpreters_bits():
    rng = np.random.default_rng(5)
    case = checks.conv_form_case(rng, 2, 7, 9, 5, 6, pad=1, dilation=2)
    np.testing.assert_array_equal(_run(case, "jit"), _run(case))


# Each compile costs seconds here: the rest of the JIT's coverage runs in
# `make test-exhaustive` (bench/lib_conv.py also checks fast mode before timing it).
@pytest.mark.exhaustive
@pytest.mark.parametrize("form", ["direct", "im2col"])
def test_nhwc_forms_on_the_jit(form):
    rng = np.random.default_rng(5)
    case = checks.conv_form_case(rng, 2, 7, 9, 5, 6, pad=1, dilation=2, form=form)
    np.testing.assert_array_equal(_run(case, "jit"), _run(case))
    _assert_within(case, _run(case, "jit", fast=True))


@pytest.mark.exhaustive
def test_nchw_on_the_jit_gives_the_interpreters_bits():
    rng = np.random.default_rng(9)
    for kind in ("fwd", "dgrad", "wgrad"):
        case = checks.conv_nchw_case(rng, kind, 2, 4, 9, 8, 8, 3, 3, 2, 2, 1, 2)
        np.testing.assert_array_equal(_run(case, "jit"), _run(case))
