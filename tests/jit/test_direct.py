"""Exact mode's direct gemm operand (jit/direct.py): a gemm reads A's tile where it lies in
global memory when the tile is wholly inside A, with the interpreter's bits; the copy stays
for edge tiles, for B, and wherever the tile is read elsewhere."""

import numpy as np

import tilepy.jit as jit
from tests.jit.oracle import assert_same_bits
from tests.jit.test_fast_kloop import epilogue_gemm
from tilepy.interpreter import run as interp_run
from tilepy.kernels import gemm

DIRECT = "the tile lies inside A: no copy"


def test_exact_gemm_reads_inside_a_tiles_where_they_lie_same_bits():
    """Shapes with whole and edge tiles along M and K (and one that is all edge): the
    direct reads and the copies meet in one launch; a read-only A types with the tile."""
    func = gemm(64, 64, 32, "float32", "float32").func
    k = jit.compile(func)
    assert k.source.count(DIRECT) == 1  # A only: B's tile keeps its copy
    assert "_a0 = _src" in k.source  # the register block reads the chosen array
    rng = np.random.default_rng(4)
    for M, N, K, frozen in [(130, 70, 100, False), (64, 64, 32, True), (1, 97, 5, False)]:
        a = rng.standard_normal((M, K)).astype(np.float32)
        b = rng.standard_normal((K, N)).astype(np.float32)
        a.flags.writeable = not frozen
        want, got = np.zeros((M, N), np.float32), np.full((M, N), np.nan, np.float32)
        sizes = {"M": M, "N": N, "K": K}
        interp_run(func, {"A": a, "B": b, "C": want}, sizes)
        k({"A": a, "B": b, "C": got}, sizes)
        assert_same_bits(want, got, f"gemm {M}x{N}x{K}")


def test_a_tile_read_after_the_loop_keeps_its_copy():
    """The epilogue kernel copies the A tile the k loop left to `Last`: the tile must hold
    it, so the gemm reads the copy (py tier: the same source, no Numba compile)."""
    func = epilogue_gemm(32, 16, 8, False, False)
    assert DIRECT not in jit.source(func)
    rng = np.random.default_rng(9)
    M, N, K = 40, 20, 24  # K a whole number of tiles: the last tile lies inside A
    arrays = {"A": rng.standard_normal((M, K)).astype(np.float32),
              "B": rng.standard_normal((K, N)).astype(np.float32),
              "C": np.zeros((M, N), np.float32), "Last": np.zeros((M, 8), np.float32)}
    want = {n: x.copy() for n, x in arrays.items()}
    interp_run(func, want, {"M": M, "N": N, "K": K})
    jit.run(func, arrays, {"M": M, "N": N, "K": K}, tier="py")
    for n in ("C", "Last"):
        assert_same_bits(want[n], arrays[n], n)
