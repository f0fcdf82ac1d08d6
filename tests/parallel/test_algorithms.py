"""Allreduce algorithms on the local backend against their written specification."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tilepy.parallel as tp
from tests.parallel.helpers import PS, inputs, launch, same_bits
from tilepy.parallel import chunking, spec

DTYPES = [np.float32, np.float64, ml_dtypes.bfloat16]
ALGS = list(tp.ALGORITHMS)


def run_all(xs, group_size=2, repeats=1):
    def body(comm):
        return [{a: comm.allreduce(xs[comm.rank], algorithm=a, group_size=group_size)
                 for a in ALGS} for _ in range(repeats)]
    return launch(body, len(xs))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("p", PS)
def test_every_algorithm_matches_its_spec_on_every_rank(p, dtype):
    xs = inputs(p, 4 * p + 3, dtype, seed=p)  # count not divisible by p
    res = run_all(xs, repeats=2)
    for a in ALGS:
        want = spec.expected(xs, a, group_size=2)
        for rank_res in res:
            for rep in rank_res:
                assert same_bits(rep[a], want), (a, p)


def test_orders_differ_so_the_spec_tests_can_fail():
    xs = inputs(5, 40, np.float32, seed=3)  # at p = 5 the three trees differ
    outs = {a: spec.expected(xs, a) for a in ("ring", "tree", "recursive_doubling")}
    assert not same_bits(outs["ring"], outs["tree"])
    assert not same_bits(outs["tree"], outs["recursive_doubling"])


def test_known_orders_at_p4():
    xs = inputs(4, 11, np.float32, seed=9)
    pairs = (xs[0] + xs[1]) + (xs[2] + xs[3])
    for a in ("recursive_doubling", "rabenseifner", "tree", "hierarchical"):
        assert same_bits(spec.expected(xs, a, group_size=2), pairs)
    # ring: chunk c starts at rank c+1; 11 = 3+3+3+2, so element 0 is chunk 0
    got = launch(lambda c: c.allreduce(xs[c.rank], algorithm="ring"), 4)[0]
    assert same_bits(got[:3], ((xs[1][:3] + xs[2][:3]) + xs[3][:3]) + xs[0][:3])
    assert same_bits(got[9:], ((xs[0][9:] + xs[1][9:]) + xs[2][9:]) + xs[3][9:])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("p", [2, 5, 8])
def test_error_bound_against_float64(p, dtype):
    xs = inputs(p, 257, dtype, seed=p + 1)
    exact = sum(x.astype(np.float64) for x in xs)
    absum = sum(np.abs(x.astype(np.float64)) for x in xs)
    eps = float(ml_dtypes.finfo(dtype).eps)
    for a, got in run_all(xs)[0][0].items():
        err = np.abs(got.astype(np.float64) - exact)
        assert np.all(err <= (p - 1) * eps * absum), a


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_integers_exact_with_all_ops(dtype):
    p = 5
    rng = np.random.default_rng(1)
    xs = [rng.integers(-3, 4, 23).astype(dtype) for _ in range(p)]
    for op, ref in (("sum", np.sum), ("max", np.max), ("min", np.min), ("prod", np.prod)):
        want = ref(np.stack(xs), axis=0).astype(dtype)
        res = launch(lambda c, op=op: [c.allreduce(xs[c.rank], op, a) for a in ALGS], p)
        assert all(same_bits(r, want) for rank_res in res for r in rank_res), op


def test_max_min_prod_float_follow_spec():
    xs = inputs(6, 19, np.float32, seed=4, scale=1.0)
    for op in ("max", "min", "prod"):
        res = launch(lambda c, op=op: {a: c.allreduce(xs[c.rank], op, a, group_size=2)
                                        for a in ALGS}, 6)
        for a in ALGS:
            assert same_bits(res[3][a], spec.expected(xs, a, op)), (op, a)


@pytest.mark.parametrize("p", [3, 4, 7])
def test_allreduce_is_reduce_scatter_then_allgather(p):
    xs = inputs(p, 3 * p + 2, np.float32, seed=p)

    def body(comm):
        full = comm.allreduce(xs[comm.rank].reshape(-1, 1), algorithm="ring")
        part = comm.reduce_scatter(xs[comm.rank], algorithm="ring")
        counts = chunking.balanced(xs[0].size, p)
        return full, part, comm.allgatherv(part, counts), comm.allgatherv(part)

    counts = chunking.balanced(xs[0].size, p)
    offs = chunking.offsets(counts)
    for r, (full, part, gathered, gathered_nocounts) in enumerate(launch(body, p)):
        assert full.shape == (xs[0].size, 1)
        assert same_bits(part, full.reshape(-1)[offs[r]:offs[r] + counts[r]])
        assert same_bits(full.reshape(-1), gathered)
        assert same_bits(gathered, gathered_nocounts)


@given(p=st.integers(1, 9), n=st.integers(0, 40), seed=st.integers(0, 2**31),
       alg=st.sampled_from(ALGS), group=st.integers(1, 4))
def test_random_sizes_match_spec(p, n, seed, alg, group):
    xs = inputs(p, n, np.float32, seed=seed)
    res = launch(lambda c: c.allreduce(xs[c.rank], algorithm=alg, group_size=group), p)
    want = spec.expected(xs, alg, group_size=group)
    assert all(same_bits(r, want) for r in res)


def test_chunking_rules():
    assert chunking.balanced(10, 4) == [3, 3, 2, 2]
    assert chunking.balanced(2, 4) == [1, 1, 0, 0]
    assert chunking.ceil(10, 4) == [3, 3, 3, 1]
    assert chunking.ceil(5, 4) == [2, 2, 1, 0]
    assert chunking.offsets([3, 3, 2, 2]) == [0, 3, 6, 8]


def test_out_argument_and_inputs_untouched():
    xs = inputs(4, 10, np.float64, seed=2)
    copies = [x.copy() for x in xs]

    def body(comm):
        out = np.empty_like(xs[comm.rank])
        r = comm.allreduce(xs[comm.rank], out=out)
        t = comm.allreduce(xs[comm.rank], algorithm="tree", out=np.empty_like(out))
        return r is out, same_bits(out, spec.expected(xs, "ring")), t

    for is_out, ok, t in launch(body, 4):
        assert is_out and ok and same_bits(t, spec.expected(xs, "tree"))
    assert all(same_bits(a, b) for a, b in zip(xs, copies))


def test_auto_picks_by_cost_model_and_follows_that_spec():
    from tilepy.parallel.topology import Topology

    xs_small = inputs(4, 3, np.float32, seed=1)
    xs_big = inputs(4, 1 << 16, np.float32, seed=2)

    def body(comm):
        comm.topology = Topology.uniform(4, 1e-5, 1e-10, 1e-10)
        return (comm.choose_algorithm(12), comm.allreduce(xs_small[comm.rank], algorithm="auto"),
                comm.choose_algorithm(1 << 18), comm.allreduce(xs_big[comm.rank], algorithm="auto"))

    for small_alg, small, big_alg, big in launch(body, 4):
        assert small_alg == "recursive_doubling" and big_alg in ("ring", "rabenseifner")
        assert same_bits(small, spec.expected(xs_small, small_alg))
        assert same_bits(big, spec.expected(xs_big, big_alg))
