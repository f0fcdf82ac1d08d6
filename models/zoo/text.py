"""Character-level language models for char_corpus (tilepy.models.data): a Bengio-style
MLP over a fixed context window, and a GPT-style decoder (token and learned position
embeddings, causal pre-norm transformer blocks, a Linear to the vocabulary) with LayerNorm
and GELU MLPs, or RMSNorm and SwiGLU MLPs as in LLaMA (`char_llama`).
"""

from __future__ import annotations

import numpy as np

from tilepy.models import nn
from tilepy.models.errors import model_error
from tilepy.models.zoo.checks import expect_shape
from tilepy.models.zoo.transformer import Block, RMSBlock, position_table


class CharMLP(nn.Module):
    """Next character from the previous `context`: embed each, concatenate (a reshape),
    Linear + tanh, Linear to `vocab` logits. Input (N, context) codes -> (N, vocab)."""

    def __init__(self, vocab: int, context: int = 8, embed: int = 16, hidden: int = 64,
                 dtype=np.float32):
        super().__init__()
        self.context = context
        self.embed = nn.Embedding(vocab, embed, dtype=dtype)
        self.mlp = nn.Sequential(nn.Linear(context * embed, hidden, dtype=dtype), nn.Tanh(),
                                 nn.Linear(hidden, vocab, dtype=dtype))

    def forward(self, idx):
        expect_shape("CharMLP", idx, (None, self.context),
                     hint="give the previous `context` characters' codes of each sample")
        e = self.embed(idx)
        return self.mlp(e.reshape(e.shape[0], -1))


def char_mlp(vocab: int, context: int = 8, embed: int = 16, hidden: int = 64,
             dtype=np.float32) -> CharMLP:
    return CharMLP(vocab, context, embed, hidden, dtype)


class CharGPT(nn.Module):
    """(N, T) codes -> (N, T, vocab) logits of each next character (causal attention:
    position t sees positions <= t); T at most `block_size`."""

    def __init__(self, vocab: int, block_size: int = 16, width: int = 32, depth: int = 2,
                 heads: int = 2, dtype=np.float32, rms: bool = False):
        super().__init__()
        self.block_size = block_size
        self.tok = nn.Embedding(vocab, width, dtype=dtype)
        self.pos = position_table(block_size, width, dtype)
        block = RMSBlock if rms else Block
        self.blocks = nn.Sequential(*[block(width, heads, causal=True, dtype=dtype)
                                      for _ in range(depth)])
        self.norm = (nn.RMSNorm if rms else nn.LayerNorm)(width, dtype=dtype)
        self.head = nn.Linear(width, vocab, dtype=dtype)

    def forward(self, idx):
        expect_shape("CharGPT", idx, (None, None))
        t = np.shape(idx)[1]
        if t > self.block_size:
            raise model_error(f"CharGPT: expected sequences of at most block_size="
                              f"{self.block_size} codes; got shape {np.shape(idx)}",
                              hint="cut the input or build the model with a larger block_size")
        h = self.blocks(self.tok(idx) + self.pos[:t])
        return self.head(self.norm(h))


def char_gpt(vocab: int, block_size: int = 16, width: int = 32, depth: int = 2,
             heads: int = 2, dtype=np.float32) -> CharGPT:
    return CharGPT(vocab, block_size, width, depth, heads, dtype)


def char_llama(vocab: int, block_size: int = 16, width: int = 32, depth: int = 2,
               heads: int = 2, dtype=np.float32) -> CharGPT:
    """CharGPT with LLaMA-style blocks: RMSNorm and SwiGLU MLPs (learned positions kept)."""
    return CharGPT(vocab, block_size, width, depth, heads, dtype, rms=True)
