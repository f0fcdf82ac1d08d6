"""tilepy.kernels: reference kernels written in the tile language, one family per module,
with symbolic problem sizes where they can (one IR serves every shape). checks.py pairs
each with an independent numpy formulation and an error bound derived from its numerics,
for the demo, the tests and the benchmarks.
"""

from tilepy.kernels.attention import flash_attention
from tilepy.kernels.attention_api import attention, attention_backward
from tilepy.kernels.conv import conv2d_nhwc
from tilepy.kernels.dequant import dequant_gemm_fp4
from tilepy.kernels.elementwise import bias_gelu, vector_add
from tilepy.kernels.embedding_bag import embedding_bag
from tilepy.kernels.gemm import gemm, gemm_split_k
from tilepy.kernels.norms import layernorm, rmsnorm
from tilepy.kernels.reductions import row_reduce
from tilepy.kernels.scan import cumsum
from tilepy.kernels.softmax import softmax
from tilepy.kernels.sparse_api import sddmm, spmm
from tilepy.kernels.topk import topk
from tilepy.kernels.xent import xent_bwd, xent_fwd

__all__ = [
    "bias_gelu", "conv2d_nhwc", "dequant_gemm_fp4", "flash_attention", "gemm", "gemm_split_k",
    "layernorm", "rmsnorm", "row_reduce", "softmax", "vector_add",
    "attention", "attention_backward", "cumsum", "embedding_bag", "sddmm", "spmm", "topk",
    "xent_bwd", "xent_fwd",
]
