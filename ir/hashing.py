"""Structural hashing and equality of IR: what the JIT's cache keys on.

Owns one canonical byte encoding of a node tree: every compared field, in declaration
order, floats by their exact bits (so -0.0 differs from 0.0 and NaN equals NaN), source
locations left out. It never looks at what a program means.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import struct

from tilepy.precision.formats import Format

# Bump when the encoding changes, so caches keyed on old hashes miss instead of colliding.
ENCODING_VERSION = b"tilepy-ir-hash-1"


def structural_hash(node) -> str:
    """Hex sha256 of a node (a PrimFunc, statement or expression), ignoring locations.

    Equal programs hash equal; programs whose literals differ only in the sign of a zero
    or in being NaN hash differently (`==` on the dataclasses cannot tell those apart)."""
    h = hashlib.sha256(ENCODING_VERSION)
    h.update(canonical_bytes(node))
    return h.hexdigest()


def structural_equal(a, b) -> bool:
    """Whether two nodes are the same program: `==`, but exact on float literals."""
    return canonical_bytes(a) == canonical_bytes(b)


def canonical_bytes(node) -> bytes:
    out: list[bytes] = []
    _encode(node, out, {})
    return b"".join(out)


def _encode(x, out: list[bytes], memo: dict[int, bytes]) -> None:
    if dataclasses.is_dataclass(x) and not isinstance(x, Format):
        key = id(x)
        if key in memo:  # buffers recur in every access: encode each object once
            out.append(memo[key])
            return
        sub: list[bytes] = [b"(", type(x).__name__.encode(), b" "]
        for f in dataclasses.fields(x):
            if f.compare:
                _encode(getattr(x, f.name), sub, memo)
        sub.append(b")")
        memo[key] = b"".join(sub)
        out.append(memo[key])
    else:
        out.append(_leaf(x, out, memo))


def _leaf(x, out: list[bytes], memo: dict) -> bytes:
    if isinstance(x, Format):
        return b"d" + x.name.encode() + b";"
    if isinstance(x, enum.Enum):
        return b"e" + type(x).__name__.encode() + b"." + str(x.value).encode() + b";"
    if isinstance(x, bool) or x is None:
        return b"b" + repr(x).encode() + b";"
    if isinstance(x, int):
        return b"i" + str(x).encode() + b";"
    if isinstance(x, float):
        return b"f" + struct.pack(">d", x).hex().encode() + b";"
    if isinstance(x, str):
        return b"s" + str(len(x.encode())).encode() + b":" + x.encode()
    if isinstance(x, tuple):
        sub: list[bytes] = [b"["]
        for item in x:
            _encode(item, sub, memo)
        sub.append(b"]")
        return b"".join(sub)
    raise TypeError(f"cannot hash IR field of type {type(x).__name__}")
