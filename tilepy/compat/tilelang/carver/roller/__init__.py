"""`tilelang.carver.roller`: only the rasterization plans programs compare hints with."""

from tilepy.compat.tilelang.carver.roller import rasterization  # noqa: F401
