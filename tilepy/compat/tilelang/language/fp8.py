"""`tilelang.language.fp8`: which fp8 format a target uses (on the CPU reference, the
OCP ones: e4m3fn and e5m2, as on NVIDIA GPUs), as a tile dtype or a torch dtype."""

from tilepy.frontend.dtypes import dtype


def determine_fp8_type(fp8_format: str = "e4m3", device=None) -> dtype:
    """`device` (newer TileLang's argument) picks among GPU vendors; the CPU has one."""
    return dtype("float8_e5m2" if "e5m2" in str(fp8_format) else "float8_e4m3fn")


def determine_torch_fp8_type(fp8_format: str = "e4m3", device=None):
    """The torch dtype of determine_fp8_type (torch must be installed)."""
    import torch

    return getattr(torch, str(determine_fp8_type(fp8_format)))
