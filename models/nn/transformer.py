"""MultiheadAttention (torch.nn.MultiheadAttention's parameters and layouts, without
attention masks other than causal, and without returning the weights) and a pre-norm
TransformerBlock. Attention is nn.functional.scaled_dot_product_attention; projections
are nn.functional.linear; every op is a tile kernel forward and backward.
"""

from __future__ import annotations

import numpy as np

from tilepy.models.errors import model_error
from tilepy.models.nn import functional as F
from tilepy.models.nn import init
from tilepy.models.nn.attention import qkv_attention
from tilepy.models.nn.layers import GELU, Dropout, LayerNorm, Linear, ReLU, RMSNorm
from tilepy.models.nn.module import Module, Sequential, as_input
from tilepy.models.tensor import Parameter, Tensor


def multi_head_attention(query: Tensor, key: Tensor, value: Tensor, num_heads: int,
                         in_weight: Tensor, in_bias, out_weight: Tensor, out_bias,
                         is_causal: bool = False) -> Tensor:
    """Batch-first (N, L, E) queries and (N, S, E) keys and values -> (N, L, E):
    project with the rows [0, E), [E, 2E), [2E, 3E) of in_weight, split heads, attend,
    merge heads, project out. One projection when query, key and value are one tensor."""
    n, length, e = query.shape
    d = e // num_heads
    if query is key and key is value:  # the heads are split and merged in place
        y = qkv_attention(F.linear(query, in_weight, in_bias), num_heads, is_causal)
        return F.linear(y, out_weight, out_bias)
    parts = []
    for i, x in enumerate((query, key, value)):
        b = None if in_bias is None else in_bias[i * e:(i + 1) * e]
        y = F.linear(x, in_weight[i * e:(i + 1) * e], b)
        parts.append(y.reshape(n, x.shape[1], num_heads, d).permute(0, 2, 1, 3))
    y = F.scaled_dot_product_attention(*parts, is_causal=is_causal)
    return F.linear(y.permute(0, 2, 1, 3).reshape(n, length, e), out_weight, out_bias)


class MultiheadAttention(Module):
    """forward(query, key, value, need_weights=False, is_causal=False) ->
    (output, None); (L, N, E) layouts, or (N, L, E) with batch_first=True. Parameters:
    in_proj_weight (3E, E), in_proj_bias (3E,), out_proj (a Linear E -> E)."""

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True,
                 batch_first: bool = False, dtype=np.float32):
        super().__init__()
        if embed_dim % num_heads:
            raise model_error(f"MultiheadAttention: num_heads={num_heads} must divide "
                              f"embed_dim={embed_dim}")
        self.embed_dim, self.num_heads, self.batch_first = embed_dim, num_heads, batch_first
        self.dtype = np.dtype(dtype)
        bound = np.sqrt(6.0 / (4 * embed_dim))  # xavier_uniform over (3E, E), as torch
        self.in_proj_weight = Parameter(init.uniform((3 * embed_dim, embed_dim), bound, dtype))
        self.in_proj_bias = Parameter(np.zeros(3 * embed_dim, dtype)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        if bias:
            self.out_proj.bias.data[:] = 0

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"

    def _batch_first(self, x, what: str) -> Tensor:
        x = as_input(self, x, self.dtype)
        if x.ndim != 3 or x.shape[2] != self.embed_dim:
            order = "(N, L, E)" if self.batch_first else "(L, N, E)"
            raise model_error(f"{self.name_line()}: expected {what} of shape {order} with E="
                              f"{self.embed_dim}; got {x.shape}")
        return x if self.batch_first else x.permute(1, 0, 2)

    def forward(self, query, key, value, need_weights: bool = False, is_causal: bool = False):
        if need_weights:
            raise model_error(f"{self.name_line()}: need_weights=True is not supported (the "
                              "attention weights are not kept)",
                              hint="call it with need_weights=False")
        same = query is key and key is value
        q = self._batch_first(query, "query")
        k, v = (q, q) if same else (self._batch_first(key, "key"),
                                    self._batch_first(value, "value"))
        if k.shape != v.shape or k.shape[0] != q.shape[0]:
            raise model_error(f"{self.name_line()}: key and value must have one shape and the "
                              f"query's batch; got query {q.shape}, key {k.shape}, value {v.shape}")
        y = multi_head_attention(q, k, v, self.num_heads, self.in_proj_weight,
                                 self.in_proj_bias, self.out_proj.weight, self.out_proj.bias,
                                 is_causal)
        return (y if self.batch_first else y.permute(1, 0, 2)), None


class TransformerBlock(Module):
    """A pre-norm block on (N, T, d_model): x + attn(norm1(x)), then x + mlp(norm2(x)),
    the MLP Linear(d, dim_feedforward), activation, Linear back; causal=True masks the
    future (a decoder block). norm is "layer" (LayerNorm) or "rms" (RMSNorm)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int | None = None,
                 dropout: float = 0.0, activation: str = "gelu", causal: bool = False,
                 norm: str = "layer", dtype=np.float32):
        super().__init__()
        if activation not in ("gelu", "relu") or norm not in ("layer", "rms"):
            raise model_error(f"TransformerBlock: activation must be 'gelu' or 'relu' and "
                              f"norm 'layer' or 'rms'; got {activation!r}, {norm!r}")
        make = LayerNorm if norm == "layer" else RMSNorm
        self.norm1, self.norm2 = make(d_model, dtype=dtype), make(d_model, dtype=dtype)
        self.attn = MultiheadAttention(d_model, nhead, batch_first=True, dtype=dtype)
        hidden = dim_feedforward or 4 * d_model
        self.mlp = Sequential(Linear(d_model, hidden, dtype=dtype),
                              GELU() if activation == "gelu" else ReLU(),
                              Linear(hidden, d_model, dtype=dtype))
        self.drop = Dropout(dropout)
        self.causal = causal

    def extra_repr(self) -> str:
        return (f"d_model={self.norm1.weight.shape[0]}, nhead={self.attn.num_heads}, "
                f"causal={self.causal}")

    def forward(self, x):
        d = self.norm1.weight.shape[0]
        x = as_input(self, x, self.norm1.weight.dtype)
        if x.ndim != 3 or x.shape[2] != d:
            raise model_error(f"{self.name_line()}: expected input of shape (N, T, {d}); "
                              f"got {x.shape}")
        h = self.norm1(x)
        x = x + self.drop(self.attn(h, h, h, is_causal=self.causal)[0])
        return x + self.drop(self.mlp(self.norm2(x)))
