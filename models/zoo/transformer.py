"""Patch-based image models for small images (8x8 digits): MLP-Mixer and a tiny Vision
Transformer, and the pre-norm transformer block (multi-head self-attention through
nn.functional.scaled_dot_product_attention, then an MLP) that the char GPT shares.

Images are (N, C, H, W); `patches` cuts them into (N, tokens, C*p*p) with Tensor reshapes
and a permute, so the patch embedding is a Linear and its gradient flows to the pixels.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import Parameter, Tensor, nn
from tilepy.models.errors import model_error
from tilepy.models.nn import init
from tilepy.models.nn.attention import qkv_attention
from tilepy.models.ops import as_tensor
from tilepy.models.zoo.checks import expect_shape

F = nn.functional


def patches(x, p: int) -> Tensor:
    """(N, C, H, W) -> (N, (H/p)*(W/p), C*p*p), patches in row-major order."""
    x = as_tensor(x)
    n, c, h, w = x.shape
    x = x.reshape(n, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(n, (h // p) * (w // p), c * p * p)


def _mlp(width: int, hidden: int, dtype) -> nn.Sequential:
    return nn.Sequential(nn.Linear(width, hidden, dtype=dtype), nn.GELU(),
                         nn.Linear(hidden, width, dtype=dtype))


class MixerBlock(nn.Module):
    """Token mixing (an MLP across the tokens, on the transposed activations), then
    channel mixing (an MLP across the channels), each pre-norm and residual."""

    def __init__(self, tokens: int, width: int, token_hidden: int, channel_hidden: int,
                 dtype=np.float32):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width, dtype=dtype), nn.LayerNorm(width, dtype=dtype)
        self.token_mlp = _mlp(tokens, token_hidden, dtype)
        self.channel_mlp = _mlp(width, channel_hidden, dtype)

    def forward(self, x):
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class MLPMixer(nn.Module):
    """Patch embedding (Linear), MixerBlocks, LayerNorm, mean over tokens, Linear head."""

    def __init__(self, in_channels=1, image=8, patch=2, width=32, depth=2, classes=10,
                 dtype=np.float32):
        super().__init__()
        self.patch, tokens = patch, (image // patch) ** 2
        self.image_shape = (in_channels, image, image)
        self.embed = nn.Linear(in_channels * patch * patch, width, dtype=dtype)
        self.blocks = nn.Sequential(*[MixerBlock(tokens, width, 2 * tokens, 2 * width, dtype)
                                      for _ in range(depth)])
        self.norm = nn.LayerNorm(width, dtype=dtype)
        self.head = nn.Linear(width, classes, dtype=dtype)

    def forward(self, x):
        expect_shape("MLPMixer", x, (None, *self.image_shape))
        h = self.blocks(self.embed(patches(x, self.patch)))
        return self.head(self.norm(h).mean(1))


def mlp_mixer(in_channels: int = 1, image: int = 8, patch: int = 2, width: int = 32,
              depth: int = 2, classes: int = 10, dtype=np.float32) -> MLPMixer:
    return MLPMixer(in_channels, image, patch, width, depth, classes, dtype)


class SelfAttention(nn.Module):
    """Multi-head self-attention: one Linear makes q, k and v, attention per head on its
    rows (qkv_attention: the heads' split and merge are not copied), an output Linear."""

    def __init__(self, width: int, heads: int, causal: bool = False, dtype=np.float32):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(width, 3 * width, dtype=dtype)
        self.proj = nn.Linear(width, width, dtype=dtype)

    def forward(self, x):
        return self.proj(qkv_attention(self.qkv(x), self.heads, is_causal=self.causal))


class Block(nn.Module):
    """Pre-norm transformer block: x + attention(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, width: int, heads: int, causal: bool = False, mlp_ratio: int = 2,
                 dtype=np.float32):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width, dtype=dtype), nn.LayerNorm(width, dtype=dtype)
        self.attn = SelfAttention(width, heads, causal, dtype)
        self.mlp = _mlp(width, mlp_ratio * width, dtype)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def position_table(tokens: int, width: int, dtype) -> Parameter:
    """A learned position embedding (tokens, width), N(0, 0.02^2) at the start."""
    return Parameter((0.02 * init.normal((tokens, width), np.float64)).astype(dtype))


class ViT(nn.Module):
    """Vision Transformer: patch embedding (Linear) plus learned positions, Blocks,
    LayerNorm, the mean over the tokens (no class token) and a Linear head."""

    def __init__(self, in_channels=1, image=8, patch=2, width=32, depth=2, heads=2,
                 classes=10, dtype=np.float32):
        super().__init__()
        self.patch, self.image_shape = patch, (in_channels, image, image)
        self.embed = nn.Linear(in_channels * patch * patch, width, dtype=dtype)
        self.pos = position_table((image // patch) ** 2, width, dtype)
        self.blocks = nn.Sequential(*[Block(width, heads, dtype=dtype) for _ in range(depth)])
        self.norm = nn.LayerNorm(width, dtype=dtype)
        self.head = nn.Linear(width, classes, dtype=dtype)

    def forward(self, x):
        expect_shape("ViT", x, (None, *self.image_shape))
        h = self.blocks(self.embed(patches(x, self.patch)) + self.pos)
        return self.head(self.norm(h).mean(1))


def vit_tiny(in_channels: int = 1, image: int = 8, patch: int = 2, width: int = 32,
             depth: int = 2, heads: int = 2, classes: int = 10, dtype=np.float32) -> ViT:
    return ViT(in_channels, image, patch, width, depth, heads, classes, dtype)


class SwiGLU(nn.Module):
    """The gated MLP of LLaMA-style blocks: down(silu(gate(x)) * up(x)), no biases."""

    def __init__(self, width: int, hidden: int, dtype=np.float32):
        super().__init__()
        self.gate = nn.Linear(width, hidden, bias=False, dtype=dtype)
        self.up = nn.Linear(width, hidden, bias=False, dtype=dtype)
        self.down = nn.Linear(hidden, width, bias=False, dtype=dtype)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class RMSBlock(nn.Module):
    """A LLaMA-style block: RMSNorm instead of LayerNorm, a SwiGLU MLP; pre-norm, residual."""

    def __init__(self, width: int, heads: int, causal: bool = True, hidden: int | None = None,
                 dtype=np.float32):
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(width, dtype=dtype), nn.RMSNorm(width, dtype=dtype)
        self.attn = SelfAttention(width, heads, causal, dtype)
        self.mlp = SwiGLU(width, hidden or 2 * width, dtype)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class SequenceTagger(nn.Module):
    """A BERT-style encoder: token and learned position embeddings, bidirectional
    (non-causal) Blocks, LayerNorm and a Linear per token. (N, T) codes -> (N, T, classes)
    (T at most `length`), for tasks such as sorting a sequence position by position."""

    def __init__(self, vocab: int, classes: int, length: int = 16, width: int = 32,
                 depth: int = 2, heads: int = 2, dtype=np.float32):
        super().__init__()
        self.length = length
        self.tok = nn.Embedding(vocab, width, dtype=dtype)
        self.pos = position_table(length, width, dtype)
        self.blocks = nn.Sequential(*[Block(width, heads, dtype=dtype) for _ in range(depth)])
        self.norm = nn.LayerNorm(width, dtype=dtype)
        self.head = nn.Linear(width, classes, dtype=dtype)

    def forward(self, idx):
        expect_shape("SequenceTagger", idx, (None, None))
        t = np.shape(idx)[1]
        if t > self.length:
            raise model_error(f"SequenceTagger: expected sequences of at most length="
                              f"{self.length} tokens; got shape {np.shape(idx)}",
                              hint="cut the input or build the model with a larger length")
        return self.head(self.norm(self.blocks(self.tok(idx) + self.pos[:t])))


def sequence_tagger(vocab: int = 8, classes: int = 8, length: int = 16, width: int = 32,
                    depth: int = 2, heads: int = 2, dtype=np.float32) -> SequenceTagger:
    return SequenceTagger(vocab, classes, length, width, depth, heads, dtype)
