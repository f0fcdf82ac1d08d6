"""`tilelang.engine.param.KernelParam`: a kernel argument's dtype and shape. tilepy's
supplies receive its IR buffers (which have `.dtype` and `.shape`); this class describes
the same thing for programs that build or annotate with it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelParam:
    dtype: object
    shape: tuple

    @classmethod
    def from_buffer(cls, buffer) -> KernelParam:
        return cls(buffer.dtype, tuple(buffer.shape))

    def is_scalar(self) -> bool:
        return len(self.shape) == 0
