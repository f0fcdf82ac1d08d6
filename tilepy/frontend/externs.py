"""TileLang's inline CUDA helpers behind `T.import_source` / `T.call_extern` (the decode
helpers of `tilelang.quantize`): each known function runs as element stores whose values
come from op-table rows, so the interpreter and the JIT compute it alike. `T.address_of`
gives the pointers they take. Any other external function is refused as not portable.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable

from tilepy.errors import Loc, NotPortableError, TileSyntaxError, TileTypeError
from tilepy.frontend import builtins, exprs
from tilepy.frontend.builtins import Args
from tilepy.frontend.values import StartPoint, describe
from tilepy.ir import stmt as S
from tilepy.ir.expr import Buffer, Const, Expr, Load, Var
from tilepy.ir.ops import Op
from tilepy.ir.types import dtype as to_dtype
from tilepy.ir.types import int32

NAMES = "import_source call_extern address_of dp4a"


@dataclass(frozen=True)
class Address:
    """`T.address_of(buf[i, ...])`: a pointer into `buf` (row-major), for T.call_extern."""

    buffer: Buffer
    starts: tuple[Expr, ...]


@dataclass(frozen=True)
class Extern:
    """One external function tilepy runs: the stand-in source `tilelang.quantize` hands out
    for it, and what it builds from (translator, pointer/int arguments, loc)."""

    name: str
    expand: Callable
    summary: str

    @property
    def source(self) -> str:
        return (f"// tilepy CPU reference: {self.name} has no CUDA source here; it runs as "
                f"{self.summary} on both backends\n")


# ---------------------------------------------------------------- pointers


def _num(e):
    return e.value if isinstance(e, Const) else e


def _add(a, b, loc: Loc):
    """a + b, folded when both are known now."""
    a, b = _num(a), _num(b)
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return b if isinstance(a, int) and a == 0 else exprs.call(Op.ADD, [a, b], loc)


def _mul(a, b, loc: Loc):
    a, b = _num(a), _num(b)
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return a if b == 1 else exprs.call(Op.MUL, [a, b], loc)


def _element(addr: Address, off, loc: Loc) -> tuple[Expr, ...]:
    """The indices of the element `off` places after `addr` in its buffer's layout."""
    buf = addr.buffer
    if buf.ndim == 1:
        return (exprs.to_ir(_add(addr.starts[0], off, loc), loc, like=int32),)
    dims = []
    for d in buf.shape:
        if not isinstance(d, Const):
            raise TileTypeError(f"T.address_of({buf.name}[...]): expected a buffer whose "
                                f"shape is known when the kernel is built; got a runtime "
                                f"size", loc, hint="pass a 1-d local copy of the data")
        dims.append(int(d.value))
    flat: Expr | int = off
    stride = 1
    for s, n in zip(reversed(addr.starts), reversed(dims)):
        flat = _add(flat, _mul(s, stride, loc), loc)
        stride *= n
    idx, stride = [], 1
    for n in reversed(dims):
        if isinstance(flat, int):
            idx.append(Const(flat // stride % n, int32))
        else:
            idx.append(exprs.call(Op.MOD, [exprs.call(Op.FLOORDIV, [flat, stride], loc), n],
                                  loc))
        stride *= n
    return tuple(reversed(idx))


def _byte(addr: Address, k, loc: Loc) -> Expr:
    """Byte `k` (an int or int32 expression) of the memory at `addr`, little-endian, as an
    int32 in 0..255."""
    dt = addr.buffer.dtype
    size = dt.bits // 8
    if not dt.is_int or dt.bits % 8:
        raise TileTypeError(f"a decode helper reads packed bytes: expected an integer buffer "
                            f"(int8, uint8, int32...); got {addr.buffer.name} of {dt}", loc,
                            hint="pass T.address_of of the packed storage buffer")
    k = _num(k)
    if isinstance(k, int):
        at, shift = k // size, k % size * 8
    else:
        at = k if size == 1 else exprs.call(Op.FLOORDIV, [k, size], loc)
        shift = exprs.call(Op.MUL, [exprs.call(Op.MOD, [k, size], loc), 8], loc)
    word = exprs.cast(Load(addr.buffer, _element(addr, at, loc)), int32, loc)
    if size > 1:
        word = exprs.call(Op.SHR, [word, shift], loc)
    elif dt.name == "uint8":
        return word  # already 0..255
    return exprs.call(Op.BITAND, [word, 0xFF], loc)


def _store(addr: Address, off, value: Expr, loc: Loc) -> S.Store:
    return S.Store(addr.buffer, _element(addr, off, loc), value, loc=loc)


def _out(addr, dt: str, name: str, loc: Loc) -> Address:
    if not isinstance(addr, Address) or addr.buffer.dtype != to_dtype(dt):
        got = (f"{addr.buffer.name} of {addr.buffer.dtype}" if isinstance(addr, Address)
               else describe(addr))
        raise TileTypeError(f"{name} writes {dt} values: expected T.address_of an element "
                            f"of a {dt} buffer as its second argument; got {got}", loc)
    return addr


def _count(args: list, default: int, name: str, loc: Loc) -> int:
    n = args[2] if len(args) > 2 else default
    if isinstance(n, Const):
        n = n.value
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise TileTypeError(f"{name}: expected its count N (third argument) to be a positive "
                            f"int known when the kernel is built; got {describe(n)}", loc)
    return n


def _pointers(args: list, name: str, loc: Loc) -> Address:
    if len(args) < 2 or len(args) > 3 or not isinstance(args[0], Address):
        raise TileTypeError(f"{name} takes (T.address_of(packed[...]), T.address_of(out[...]) "
                            f"[, N]); got {len(args)} arguments", loc)
    return args[0]


# ---------------------------------------------------------------- the helpers


def _fp4_to_bf16_twiddling(tr, args: list, loc: Loc) -> None:
    """N groups of 4 bytes -> 8 bfloat16 each: bytes (2p, 2p + 1) of a group form the
    half-word (first << 8) | second, whose 4 twiddled fp4 values are outputs 4p..4p + 3."""
    name = "decode_fp4_to_bf16_twiddling"
    src = _pointers(args, name, loc)
    dst = _out(args[1], "bfloat16", name, loc)
    n = _count(args, 8, name, loc)
    i = Var(tr.unique("g"), int32) if n > 1 else Const(0, int32)
    body = []
    for j in range(8):
        pair = _add(_mul(i, 4, loc), 2 * (j // 4), loc)
        hi = exprs.call(Op.SHL, [_byte(src, pair, loc), 8], loc)
        half = exprs.call(Op.BITOR, [hi, _byte(src, _add(pair, 1, loc), loc)], loc)
        value = exprs.call(Op.FP4_TWIDDLED, [half, Const(j % 4, int32)], loc)
        body.append(_store(dst, _add(_mul(i, 8, loc), j, loc), value, loc))
    _emit_groups(tr, i, n, body, loc)


def _emit_groups(tr, i, n: int, body: list, loc: Loc) -> None:
    if n == 1:
        for s in body:
            tr.emit(s)
        return
    tr.emit(S.For(i, Const(0, int32), Const(n, int32), Const(1, int32), S.ForKind.SERIAL,
                  tuple(body), loc=loc))


def _i4_to_f16(signed: bool):
    """One 32-bit little-endian word -> N float16 (N even, at most 8): output 2k is the
    nibble at bit 4k, output 2k + 1 the nibble at bit 16 + 4k, minus 8 when signed."""
    name = f"decode_i4{'s' if signed else 'u'}_to_f16"

    def expand(tr, args: list, loc: Loc) -> None:
        src = _pointers(args, name, loc)
        dst = _out(args[1], "float16", name, loc)
        n = _count(args, 8, name, loc)
        if n % 2 or n > 8:
            raise TileTypeError(f"{name} decodes one 32-bit word: expected N in 2, 4, 6, 8; "
                                f"got {n}", loc)
        for k in range(n):
            bit = 4 * (k // 2) + 16 * (k % 2)
            nib = exprs.call(Op.BITAND, [exprs.call(
                Op.SHR, [_byte(src, bit // 8, loc), bit % 8], loc), 0xF], loc)
            if signed:
                nib = exprs.call(Op.SUB, [nib, 8], loc)
            tr.emit(_store(dst, k, exprs.cast(nib, to_dtype("float16"), loc), loc))

    return expand


def _i2_to_i8s(signed: bool):
    """One 32-bit little-endian word -> N int8 (N a multiple of 4, at most 16): output
    4i + b is bits 2i, 2i + 1 of byte b (the LOP3 of word >> 2i with 0x03030303), minus 2
    when signed (__vsub4 with 0x02020202)."""
    name = f"decode_i2{'s' if signed else 'u'}_to_i8s"

    def expand(tr, args: list, loc: Loc) -> None:
        src = _pointers(args, name, loc)
        dst = _out(args[1], "int8", name, loc)
        n = _count(args, 16, name, loc)
        if n % 4 or n > 16:
            raise TileTypeError(f"{name} decodes one 32-bit word: expected N in 4, 8, 12, "
                                f"16; got {n}", loc)
        for k in range(n):
            i, b = divmod(k, 4)
            crumb = exprs.call(Op.BITAND, [exprs.call(
                Op.SHR, [_byte(src, b, loc), 2 * i], loc), 3], loc)
            if signed:
                crumb = exprs.call(Op.SUB, [crumb, 2], loc)
            tr.emit(_store(dst, k, exprs.cast(crumb, to_dtype("int8"), loc), loc))

    return expand


EXTERNS: dict[str, Extern] = {e.name: e for e in (
    Extern("decode_fp4_to_bf16_twiddling", _fp4_to_bf16_twiddling,
           "the op fp4_twiddled per output"),
    Extern("decode_i4u_to_f16", _i4_to_f16(False), "nibble-to-float16 casts"),
    Extern("decode_i4s_to_f16", _i4_to_f16(True), "nibble-minus-8-to-float16 casts"),
    Extern("decode_i2u_to_i8s", _i2_to_i8s(False), "2-bit-to-int8 casts"),
    Extern("decode_i2s_to_i8s", _i2_to_i8s(True), "2-bit-minus-2-to-int8 casts"),
)}
_SOURCES = {e.source for e in EXTERNS.values()}
# SHA-256 of CUDA text that TileLang's own library hands out for helpers modelled above
# (tilelang/quantize/lop3.py's `decode_i2s_to_i8s`, which defines decode_i2s_to_i8s and
# decode_i2u_to_i8s): a kernel that brings this very text, e.g. as T.Kernel(prelude=...),
# runs the model; any other text for a modelled name stays refused.
_LIBRARY = {"52fa9eb238f441493ba7f7c6a2e8500bb67a2e0a90a9dc1d7b8e8bdc8487aa14"}


def _library_text(src: str) -> bool:
    return src in _SOURCES or hashlib.sha256(src.encode()).hexdigest() in _LIBRARY


# ---------------------------------------------------------------- handlers


def _import_source(tr, node, loc: Loc, name: str):
    src = Args(tr, node, ["source"], loc, "T.import_source").const("source")
    if not isinstance(src, str):
        raise TileTypeError(f"T.import_source expects the source text (a str); got "
                            f"{describe(src)}", loc)
    add_source(tr, src)


def add_source(tr, src: str) -> None:
    """Record CUDA text a kernel brings (T.import_source, T.Kernel(prelude=...))."""
    tr.__dict__.setdefault("extern_sources", []).append(src)


def _address_of(tr, node, loc: Loc, name: str):
    if len(node.args) != 1 or node.keywords:
        raise TileSyntaxError("T.address_of takes one element, e.g. T.address_of(buf[0])", loc)
    op = tr.operand(node.args[0])
    if not isinstance(op, StartPoint):
        raise TileTypeError(f"T.address_of expects one element of a buffer (buf[i]); got "
                            f"{describe(op)}", loc)
    return Address(op.buffer, op.starts)


def _call_extern(tr, node, loc: Loc, name: str):
    pos = [tr.expr(a) for a in node.args]
    if any(k.arg == "dtype" for k in node.keywords):  # T.call_extern(name, *args, dtype=)
        fname, args = (pos[0] if pos else None), pos[1:]
    else:  # T.call_extern(dtype, name, *args), tvm.tir's order
        fname, args = (pos[1] if len(pos) > 1 else None), pos[2:]
    if not isinstance(fname, str):
        raise TileTypeError(f"T.call_extern: expected the function's name (a str); got "
                            f"{describe(fname)}", loc)
    ext = EXTERNS.get(fname)
    foreign = [s for s in tr.__dict__.get("extern_sources", ())
               if fname + "(" in s and not _library_text(s)]
    if ext is None or foreign:
        why = "the kernel imports its own CUDA source for it" if ext else "CUDA device code"
        raise NotPortableError(
            f"not portable to the CPU reference: the external function {fname!r} "
            f"(T.call_extern; {why})", loc,
            hint="tilepy runs the decode helpers that tilelang.quantize hands out ("
                 + ", ".join(EXTERNS) + "); write other device code as a T.macro")
    ext.expand(tr, args, loc)


def _dp4a(tr, node, loc: Loc, name: str):
    """`T.dp4a(a[i], b[j], c[k])`: c[k] += the dot product of the 4 int8 values from a[i]
    and from b[j] (CUDA's __dp4a on packed bytes), in int32."""
    if len(node.args) != 3 or node.keywords:
        raise TileSyntaxError("T.dp4a takes three elements: T.dp4a(a[i], b[j], c[k])", loc)
    ops = [tr.operand(a) for a in node.args]
    if not all(isinstance(o, StartPoint) for o in ops):
        raise TileTypeError(f"T.dp4a expects elements of buffers (a[i], b[j], c[k]); got "
                            f"{', '.join(describe(o) for o in ops)}", loc)
    a, b, c = (Address(o.buffer, o.starts) for o in ops)
    if {a.buffer.dtype.name, b.buffer.dtype.name} - {"int8", "uint8"} \
            or c.buffer.dtype != int32:
        raise TileTypeError(f"T.dp4a multiplies 4 int8 pairs into an int32: expected int8 "
                            f"a and b and an int32 c; got {a.buffer.dtype}, "
                            f"{b.buffer.dtype}, {c.buffer.dtype}", loc)
    total = Load(c.buffer, _element(c, 0, loc))
    for i in range(4):
        x, y = (exprs.cast(Load(p.buffer, _element(p, i, loc)), int32, loc) for p in (a, b))
        total = exprs.call(Op.ADD, [total, exprs.call(Op.MUL, [x, y], loc)], loc)
    tr.emit(_store(c, 0, total, loc))


HANDLERS = {"import_source": _import_source, "address_of": _address_of,
            "call_extern": _call_extern, "dp4a": _dp4a}

builtins.HANDLERS.update(HANDLERS)
