"""The format table agrees with ml_dtypes and rejects unknown names helpfully."""

import ml_dtypes
import numpy as np
import pytest

from tilepy.precision import FORMATS, UnknownFormatError, get_format


@pytest.mark.parametrize("name", [n for n, f in FORMATS.items() if f.is_float])
def test_float_rows_match_ml_dtypes(name):
    f = FORMATS[name]
    fi = ml_dtypes.finfo(f.np_dtype)
    assert f.max_finite == float(fi.max)
    assert f.min_normal == float(fi.smallest_normal)
    assert f.exp_bits == fi.nexp and f.man_bits == fi.nmant
    # the bias reproduces the smallest normal: 2**(1 - bias) (e8m0 has no subnormals: 2**-bias)
    first = 0 if name == "float8_e8m0fnu" else 1
    assert f.min_normal == 2.0 ** (first - f.bias)


def test_aliases_and_dtypes():
    assert get_format("bf16") is FORMATS["bfloat16"]
    assert get_format(np.float32) is FORMATS["float32"]
    assert get_format(ml_dtypes.float8_e4m3fn).storage == np.uint8
    assert FORMATS["int8"].min_value == -128


def test_unknown_name_lists_known():
    with pytest.raises(UnknownFormatError, match="float8_e4m3fn"):
        get_format("float7")
