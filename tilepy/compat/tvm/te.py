"""`tvm.te.var("m")`: a symbolic size (`T.dynamic`), bound from the arrays at each call."""

from tilepy.language import dynamic


def var(name: str = "v", dtype: str = "int32"):
    return dynamic(name, dtype)
