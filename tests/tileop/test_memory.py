"""Memory planning of op graphs: live ranges, first-fit slots in one arena, outputs written
in place of dying inputs, peak bytes checked by hand; the planned run gives the same bits."""

import numpy as np

import tilepy
from tests.tileop import ops

RNG = np.random.default_rng(5)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def chain(x, b, w):
    t0 = ops.bias_gelu(x, b)  # 64x16 float32: 4096 bytes
    t1 = ops.matmul(t0, w)  # 4096 bytes; t0 dies here but a gemm cannot overwrite it
    t2 = ops.bias_gelu(t1, b)  # element-wise, t1 dies here: in place of t1
    return t2, ops.row_sum(t2)  # 64 floats = 256 bytes, in t0's freed slot


def test_peak_bytes_by_hand():
    args = (rand(64, 16), rand(16), rand(16, 16))
    g = tilepy.compile(chain, fuse=False).trace(*args)
    p = g.memory_plan()
    slots = {s.value: (s.offset, s.size, s.in_place_of) for s in p.slots}
    assert slots == {"t0": (0, 4096, None), "t1": (4096, 4096, None),
                     "t2": (4096, 4096, "t1"), "t3": (0, 256, None)}
    assert (p.peak_bytes, p.live_bytes, p.unplanned_bytes) == (8192, 8192, 3 * 4096 + 256)
    q = g.memory_plan(in_place=False)  # t2 then takes t0's slot, t3 the next free bytes
    slots = {s.value: (s.offset, s.size) for s in q.slots}
    assert slots == {"t0": (0, 4096), "t1": (4096, 4096), "t2": (0, 4096),
                     "t3": (4096, 256)}
    assert "peak 8192 bytes" in str(p)


def test_planned_run_gives_the_unplanned_bits():
    args = (rand(64, 16), rand(16), rand(16, 16))
    planned = tilepy.compile(chain, fuse=False)
    plain = tilepy.compile(chain, fuse=False, plan=False)
    for got, want in zip(planned(*args), plain(*args)):
        assert got.tobytes() == want.tobytes()


def block(x, g1, b1, wq, wk, wv, wo, g2, b2, w1, c1, w2):
    """A transformer block's forward (one head, pre-norm, residuals)."""
    h = ops.layernorm(x, g1, b1)
    a = ops.attention2d(ops.matmul(h, wq), ops.matmul(h, wk), ops.matmul(h, wv))
    r = ops.add(x, ops.matmul(a, wo))
    f = ops.matmul(ops.bias_gelu(ops.matmul(ops.layernorm(r, g2, b2), w1), c1), w2)
    return ops.add(r, f)


def block_args(s, e, hid):
    return (rand(s, e), rand(e), rand(e), rand(e, e), rand(e, e), rand(e, e), rand(e, e),
            rand(e), rand(e), rand(e, hid), rand(hid), rand(hid, e))


def test_transformer_block_plan_cuts_peak_and_keeps_bits():
    args = block_args(16, 8, 32)
    unfused = tilepy.compile(block, fuse=False, plan=False)
    want = unfused(*args)
    for fuse in (False, True):
        c = tilepy.compile(block, fuse=fuse)
        p = c.memory_plan(*args)
        assert p.peak_bytes <= 0.7 * p.unplanned_bytes
        assert p.live_bytes <= p.peak_bytes
        assert c(*args).tobytes() == want.tobytes()
    # unfused: 12 outputs, of which 10 are 16x8 (512 bytes) and two 16x32 (2048 bytes)
    p = tilepy.compile(block, fuse=False).memory_plan(*args)
    assert p.unplanned_bytes == 10 * 512 + 2 * 2048
