"""Printer and parser: every node prints, and parse(format_func(f)) == f, locs included."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import strategies as S
from tests.ir import examples
from tilepy.errors import NOLOC, Loc, ParseError
from tilepy.ir.expr import Buffer, Call, Const, Load, Var, full_region
from tilepy.ir.hashing import structural_equal
from tilepy.ir.ops import CASTS, OPS, Op
from tilepy.ir.parser import parse
from tilepy.ir.printer import format_diff, format_expr, format_func
from tilepy.ir.stmt import Launch, Let, PrimFunc, Store, walk
from tilepy.ir.types import Scope, dtype


def roundtrip(f: PrimFunc) -> PrimFunc:
    text = format_func(f)
    g = parse(text)
    assert g == f
    assert structural_equal(g, f)
    assert format_func(g) == text
    return g


def stmt_locs(f: PrimFunc) -> list[Loc]:
    return [f.loc] + [s.loc for s in walk(f.body)]


@pytest.mark.parametrize("name", sorted(examples.ALL))
def test_examples_roundtrip_with_locs(name):
    f = examples.ALL[name]()
    g = roundtrip(f)
    assert stmt_locs(g) == stmt_locs(f)
    assert any(loc.line for loc in stmt_locs(f))


@given(S.programs())
def test_generated_programs_roundtrip(f):
    roundtrip(f)


def test_locs_false_prints_no_comments_and_parses_without_locs():
    f = examples.matmul()
    text = format_func(f, locs=False)
    assert "#" not in text
    g = parse(text)
    assert g == f
    assert set(stmt_locs(g)) == {NOLOC}


def test_loc_comment_shape():
    text = format_func(examples.matmul())
    lines = text.splitlines()
    assert lines[4].startswith("def matmul(") and lines[4].endswith("# matmul.py:11")
    assert lines[5].endswith("threads=128) as (bx, by):  # matmul.py:12:4")


# ---------------------------------------------------------------- every op prints and parses

_X = Var("x", dtype("float32"))
_I = Var("i")
_B = Var("p", dtype("bool"))


def _sample_args(op: Op):
    """Operands of a dtype the op's type rule accepts."""
    row = OPS[op]
    for cands in ((_X,) * row.arity, (_I,) * row.arity, (_B,) * row.arity,
                  (_B, _X, _X)):
        if len(cands) != row.arity:
            continue
        try:
            return S.call(op, *cands)
        except Exception:  # noqa: BLE001 - try the next operand dtype
            continue
    raise AssertionError(f"no operand dtype fits {op}")


def _expr_func(e) -> PrimFunc:
    """A one-store program around an expression, with x, i, p bound as sizes."""
    out = Buffer("out", (S.c(1),), e.dtype)
    launch = Launch((S.c(1),), (Var("bx"),), (1,), (Store(out, (S.c(0),), e),))
    return PrimFunc("f", (out,), (_X, _I, _B), (launch,))


@pytest.mark.parametrize("op", [op for op in Op if op not in CASTS], ids=str)
def test_every_op_roundtrips(op):
    e = _sample_args(op)
    assert format_expr(e)
    roundtrip(_expr_func(e))


@pytest.mark.parametrize("op", CASTS, ids=str)
@pytest.mark.parametrize("target", ["float16", "int32", "float8_e4m3fn"])
def test_casts_roundtrip(op, target):
    e = Call(op, (_X,), dtype(target))
    roundtrip(_expr_func(e))


def test_precedence_is_preserved():
    x, y, z = Var("x", dtype("float32")), Var("y", dtype("float32")), Var("z", dtype("float32"))
    sub, mul, pow_ = (lambda a, b: S.call(Op.SUB, a, b), lambda a, b: S.call(Op.MUL, a, b),
                      lambda a, b: S.call(Op.POW, a, b))
    cases = {
        sub(x, sub(y, z)): "x - (y - z)",
        sub(sub(x, y), z): "x - y - z",
        mul(sub(x, y), z): "(x - y) * z",
        pow_(pow_(x, y), z): "(x ** y) ** z",
        pow_(S.c(-2.0, "float32"), x): "(-2.0) ** x",
        S.call(Op.NEG, S.call(Op.NEG, x)): "-(-x)",
        S.call(Op.NEG, S.c(2.0, "float32")): "T.neg(2.0)",
    }
    for e, text in cases.items():
        assert format_expr(e) == text
        assert _parse_expr(text, {"x": x, "y": y, "z": z}) == e


def _parse_expr(text: str, env: dict[str, Var]):
    sizes = "\n".join(f'{n} = T.dynamic("{n}", "{v.dtype.name}")' for n, v in env.items())
    src = (f"{sizes}\n@T.prim_func\ndef f(o: T.Tensor((1,), \"float32\")):\n"
           f"    with T.Kernel(1) as bx:\n        o[0] = {text}\n")
    return parse(src).body[0].body[0].value


_LEAVES = {dtype(n): [Var(f"v_{n}", dtype(n))] for n in
           ("float32", "float16", "int32", "int8", "uint16", "bool", "float64")}


@given(S.scalar_exprs(_LEAVES, depth=5))
def test_random_expressions_roundtrip(e):
    env = {v.name: v for vs in _LEAVES.values() for v in vs}
    back = _parse_expr(format_expr(e), env)
    assert structural_equal(back, e), format_expr(e)


@pytest.mark.parametrize("value,dt,text", [
    (1, "int32", "1"), (-3, "int32", "-3"), (5, "int64", "T.int64(5)"),
    (1.5, "float32", "1.5"), (-0.0, "float32", "-0.0"), (0.1, "float16", "T.float16(0.1)"),
    (math.inf, "float32", 'T.float32("inf")'), (-math.inf, "bfloat16", 'T.bfloat16("-inf")'),
    (True, "bool", "True"), (7, "uint8", "T.uint8(7)"),
])
def test_literals(value, dt, text):
    e = Const(value, dtype(dt))
    assert format_expr(e) == text
    back = _parse_expr(text, {})
    assert structural_equal(back, e)


def test_nan_literal_roundtrips_structurally():
    e = Const(math.nan, dtype("float32"))
    assert format_expr(e) == 'T.float32("nan")'
    assert structural_equal(_parse_expr(format_expr(e), {}), e)


def test_views_are_declared_before_use():
    f = examples.kitchen_sink()
    text = format_func(f)
    decl = text.index('X_rows = T.Tensor((N // 4, 4), "float32", X.data)')
    assert decl < text.index("T.atomic_add(X_rows[")
    assert 'sh2 = T.alloc_buffer((4, 4), "float32", scope="shared", data=sh.data)' in text


def test_scalar_buffer_load_and_store_print_empty_index():
    v = Buffer("acc", (), dtype("float32"), Scope.VAR)
    assert format_expr(Load(v, ())) == "acc[()]"
    assert format_expr(full_region(v)) == "acc"


# ---------------------------------------------------------------- parse errors


def _error(text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse(text, filename="<bad ir>")
    return info.value


GOOD = format_func(examples.copy_kernel(), locs=False)


def test_syntax_error_has_line():
    err = _error(GOOD.replace("T.copy(S,", "T.copy(S,,"))
    assert err.loc.file == "<bad ir>"
    assert err.loc.line == 8


def test_unknown_name_points_at_it():
    err = _error(GOOD.replace("bx * 32:bx * 32 + 32], S)", "bz * 32:bz * 32 + 32], S)"))
    assert "unknown name 'bz'" in err.message
    assert err.loc.line == 7
    line = GOOD.splitlines()[6]
    assert err.loc.col == line.index("bx * 32")
    assert "^" in str(err)  # the text line is shown with a caret


def test_non_integer_threads_is_a_parse_error():
    err = _error(GOOD.replace("threads=256", "threads=256.5"))
    assert err.loc.line == 5
    assert "expected a literal int or tuple; got '256.5'" in err.message


def test_bad_dtype_and_wrong_operand_types():
    err = _error(GOOD.replace('"bfloat16"', '"bfloat17"'))
    assert "unknown dtype 'bfloat17'" in err.message
    err = _error(GOOD.replace("(N + 31) // 32", "(N + 31.0) // 32"))
    assert "int32, float32" in err.message
    assert (err.loc.line, err.loc.col) == (5, GOOD.splitlines()[4].index("N + 31"))


@given(st.integers(0, 40))
def test_program_family_is_deterministic(seed):
    assert structural_equal(S.program(seed), S.program(seed))


def test_top_level_let_roundtrips():
    n, blocks, bx = Var("n"), Var("blocks"), Var("bx")
    out = Buffer("out", (n,), dtype("float32"))
    launch = Launch((blocks,), (bx,), (32,), (Store(out, (bx,), S.c(1.0, "float32")),))
    f = PrimFunc("f", (out,), (n,), (Let(blocks, S.ceildiv(n, 4)), launch))
    roundtrip(f)
    text = format_func(f)
    assert "    blocks = (n + 3) // 4\n    with T.Kernel(blocks, threads=32) as bx:" in text


def test_format_diff_shows_what_changed():
    a, b = examples.matmul(), examples.matmul(stages=2)
    d = format_diff(a, b)
    assert "-        for k in T.Pipelined((K + 31) // 32, num_stages=3):" in d
    assert "+        for k in T.Pipelined((K + 31) // 32, num_stages=2):" in d
    assert format_diff(a, examples.matmul()) == ""
