"""`tilelang.language.fp8`: which fp8 format a target uses (on the CPU reference, the
OCP ones: e4m3fn and e5m2)."""

from tilepy.frontend.dtypes import dtype


def determine_fp8_type(fp8_format: str = "e4m3") -> dtype:
    return dtype("float8_e5m2" if "e5m2" in str(fp8_format) else "float8_e4m3fn")
