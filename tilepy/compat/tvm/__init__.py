"""tilepy's stand-in for the small part of TVM that TileLang programs touch: `tvm.tir` /
`tvm.tirx` expression builders inside kernels (const, Select, reinterpret, shifts) and the
`PrimExpr` type for isinstance checks."""

from tilepy.compat.tvm import tirx  # noqa: F401

tir = tirx
DataType = str
