"""tilepy.tileop: declarative operators (`@tile_op`) written as index expressions, scheduled
to tile kernels, and op graphs (`tilepy.compile(fn)`) whose element-wise epilogues are fused
into the contraction or reduction that produces their input (and a gemm into the next).
A front-end layer: it builds tile IR with the IR's constructors and runs kernels through
`Kernel` (backends lazily).
"""

from tilepy.tileop.op import TileOp, tile_op
from tilepy.tileop.spec import Tensor, symbolic

__all__ = ["Tensor", "TileOp", "symbolic", "tile_op"]
