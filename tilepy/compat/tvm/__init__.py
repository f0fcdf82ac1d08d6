"""tilepy's stand-in for the small part of TVM that TileLang programs touch: `tvm.tir` /
`tvm.tirx` expression builders inside kernels (const, Select, reinterpret, shifts) and the
`PrimExpr` type for isinstance checks."""

from tilepy.compat.tvm import te, tirx  # noqa: F401
from tilepy.frontend.dtypes import dtype as DataType  # noqa: F401 - DataType("float16").bits

tir = tirx
