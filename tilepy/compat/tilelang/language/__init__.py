"""`tilelang.language` (`import tilelang.language as T`): tilepy's language, the same
objects, so the front end recognises them; plus `fp8` helpers and `iket` events."""

from tilepy.compat.tilelang.language import fp8, iket  # noqa: F401
from tilepy.language import *  # noqa: F403 - the whole language, TileLang's surface
from tilepy.language import Tensor, prim_func  # noqa: F401

Buffer = Tensor
