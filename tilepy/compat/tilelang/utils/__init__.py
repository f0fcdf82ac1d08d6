"""`tilelang.utils`: tensor supplies and comparisons (`tilelang.utils.tensor`)."""

from tilepy.compat.tilelang.utils import tensor  # noqa: F401
from tilepy.compat.tilelang.utils.tensor import (  # noqa: F401
    TensorSupplyType,
    get_tensor_supply,
    torch_assert_close,
)
