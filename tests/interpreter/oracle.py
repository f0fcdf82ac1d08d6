"""Independent numpy formulations the interpreter is checked against, and value compare.

Written from the numerics contract with plain numpy / ml_dtypes arithmetic (which rounds
every op to the array's dtype), never with tilepy's op table."""

import ml_dtypes
import numpy as np


def np_dtype(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def same(a, b) -> bool:
    """Equal values with equal bits, NaN matching NaN (any payload)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        return np.array_equal(a, b)
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    na, nb = np.isnan(fa), np.isnan(fb)
    return bool(np.array_equal(na, nb) and np.array_equal(fa[~na].view(np.uint64),
                                                          fb[~nb].view(np.uint64)))


def random_values(rng, shape, dtype: str, specials: bool = False) -> np.ndarray:
    dt = np_dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, shape).astype(dt)
    x = rng.standard_normal(shape) * 3
    if specials:
        pick = rng.random(shape)
        x = np.where(pick < 0.05, 0.0, x)
        x = np.where((pick >= 0.05) & (pick < 0.1), -0.0, x)
        x = np.where((pick >= 0.1) & (pick < 0.12), np.nan, x)
    return x.astype(dt)


def seq_gemm(a, b, c0, acc: str, k_pad: int | None = None) -> np.ndarray:
    """C = c0 + a @ b, k ascending, every product and sum rounded to `acc` (numpy/ml_dtypes
    ops on `acc` arrays). `k_pad` zero-pads K (edge tiles read zeros)."""
    dt = np_dtype(acc)
    a, b = a.astype(dt), b.astype(dt)
    K = a.shape[1]
    if k_pad is not None and k_pad > K:
        a = np.concatenate([a, np.zeros((a.shape[0], k_pad - K), dt)], axis=1)
        b = np.concatenate([b, np.zeros((k_pad - K, b.shape[1]), dt)], axis=0)
    c = c0.astype(dt).copy()
    for k in range(a.shape[1]):
        c = c + a[:, k:k + 1] * b[k:k + 1, :]
    return c


def seq_fold(x, axis: int, kind: str, init, dtype: str) -> np.ndarray:
    """A reduction as a Python-ordered fold along `axis`, in `dtype`."""
    dt = np_dtype(dtype)
    x = np.moveaxis(np.asarray(x).astype(dt), axis, -1)
    if kind.startswith("abs"):
        x = np.abs(x)
    acc = np.asarray(init).astype(dt).copy()
    for j in range(x.shape[-1]):
        v = x[..., j]
        if kind in ("sum", "abssum"):
            acc = (acc + v).astype(dt)
        else:
            with np.errstate(invalid="ignore"):
                keep = (acc >= v) if kind in ("max", "absmax") else (acc <= v)
            if dt.kind == "f" or dt.kind == "V":
                keep = keep | np.isnan(acc.astype(np.float64))
            acc = np.where(keep, acc, v).astype(dt)
    return acc


def seq_cumsum(x, axis: int, reverse: bool, dtype: str) -> np.ndarray:
    dt = np_dtype(dtype)
    x = np.moveaxis(np.asarray(x).astype(dt), axis, -1)
    out = np.empty_like(x)
    acc = np.zeros(x.shape[:-1], dt)
    order = range(x.shape[-1] - 1, -1, -1) if reverse else range(x.shape[-1])
    for j in order:
        acc = (acc + x[..., j]).astype(dt)
        out[..., j] = acc
    return np.moveaxis(out, -1, axis)


def round_once_bf16(x64: np.ndarray) -> np.ndarray:
    """float64 -> bfloat16 with one round-to-nearest-even (normal range), via frexp."""
    m, e = np.frexp(x64)  # x = m * 2**e, 0.5 <= |m| < 1
    r = np.ldexp(np.rint(np.ldexp(m, 8)), e - 8)  # 8 significant bits, RNE
    return r.astype(np.float32).astype(ml_dtypes.bfloat16)  # exact conversions


def gamma(n: int, u: float) -> float:
    return n * u / (1 - n * u)
