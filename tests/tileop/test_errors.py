"""@tile_op errors: each is a TilepyError that names this file and the offending line, shows
the line with a caret under the construct, and gives a hint."""
# ruff: noqa: F821  (i, j are the outputs' index names: free in a tile op body by design)

import os

import numpy as np
import pytest

import tilepy
import tilepy.language as T
from tests.tileop import ops
from tilepy import Tensor, tile_op
from tilepy.errors import ArgumentError, TilepyError, TileSyntaxError, TileTypeError

M, N, K = T.symbolic("M"), T.symbolic("N"), T.symbolic("K")
P = T.symbolic("P")
SOURCE = open(__file__).read().splitlines()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def line_of(marker: str) -> int:
    hits = [n + 1 for n, text in enumerate(SOURCE) if text.endswith("# " + marker)]
    assert len(hits) == 1, marker
    return hits[0]


def check(err: TilepyError, marker: str, col_text: str, *words: str) -> None:
    """The message names this file and the marker's line, shows that line, and puts the
    caret under `col_text`; it says each of `words` and has a hint."""
    n = line_of(marker)
    msg = str(err)
    assert f"{__file__}:{n}:" in msg, msg
    lines = msg.splitlines()
    shown = [k for k, text in enumerate(lines) if text.strip() == SOURCE[n - 1].strip()]
    assert shown, msg
    caret = lines[shown[0] + 1]
    src = lines[shown[0]]
    assert caret.strip() == "^" and src[caret.index("^"):].startswith(col_text), msg
    for w in words:
        assert w in msg, msg
    assert "hint: " in msg and os.path.join(ROOT, "tilepy") not in msg


def test_unsupported_statement():
    with pytest.raises(TileSyntaxError) as e:
        @tile_op
        def bad(a: Tensor[M, K]) -> Tensor[M]:
            for _q in range(3):  # MARK-for
                pass
            return a[i, 0]
    check(e.value, "MARK-for", "for _q", "For statements are not supported in a tile op")


def test_tile_statement_in_a_body():
    with pytest.raises(TileSyntaxError) as e:
        @tile_op
        def bad(a: Tensor[M, K]) -> Tensor[M, K]:
            return T.copy(a, a)  # MARK-copy
    check(e.value, "MARK-copy", "T.copy", "T.copy cannot be used in a tile op")


def test_an_index_never_bound():
    with pytest.raises(TileSyntaxError) as e:
        @tile_op
        def bad(a: Tensor[M, K]) -> Tensor[M]:
            return sum(a[i, q] for k in range(K))  # MARK-q
    check(e.value, "MARK-q", "q]", "'q' is never bound", "indices here: i, k")


def test_a_size_never_bound_in_the_output():
    with pytest.raises(TileSyntaxError) as e:
        @tile_op
        def bad(a: Tensor[M, K]) -> Tensor[M, P]:  # MARK-P
            return a[i, 0]
    check(e.value, "MARK-P", "Tensor[M, P]", "the size P is never bound")


def test_a_size_never_bound_in_a_range():
    with pytest.raises(TileSyntaxError) as e:
        @tile_op
        def bad(a: Tensor[M, K]) -> Tensor[M]:
            return sum(a[i, 0] for k in range(P))  # MARK-range
    check(e.value, "MARK-range", "P)", "the size P is never bound")


def test_an_index_of_the_wrong_size():
    with pytest.raises(TileTypeError) as e:
        @tile_op
        def bad(a: Tensor[M, K], b: Tensor[K, N]) -> Tensor[M, N]:
            return sum(a[k, i] * b[k, j] for k in range(K))  # MARK-swap
    check(e.value, "MARK-swap", "a[k, i]", "the index k runs over K, but dimension 0 of a "
          "has size M")


def test_an_output_using_an_index_it_lacks():
    with pytest.raises(TileSyntaxError) as e:
        @tile_op
        def bad(a: Tensor[M, K]) -> (Tensor[M, K], Tensor[M]):
            return a[i, j], a[i, j]  # MARK-rank
    check(e.value, "MARK-rank", "a[i, j]", "output 1 has the indices i; its expression uses j")


def test_a_generator_outside_a_reduction():
    with pytest.raises(TileSyntaxError) as e:
        @tile_op
        def bad(a: Tensor[M, K]) -> Tensor[M]:
            return any(a[i, k] > 0 for k in range(K))  # MARK-any
    check(e.value, "MARK-any", "(a[i, k] > 0 for", "only allowed as the argument of sum")


def test_shape_mismatch_at_the_call():
    a, b = np.zeros((4, 5), np.float32), np.zeros((6, 3), np.float32)
    with pytest.raises(ArgumentError) as e:
        ops.matmul(a, b)  # MARK-call
    check(e.value, "MARK-call", "ops.matmul", "K = 6 in dimension 0", "bound K = 5")


def test_shape_mismatch_in_a_graph():
    def f(x, w):
        return ops.matmul(x, w)  # MARK-graph

    with pytest.raises(ArgumentError) as e:
        tilepy.compile(f)(np.zeros((4, 5), np.float32), np.zeros((6, 3), np.float32))
    check(e.value, "MARK-graph", "return", "argument b has 6 in dimension 0")


def test_unknown_tile_name():
    with pytest.raises(TileTypeError, match="tiles names 'z', which is not an index of this"):
        @tile_op(tiles={"z": 8})
        def bad(a: Tensor[M, K]) -> Tensor[M, K]:
            return a[i, j]


def test_python_operators_on_graph_values():
    def f(x, w):
        return ops.matmul(x, w) + 1.0  # MARK-plus

    with pytest.raises(TileTypeError) as e:
        tilepy.compile(f)(np.zeros((4, 5), np.float32), np.zeros((5, 3), np.float32))
    check(e.value, "MARK-plus", "return", "is a graph value: Python operators")
