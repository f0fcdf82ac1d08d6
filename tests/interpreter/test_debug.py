"""print() and breakpoint() inside kernels, and the trace hook."""

import sys

import numpy as np

from tests.interpreter import kernels as K
from tilepy.interpreter import Listener, Recorder, run


def test_print_per_block_with_lane_vectors(capsys, monkeypatch):
    monkeypatch.setattr(sys, "breakpointhook", lambda *a, **k: None)
    x = np.arange(6, dtype=np.float32)
    run(K.printing(3).func, dict(X=x, Y=np.zeros_like(x)), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[block 0] bx 0"
    assert out[1] == "[block 0] t " + str(np.array([0.0, 2.0, 4.0], np.float32))
    assert out[2] == "[block 1] bx 1"
    assert out[3] == "[block 1] t " + str(np.array([6.0, 8.0, 10.0], np.float32))


def test_breakpoint_frame_holds_block_buffers_and_scalars(monkeypatch, capsys):
    seen = []

    def hook(*args, **kwargs):
        frame = sys._getframe(1)
        loc = dict(frame.f_locals)
        seen.append((loc["bx"], loc["t"].copy(), frame.f_code.co_filename, frame.f_lineno))
        loc["t"][:] = -1.0  # buffers are views: an edit in the debugger takes effect

    monkeypatch.setattr(sys, "breakpointhook", hook)
    x = np.arange(6, dtype=np.float32)
    y = np.zeros_like(x)
    run(K.printing(3).func, dict(X=x, Y=y), {})
    assert [int(s[0]) for s in seen] == [0, 1]
    assert seen[1][1].tolist() == [3.0, 4.0, 5.0]
    assert seen[0][2] == K.__file__ and seen[0][3] == K.line_of(K.printing, "breakpoint()")
    assert y.tolist() == [-1.0] * 6


def test_recorder_counts_tiles_bytes_and_flops():
    rec = Recorder()
    M, N, Kd = 40, 32, 48  # M has an edge tile (tiles 32 x 16 x 16)
    a = np.ones((M, Kd), np.float16)
    b = np.ones((Kd, N), np.float16)
    c = np.zeros((M, N), np.float32)
    run(K.gemm(M, N, Kd, 32, 16, 16, "float16", "float32", clear=True).func,
        dict(A=a, B=b, C=c), {}, trace=rec)
    blocks = 2 * 2
    assert rec.of_kind("launch") == [("k", (2, 2))]
    assert len(rec.of_kind("block")) == blocks
    gemms = rec.of_kind("gemm")
    assert len(gemms) == blocks * 3 and {(g.m, g.n, g.k) for g in gemms} == {(32, 16, 16)}
    assert rec.flops() == 2 * 64 * 32 * 48
    loads = [e for e in rec.of_kind("load") if e.buffer == "A"]
    assert sum(e.elements for e in loads) == 2 * M * Kd  # two column blocks; edges excluded
    stores = rec.of_kind("store")
    assert sum(e.nbytes for e in stores) == M * N * 4
    assert all(e.loc.file == K.__file__ for e in stores)
    assert c.tolist() == np.full((M, N), 48.0).tolist()


def test_listener_base_is_a_no_op_and_partial_listeners_work():
    class Stores(Listener):
        def __init__(self):
            self.n = 0

        def on_store(self, event):
            self.n += event.elements

    lst = Stores()
    x = np.arange(100, dtype=np.float32)
    run(K.affine(100, 32, "float32", 1.0, 1.0).func, dict(X=x, Y=np.zeros_like(x)), {},
        trace=lst)
    assert lst.n == 100
