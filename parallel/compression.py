"""Gradient compression: block quantisers (int8, int4, fp8, fp4) with power-of-two block
scales, top-k, PowerSGD and error feedback. Each Compressor encodes to ONE uint8 buffer
whose size is the exact byte count sent (payload + scales + indices): accounting is
`buf.size`. Elements round through tilepy.precision (RNE, or stochastic from explicit random
bits); `MXBlock` is precision's MX / NVFP4 quantiser, the others' block layer is here.
"""

from __future__ import annotations

import numpy as np

from tilepy.precision import (
    SCHEMES,
    Quantized,
    cast,
    dequantize,
    get_format,
    pack,
    pack_nibbles,
    quantize,
    random_bits,
    unpack,
    unpack_nibbles,
)
from tilepy.precision import stochastic_round as sround

E8M0_BIAS = 127


def _blocks(v: np.ndarray, block: int) -> np.ndarray:
    """v (1-D float64) zero-padded to whole blocks, shape (nblocks, block)."""
    nb = -(-v.size // block)
    out = np.zeros(nb * block, np.float64)
    out[:v.size] = v
    return out.reshape(nb, block)


def pow2_exponents(blocks: np.ndarray, qmax: float) -> np.ndarray:
    """Per block the smallest e with amax / 2^e <= qmax (so nothing clips), in e8m0 range."""
    amax = np.max(np.abs(blocks), axis=1)
    with np.errstate(divide="ignore"):
        e = np.ceil(np.log2(amax / qmax))
    e = np.where(amax > 0, e, -E8M0_BIAS)
    e = np.clip(e, -E8M0_BIAS, E8M0_BIAS).astype(np.int64)
    # log2 may be off by one ulp near powers of two: fix so that amax <= qmax * 2^e holds
    e = np.where(amax > qmax * np.ldexp(1.0, e), e + 1, e)
    return e


def _uniform(seed: int, shape) -> np.ndarray:
    return random_bits(seed, shape).astype(np.float64) / 4294967296.0


class Compressor:
    """encode(v, seed) -> uint8 buffer; decode(buf, n) -> float64 values (exactly d)."""

    name = "none"
    stochastic = False

    def encode(self, v: np.ndarray, seed: int = 0) -> np.ndarray:
        return np.ascontiguousarray(v, np.float32).view(np.uint8).copy()

    def decode(self, buf: np.ndarray, n: int) -> np.ndarray:
        return buf.view(np.float32)[:n].astype(np.float64)

    def ratio(self, n: int) -> float:
        """Compressed bytes / float32 bytes for n elements (exact, includes metadata)."""
        return self.encode(np.ones(n)).size / (4 * n)


class IntBlock(Compressor):
    """Symmetric int8 (codes -127..127) or MX-style int4 (-7..7, two per byte) per block,
    one e8m0 scale byte per block. Round to nearest even, or stochastically (unbiased)."""

    def __init__(self, bits: int = 8, block: int = 32, stochastic: bool = False):
        self.bits, self.block, self.stochastic = bits, block, stochastic
        self.qmax = 127 if bits == 8 else 7
        self.name = f"int{bits}/b{block}" + ("/sr" if stochastic else "")

    def _quantise(self, blocks, e, seed):
        y = blocks / np.ldexp(1.0, e)[:, None]
        if self.stochastic:
            q = np.floor(y + _uniform(seed, y.shape))
        else:
            q = np.rint(y)
        return np.clip(q, -self.qmax, self.qmax).astype(np.int8)

    def encode(self, v, seed=0):
        blocks = _blocks(np.asarray(v, np.float64).reshape(-1), self.block)
        e = pow2_exponents(blocks, self.qmax)
        q = self._quantise(blocks, e, seed).reshape(-1)
        payload = q.view(np.uint8) if self.bits == 8 else pack_nibbles(q.view(np.uint8))
        return np.concatenate([(e + E8M0_BIAS).astype(np.uint8), payload])

    def decode(self, buf, n):
        nb = -(-n // self.block)
        e = buf[:nb].astype(np.int64) - E8M0_BIAS
        if self.bits == 8:
            q = buf[nb:].view(np.int8).astype(np.float64)
        else:
            nib = unpack_nibbles(buf[nb:]).astype(np.int64)
            q = np.where(nib > 7, nib - 16, nib).astype(np.float64)
        return (q.reshape(nb, self.block) * np.ldexp(1.0, e)[:, None]).reshape(-1)[:n]


class FloatBlock(Compressor):
    """fp8 (float8_e4m3fn, float8_e5m2) or fp4 (float4_e2m1fn, two per byte) per block with
    one e8m0 scale byte per block; elements rounded by tilepy.precision."""

    def __init__(self, fmt: str = "float8_e4m3fn", block: int = 32, stochastic: bool = False):
        self.fmt, self.block, self.stochastic = get_format(fmt), block, stochastic
        self.name = f"{self.fmt.name}/b{block}" + ("/sr" if stochastic else "")

    def encode(self, v, seed=0):
        blocks = _blocks(np.asarray(v, np.float64).reshape(-1), self.block)
        e = pow2_exponents(blocks, self.fmt.max_finite)
        y = blocks / np.ldexp(1.0, e)[:, None]
        if self.stochastic:
            codes = sround(y, self.fmt, random_bits(seed, y.shape), saturate=True)
        else:
            codes = cast(y, self.fmt, saturate=True)
        codes = codes.reshape(-1)
        payload = pack(codes, self.fmt.name) if self.fmt.bits == 4 else codes.view(np.uint8)
        return np.concatenate([(e + E8M0_BIAS).astype(np.uint8), payload])

    def decode(self, buf, n):
        nb = -(-n // self.block)
        e = buf[:nb].astype(np.int64) - E8M0_BIAS
        if self.fmt.bits == 4:
            vals = unpack(buf[nb:], nb * self.block, self.fmt.name)
        else:
            vals = buf[nb:].view(self.fmt.np_dtype)
        q = vals.astype(np.float64).reshape(nb, self.block)
        return (q * np.ldexp(1.0, e)[:, None]).reshape(-1)[:n]


class MXBlock(Compressor):
    """The OCP MX / NVFP4 block formats exactly as tilepy.precision quantises them
    (`quantize` / `dequantize`): mxfp8_e4m3, mxfp8_e5m2, mxfp4, mxint8 (32-element blocks,
    e8m0 scales) and nvfp4 (16-element blocks, e4m3 scales, a float32 tensor scale).
    4-bit codes are packed two per byte. Values pass through float32 first."""

    BLOCK = {"nvfp4": 16}

    def __init__(self, scheme: str = "mxfp4"):
        self.scheme = scheme
        self.block = self.BLOCK.get(scheme, 32)
        self.name = scheme

    def encode(self, v, seed=0):
        v = np.asarray(v, np.float64).reshape(-1)
        padded = np.zeros(-(-v.size // self.block) * self.block, np.float64)
        padded[:v.size] = v
        q = quantize(padded, self.scheme)
        four = get_format(q.elem).bits == 4
        codes = pack_nibbles(q.codes) if four else q.codes
        parts = [q.scales.view(np.uint8).reshape(-1), codes.reshape(-1)]
        if q.tensor_scale is not None:
            parts.append(np.array([q.tensor_scale], np.float32).view(np.uint8))
        return np.concatenate(parts)

    def decode(self, buf, n):
        nb = -(-n // self.block)
        m = nb * self.block
        elem = SCHEMES[self.scheme].elem
        four = get_format(elem).bits == 4
        ncode = m // 2 if four else m
        codes = buf[nb:nb + ncode]
        codes = unpack_nibbles(codes, m) if four else codes
        tail = buf[nb + ncode:]
        ts = tail.view(np.float32)[0] if tail.size else None
        q = Quantized(self.scheme, elem, codes.copy(), buf[:nb].copy(), ts)
        return dequantize(q).astype(np.float64)[:n]


class Int4Dense(IntBlock):
    """int4 levels -7..7 at exactly 4 bits per element INCLUDING the scales: 16 levels-of-15
    digits fill 63 bits of a uint64 (15^16 < 2^63); a block of 128 elements is 8 words
    whose 8 spare top bits hold the block's e8m0 scale. 64 bytes per 128 float32 = 1/8."""

    WORDS, DIGITS = 8, 16

    def __init__(self, stochastic: bool = False):
        super().__init__(4, self.WORDS * self.DIGITS, stochastic)
        self.name = "int4-dense/b128" + ("/sr" if stochastic else "")

    def encode(self, v, seed=0):
        blocks = _blocks(np.asarray(v, np.float64).reshape(-1), self.block)
        e = pow2_exponents(blocks, self.qmax)
        digits = (self._quantise(blocks, e, seed).astype(np.int64) + 7).astype(np.uint64)
        digits = digits.reshape(-1, self.WORDS, self.DIGITS)
        words = np.zeros(digits.shape[:2], np.uint64)
        for k in reversed(range(self.DIGITS)):  # Horner: word = sum d_k 15^k
            words = words * np.uint64(15) + digits[:, :, k]
        code = (e + E8M0_BIAS).astype(np.uint64)
        for w in range(self.WORDS):
            words[:, w] |= ((code >> np.uint64(w)) & np.uint64(1)) << np.uint64(63)
        return words.reshape(-1).view(np.uint8)

    def decode(self, buf, n):
        words = buf.view(np.uint64).reshape(-1, self.WORDS).copy()
        code = np.zeros(words.shape[0], np.int64)
        for w in range(self.WORDS):
            code |= ((words[:, w] >> np.uint64(63)).astype(np.int64)) << w
        words &= np.uint64((1 << 63) - 1)
        digits = np.empty(words.shape + (self.DIGITS,), np.int64)
        for k in range(self.DIGITS):
            digits[:, :, k] = (words % np.uint64(15)).astype(np.int64)
            words //= np.uint64(15)
        q = (digits.reshape(-1, self.block) - 7).astype(np.float64)
        return (q * np.ldexp(1.0, code - E8M0_BIAS)[:, None]).reshape(-1)[:n]


class TopK(Compressor):
    """The k largest magnitudes (ties: lower index first): int32 indices + float32 values."""

    def __init__(self, fraction: float = 0.01):
        self.fraction = fraction
        self.name = f"top{fraction:g}"

    def encode(self, v, seed=0):
        v = np.asarray(v, np.float64).reshape(-1)
        k = max(1, int(round(self.fraction * v.size)))
        idx = np.sort(np.argsort(-np.abs(v), kind="stable")[:k]).astype(np.int32)
        vals = v[idx].astype(np.float32)
        return np.concatenate([idx.view(np.uint8), vals.view(np.uint8)])

    def decode(self, buf, n):
        k = buf.size // 8
        idx = buf[:4 * k].view(np.int32)
        out = np.zeros(n, np.float64)
        out[idx] = buf[4 * k:].view(np.float32)
        return out


class ErrorFeedback:
    """Residual-carrying wrapper: send C(g + e), keep e <- (g + e) - D(C(g + e)) in float64.
    With round-to-nearest and power-of-two scales, v - d is exact (Sterbenz), so each step
    conserves mass exactly: d + e_new == g + e_old bit for bit."""

    def __init__(self, compressor: Compressor, n: int):
        self.compressor, self.residual = compressor, np.zeros(n, np.float64)

    def encode(self, g: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(buffer to send, its decoded value d); updates the residual."""
        v = np.asarray(g, np.float64).reshape(-1) + self.residual
        buf = self.compressor.encode(v, seed)
        d = self.compressor.decode(buf, v.size)
        self.residual = v - d
        return buf, d


def compressed_allreduce(comm, g: np.ndarray, ef: ErrorFeedback, seed: int = 0):
    """Sum over ranks of the decoded compressed gradients, in rank order, on every rank.
    Returns (sum float64, bytes this rank sent). Buffers travel by ring allgatherv."""
    buf, _ = ef.encode(g, seed + 7919 * comm.rank)
    counts = [buf.size] * comm.size  # every rank's buffer has the same length for n
    allbufs = comm.allgatherv(buf, counts)
    total = np.zeros(g.size, np.float64)
    for r in range(comm.size):
        total += ef.compressor.decode(allbufs[r * buf.size:(r + 1) * buf.size], g.size)
    return total.reshape(g.shape), buf.size * (comm.size - 1)


class PowerSGD:
    """Rank-r PowerSGD (Vogels et al. 2019) with error feedback for one (n, m) matrix:
    P = M Q, allreduce P, orthonormalise, Q = M^T P, allreduce Q, approximation P Q^T.
    Sends 4 r (n + m) bytes per step instead of 4 n m; Q is warm-started across steps."""

    def __init__(self, shape: tuple[int, int], rank: int = 2, seed: int = 0):
        n, m = shape
        self.rank = rank
        self.q = np.random.default_rng(seed).standard_normal((m, rank))
        self.residual = np.zeros(shape, np.float64)

    def allreduce(self, comm, grad: np.ndarray) -> tuple[np.ndarray, int]:
        """(sum over ranks of the rank-r approximations, bytes sent by this rank)."""
        m = grad.astype(np.float64) + self.residual
        p = comm.allreduce(m @ self.q, algorithm="ring")
        p, _ = np.linalg.qr(p)
        q = comm.allreduce(m.T @ p, algorithm="ring")
        self.q = q / comm.size
        approx_sum = p @ q.T
        self.residual = m - p @ (p.T @ m)  # what this rank's share did not send
        sent = 2 * (comm.size - 1) / comm.size * 8 * (p.size + q.size)
        return approx_sum, int(sent)
