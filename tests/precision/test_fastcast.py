"""`cast`'s Numba path for large float32 arrays (precision/fastcast.py): the same bits as
ml_dtypes and as cast's numpy path, when Numba takes over, and its kernels' disk cache."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from tests.precision.cases import edge_f32, ml_cast, random_f32, same_bits
from tilepy.precision import cast, fastcast, get_format, rounding

FAST = sorted(rounding._FAST_FORMATS)
RANDOM = random_f32(1 << 18, seed=11)


def _both_paths(monkeypatch, x, fmt, saturate):
    monkeypatch.setattr(rounding, "_use_numba", lambda n: False)
    slow = cast(x, fmt, saturate=saturate)
    calls = []
    monkeypatch.setattr(rounding, "_use_numba", lambda n: calls.append(n) or True)
    fast = cast(x, fmt, saturate=saturate)
    assert calls == [x.size]
    return slow, fast


@pytest.mark.parametrize("fmt", FAST)
def test_numba_path_gives_ml_dtypes_bits(monkeypatch, fmt):
    # every code value, ties, their float32 neighbours, NaNs, infs, subnormals, random bits
    x = np.concatenate([edge_f32(fmt), RANDOM])
    f = get_format(fmt)
    for saturate in (False, True):
        slow, fast = _both_paths(monkeypatch, x, fmt, saturate)
        assert fast.dtype == slow.dtype == f.np_dtype and fast.shape == x.shape
        assert same_bits(fast, slow), (fmt, saturate)
        if not saturate:
            assert same_bits(fast, ml_cast(x, fmt))
    sat = cast(np.float32([np.inf, -np.inf]), fmt, saturate=True).astype(np.float32)
    top = np.float32(f.max_finite)
    assert np.array_equal(sat, [top, -top if f.has_sign else np.nan], equal_nan=True)


def test_numba_path_keeps_shape_and_takes_strided_input(monkeypatch):
    x = RANDOM[: 2 * 3 * 4096].reshape(2, 3, 4096)[:, ::2, ::-1]  # not contiguous
    slow, fast = _both_paths(monkeypatch, x, "float8_e5m2", False)
    assert fast.shape == (2, 2, 4096) and same_bits(fast, slow)


def test_numba_takes_over_once_it_runs_or_paid_for_its_start(monkeypatch):
    big = rounding._FAST_MIN
    assert not rounding._use_numba(big - 1)
    assert rounding._use_numba(big)  # this test process runs Numba
    monkeypatch.delitem(sys.modules, "numba")
    monkeypatch.setattr(rounding, "_slow_elements", 0)
    for _ in range(rounding._START_BUDGET // big):
        assert not rounding._use_numba(big)
    assert not rounding._use_numba(big - 1)  # small casts never count
    assert rounding._use_numba(big)


def test_other_threads_keep_ml_dtypes():
    got = []
    t = threading.Thread(target=lambda: got.append(rounding._use_numba(1 << 20)))
    t.start()
    t.join()
    assert got == [False] and rounding._use_numba(1 << 20)


def test_small_and_first_casts_do_not_start_numba():
    code = ("import sys, numpy as np; from tilepy.precision import cast; "
            "x = np.ones(1 << 16, np.float32); cast(x, 'float8_e4m3fn'); "
            "cast(x[:100], 'bfloat16'); print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False"]


def test_a_fresh_process_loads_the_kernel_from_disk(tmp_path):
    env = dict(os.environ, TILEPY_CACHE_DIR=str(tmp_path))
    code = ("import numpy as np; from tilepy.precision import fastcast, get_format; "
            "x = np.float32([1.0625, -3e38, np.nan]); "
            "c = fastcast.encode_f32(x, get_format('float4_e2m1fn'), True); "
            "s = fastcast._kernel('float4_e2m1fn').stats; "
            "print(c.tolist(), sum(s.cache_hits.values()), sum(s.cache_misses.values()))")
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True).stdout.split("]")
            for _ in range(2)]
    assert runs[0][0] == runs[1][0] == "[2, 15, 8"  # 1.0, -max, NaN -> -0 (no NaN in fp4)
    assert runs[0][1].split() == ["0", "1"] and runs[1][1].split() == ["1", "0"]
    assert len(list((tmp_path / "precision").glob("cast_float4_e2m1fn_*.py"))) == 1


def test_an_unwritable_cache_folder_still_casts(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("TILEPY_CACHE_DIR", str(blocker))
    fastcast._kernel.cache_clear()
    try:
        x = RANDOM[:4096]
        got = fastcast.encode_f32(x, get_format("float8_e4m3fnuz"), False)
    finally:
        fastcast._kernel.cache_clear()
    assert same_bits(got, ml_cast(x, "float8_e4m3fnuz"))
