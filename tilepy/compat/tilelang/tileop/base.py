"""`tilelang.tileop.base.GemmWarpPolicy`: the same object as `T.GemmWarpPolicy`."""

from tilepy.language import GemmWarpPolicy  # noqa: F401
