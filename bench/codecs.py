"""Codec throughput: tilepy's Numba codecs vs ml_dtypes `astype`, and block quantisation
(Numba vs the numpy reference, which rounds with ml_dtypes).

Prints one table of elements/s (median of interleaved rounds) and the ratio to ml_dtypes.
Usage: python bench/codecs.py [--n 16777216] [--rounds 7] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import time

import ml_dtypes
import numba
import numpy as np

from tilepy.precision import blocks, blocks_jit, codecs, get_format

FORMATS = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"]
SCHEMES = ["mxfp8_e4m3", "mxfp4"]


def _serial_kernels(fmt):
    enc, dec = codecs.encoder(fmt), codecs.decoder(fmt)

    @numba.njit
    def encode(x, out):
        for i in range(x.size):
            out[i] = enc(x[i])

    @numba.njit
    def decode(c, out):
        for i in range(c.size):
            out[i] = dec(c[i])

    return encode, decode


def _cases(x: np.ndarray) -> list[tuple[str, dict]]:
    """(row name, {competitor: zero-argument callable}) with outputs preallocated."""
    rows = []
    for fmt in FORMATS:
        f = get_format(fmt)
        dt = np.dtype(getattr(ml_dtypes, fmt))
        codes = np.empty(x.size, f.storage)
        vals = np.empty(x.size, np.float32)
        enc_p, dec_p = codecs._encode_kernel(fmt, False), codecs._decode_kernel(fmt)
        enc_s, dec_s = _serial_kernels(fmt)
        c = x.astype(dt).view(f.storage)
        rows.append((f"encode {fmt}", {
            "ml_dtypes": lambda dt=dt: x.astype(dt),
            "numba 1 thread": lambda e=enc_s, o=codes: e(x, o),
            "numba prange": lambda e=enc_p, o=codes: e(x, o),
        }))
        rows.append((f"decode {fmt}", {
            "ml_dtypes": lambda c=c, dt=dt: c.view(dt).astype(np.float32),
            "numba 1 thread": lambda d=dec_s, c=c, o=vals: d(c, o),
            "numba prange": lambda d=dec_p, c=c, o=vals: d(c, o),
        }))
    x2 = x.reshape(-1, 512)
    for s in SCHEMES:
        rows.append((f"quantize {s}", {
            "ml_dtypes": lambda s=s: blocks.quantize(x2, s),  # numpy reference
            "numba prange": lambda s=s: blocks_jit.quantize(x2, s),
        }))
    return rows


def _measure(rows, rounds: int) -> dict[tuple[str, str], float]:
    for _, comp in rows:  # compile and warm up
        for fn in comp.values():
            fn()
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):  # interleaved: every competitor once per round
        for name, comp in rows:
            for who, fn in comp.items():
                t0 = time.perf_counter()
                fn()
                times.setdefault((name, who), []).append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1 << 24)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=numba.config.NUMBA_NUM_THREADS)
    a = p.parse_args()
    numba.set_num_threads(a.threads)
    x = np.random.default_rng(0).standard_normal(a.n).astype(np.float32)
    rows = _cases(x)
    med = _measure(rows, a.rounds)
    print(f"n = {a.n} float32 N(0,1) elements, {a.rounds} interleaved rounds (median), "
          f"numba threads = {a.threads}, load average {os.getloadavg()[0]:.1f}")
    print(f"| {'operation':24} | {'competitor':15} | {'Melem/s':>8} | {'vs ml_dtypes':>12} |")
    print(f"|{'-' * 26}|{'-' * 17}|{'-' * 10}|{'-' * 14}|")
    for name, comp in rows:
        base = med[(name, "ml_dtypes")]
        for who in comp:
            t = med[(name, who)]
            label = "numpy+ml_dtypes" if name.startswith("quantize") and who == "ml_dtypes" \
                else who
            print(f"| {name:24} | {label:15} | {a.n / t / 1e6:8.0f} | {base / t:11.1f}x |")


if __name__ == "__main__":
    main()
