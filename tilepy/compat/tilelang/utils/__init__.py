"""`tilelang.utils`: tensor supplies and comparisons (`tilelang.utils.tensor`)."""

from tilepy.compat.tilelang.utils import tensor  # noqa: F401
from tilepy.compat.tilelang.utils.tensor import (  # noqa: F401
    TensorSupplyType,
    get_tensor_supply,
    torch_assert_close,
)


def select_fp8_e4m3_dtype():
    """The e4m3 fp8 dtype of the target: OCP `float8_e4m3fn` on the CPU reference (the
    e4m3fnuz variant is AMD MI300's)."""
    from tilepy.compat.tilelang.language.fp8 import determine_fp8_type

    return determine_fp8_type("e4m3")


def select_torch_fp8_e4m3_dtype():
    """torch's dtype for `select_fp8_e4m3_dtype()`."""
    import torch

    return torch.float8_e4m3fn
