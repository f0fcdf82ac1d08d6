"""`tilelang.engine`: only `param.KernelParam`, the description of a kernel argument that
tensor supplies receive."""

from tilepy.compat.tilelang.engine import param  # noqa: F401
from tilepy.compat.tilelang.engine.param import KernelParam  # noqa: F401
