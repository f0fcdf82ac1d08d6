"""tilepy.autotune: grid, random and model-guided search over a factory's configs, the
SQLite cache (shared by processes, rebuilt when corrupt), compiles in worker processes, and
exact mode's promise that the tuned kernel gives the untuned kernel's bits."""

import os
import random
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

import tilepy
import tilepy.language as T
from tilepy.errors import TuneError
from tilepy.ir.analysis import count
from tilepy.kernels.gemm import gemm
from tilepy.profiling.roofline import Roofline
from tilepy.tuning import cache, space, tuner
from tilepy.tuning.cache import TuneCacheWarning

ROOF = Roofline(100.0, 10.0, "test", "test")


@tilepy.jit(out_idx=[-1])
def affine(block=8, bias=1.0):
    N = T.symbolic("N")

    @T.prim_func
    def affine(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block)) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = X[bx * block + i] * 2.0 + bias

    return affine


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "tune.sqlite"
    monkeypatch.setattr(cache, "default_path", lambda: path)
    monkeypatch.setattr("tilepy.profiling.roofline.machine_roofline", lambda: ROOF)
    return path


X40 = np.arange(40, dtype=np.float32)


def test_grid_search_measures_every_config_and_runs_the_fastest(db):
    k = tilepy.autotune(configs={"block": [4, 8, 16]})(affine)()
    r = k.tune(X40)
    assert [c for c, _ in r.tried] == [{"block": 4}, {"block": 8}, {"block": 16}]
    assert r.seconds == min(s for _, s in r.tried) > 0
    assert r.config == min(r.tried, key=lambda t: t[1])[0] and not r.cached
    assert space.blocks(r.kernel.func, {"N": 40}) == -(-40 // r.config["block"])
    assert np.array_equal(k(X40), X40 * 2 + 1)


def test_the_cache_answers_a_new_tuner_and_a_new_shape_or_dtype_tunes_again(db, monkeypatch):
    first = tilepy.autotune(configs={"block": [4, 8]})(affine)().tune(X40)
    measured = []
    real = tuner._measure
    monkeypatch.setattr(tuner, "_measure", lambda *a: measured.append(1) or real(*a))
    again = tilepy.autotune(configs={"block": [4, 8]})(affine)().tune(X40)
    assert again.cached and again.config == first.config and not measured
    assert again.key == first.key
    with tilepy.backend("interp", sanitize=False):  # an option at its default: the same key
        assert tilepy.autotune(configs={"block": [4, 8]})(affine)().tune(X40).cached
    other = tilepy.autotune(configs={"block": [4, 8]})(affine)().tune(X40[:24].copy())
    assert not other.cached and len(measured) == 2 and other.key != first.key
    with tilepy.backend("py"):  # another backend: another key
        assert tilepy.autotune(configs={"block": [4, 8]})(affine)().tune(X40).key != first.key
    bias2 = tilepy.autotune(configs={"block": [4, 8]})(affine)(bias=2.0).tune(X40)
    assert bias2.key != first.key  # the factory's build-time arguments are in the key


def test_key_names_the_sizes_that_decide_when_to_tune_again(db):
    k = tilepy.autotune(configs=[{"block_M": 16}, {"block_M": 32}], key=["N", "K"])(gemm)(
        in_dtype="float32", block_N=16, block_K=8)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((24, 8), dtype=np.float32), np.ones((8, 16), np.float32)
    first = k.tune(a, b)
    taller = k.tune(np.ones((40, 8), np.float32), b)  # M changed; N and K did not
    assert taller.cached and taller.key == first.key
    wider = k.tune(a, np.ones((8, 24), np.float32))
    assert not wider.cached
    bucket = tilepy.autotune(configs={"block": [4, 8]}, key=lambda x: x.size > 32)(affine)()
    assert not bucket.tune(X40).cached
    assert bucket.tune(np.ones(48, np.float32)).cached  # the same bucket: tuned once
    assert not bucket.tune(np.ones(16, np.float32)).cached


def test_random_search_measures_a_seeded_sample_of_budget_configs(db):
    configs = [{"block": b} for b in (2, 4, 8, 16, 32)]
    r = tilepy.autotune(configs=configs, search="random", budget=2, seed=3, cache=False)(
        affine)().tune(X40)
    assert [c for c, _ in r.tried] == random.Random(3).sample(configs, 2)


def test_model_search_measures_the_best_predicted_configs_from_the_ir_counts(db):
    r = tilepy.autotune(configs={"block": [1, 8, 64]}, search="model", budget=1,
                        cache=False)(affine)().tune(X40)
    assert set(r.predicted) == {space.label({"block": b}) for b in (1, 8, 64)}
    best = min(r.predicted, key=r.predicted.get)
    assert [space.label(c) for c, _ in r.tried] == [best]
    kern = affine(8)  # the prediction is the documented formula over count()
    c = count(kern.func, {"N": 40})
    want = max(c.flops / 100e9, c.global_bytes / 10e9) + 5 * space.BLOCK_COST["interp"]
    assert r.predicted[space.label({"block": 8})] == pytest.approx(want)
    # block 1 launches 40 blocks, block 64 one: the fixed cost per block ranks them
    assert r.predicted['{"block": 1}'] > r.predicted['{"block": 8}'] > r.predicted[
        '{"block": 64}']


@pytest.mark.parametrize("backend", ["interp", "py"])
def test_exact_mode_tuned_gemm_gives_the_untuned_bits(db, backend):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((40, 72), dtype=np.float32)
    b = rng.standard_normal((72, 36), dtype=np.float32)
    configs = [{"block_M": 16, "block_N": 16, "block_K": 8},
               {"block_M": 32, "block_N": 64, "block_K": 32}]
    with tilepy.backend(backend):
        small, large = (gemm(in_dtype="float32", **c)(a, b) for c in configs)
        untuned = gemm(in_dtype="float32")(a, b)
        tuned = tilepy.autotune(configs=configs, cache=False)(gemm)(in_dtype="float32")
        got = tuned(a, b)
    bits = untuned.view(np.uint32)
    assert np.array_equal(small.view(np.uint32), bits)
    assert np.array_equal(large.view(np.uint32), bits)
    assert np.array_equal(got.view(np.uint32), bits)


def test_a_corrupt_cache_file_is_moved_aside_with_a_warning_and_rebuilt(db):
    db.write_bytes(b"this is not an SQLite database " * 64)
    with pytest.warns(TuneCacheWarning, match="could not be read"):
        r = tilepy.autotune(configs={"block": [8]})(affine)().tune(X40)
    aside = [p for p in db.parent.iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"this is not")
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM tuned").fetchone()[0] == 1
    con.close()
    assert cache.load(r.key)["config"] == {"block": 8}


def test_a_malformed_page_inside_a_valid_cache_file_is_caught_too(db):
    for i in range(100):
        cache.save(f"k{i}", {"block": i}, 0.1, [[{"block": i}, 0.1]] * 20, {"x": "y" * 99})
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    data = bytearray(db.read_bytes())
    data[3 * 4096:3 * 4096 + 3000] = bytes(range(256)) * 11 + bytes(184)  # a page overwritten
    db.write_bytes(bytes(data))
    cache._checked.clear()  # as in a new process
    with pytest.warns(TuneCacheWarning, match="malformed"):
        assert cache.load("k5") is None
    assert cache.load("k5") is None and len(list(db.parent.glob("*.corrupt-*"))) == 1
    cache.save("k5", {"block": 5}, 0.1, [], {})
    assert cache.load("k5")["config"] == {"block": 5}


def test_the_cache_is_shared_across_processes_in_wal_mode(db):
    cache.save("k1", {"block": 16}, 0.5, [[{"block": 16}, 0.5]], {})
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()
    code = ("import sys; from tilepy.tuning import cache; e = cache.load('k1', sys.argv[1]); "
            "cache.save('k2', {'block': 4}, 0.25, [], {}, sys.argv[1]); print(e['config'])")
    out = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "{'block': 16}"
    assert cache.load("k2")["seconds"] == 0.25


def test_candidates_compile_in_worker_processes_on_the_jit(db, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEPY_CACHE_DIR", str(tmp_path / "cold"))  # an empty JIT disk cache
    x = np.linspace(-3, 3, 40, dtype=np.float32)
    with tilepy.backend("jit"):
        k = tilepy.autotune(configs={"block": [8, 16]}, workers=2, rep=1, cache=False)(affine)(
            bias=0.375)
        r = k.tune(x)
        got = k(x)
        again = tilepy.autotune(configs={"block": [8, 16]}, workers=2, rep=1, cache=False)(
            affine)(bias=0.375).tune(x)
    assert len(r.compiled_by) == 2 and os.getpid() not in r.compiled_by
    assert np.array_equal(got, x * np.float32(2) + np.float32(0.375))
    assert again.compiled_by == set()  # both on disk now: loaded, no worker started


def test_failing_configs_are_reported_and_bad_options_refused(db):
    r = tilepy.autotune(configs={"block": [0, 8]}, cache=False)(affine)().tune(X40)
    assert r.config == {"block": 8} and r.failed[0][0] == {"block": 0}
    with pytest.raises(TuneError, match="no config could be built.*block"):
        tilepy.autotune(configs=[{"block": 0}], cache=False)(affine)().tune(X40)
    with pytest.raises(TuneError, match='"blok": 8.*does not fit affine') as e:
        tilepy.autotune(configs=[{"blok": 8}], cache=False)(affine)().tune(X40)
    assert f"test_autotune.py:{sys._getframe().f_lineno - 1}" in str(e.value)
    assert "tuner.py" not in str(e.value) and "tilepy/" not in str(e.value)
    with pytest.raises(TuneError, match="configs is empty"):
        tilepy.autotune(configs=[])(affine)().tune(X40)
    with pytest.raises(TuneError, match="search must be one of grid, random, model") as e:
        tilepy.autotune(configs=[{}], search="bayes")
    assert f"test_autotune.py:{sys._getframe().f_lineno - 1}" in str(e.value)
    with pytest.raises(TuneError, match="budget must be a positive int"):
        tilepy.autotune(configs=[{}], budget=0)


def test_a_progress_bar_shows_when_asked_and_tqdm_is_installed(db, capfd):
    pytest.importorskip("tqdm")
    tilepy.autotune(configs={"block": [8, 16]}, progress=True, cache=False)(affine)().tune(X40)
    assert "autotune" in capfd.readouterr().err


@pytest.mark.exhaustive
def test_exact_mode_tuned_gemm_gives_the_untuned_bits_on_the_numba_jit(db):
    rng = np.random.default_rng(8)
    a = rng.standard_normal((72, 40), dtype=np.float32)
    b = rng.standard_normal((40, 56), dtype=np.float32)
    configs = [{"block_M": 32, "block_N": 32, "block_K": 16}, {"block_M": 64, "block_N": 64}]
    with tilepy.backend("jit"):
        tuned = tilepy.autotune(configs=configs, cache=False)(gemm)(in_dtype="float32")
        r = tuned.tune(a, b)
        got = tuned(a, b)
        others = [gemm(in_dtype="float32", **c)(a, b) for c in configs]
    with tilepy.backend("interp"):
        want = gemm(in_dtype="float32")(a, b).view(np.uint32)
    assert len(r.tried) == 2
    assert all(np.array_equal(x.view(np.uint32), want) for x in [got, *others])
