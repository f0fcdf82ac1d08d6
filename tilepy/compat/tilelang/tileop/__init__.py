"""`tilelang.tileop`: only `base.GemmWarpPolicy` (a GPU schedule choice, ignored)."""

from tilepy.compat.tilelang.tileop import base  # noqa: F401
