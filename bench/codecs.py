"""Codec throughput: tilepy's Numba codecs vs ml_dtypes `astype`, and block quantisation
(Numba vs the numpy reference, which rounds with ml_dtypes).

Prints one table of elements/s (median of interleaved rounds), the ratio to ml_dtypes and
the memory traffic (bytes read + written, GB/s); the last row is a plain `np.copyto` of a
float32 array, the machine's streaming bandwidth in the same run. "numba prange" is the
library's array path (`encode_array` / `decode_array` into a preallocated `out`).
Usage: python bench/codecs.py [--n 16777216] [--rounds 7] [--threads 2] [--formats bfloat16]
Run as `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/codecs.py` (those two
variables are unset for this command only; nothing here uses BLAS).
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


def _cases(x: np.ndarray, formats) -> list[tuple[str, int, dict]]:
    """(row name, bytes moved, {competitor: zero-argument callable}); our outputs are
    preallocated (ml_dtypes' astype allocates its own, as a caller would)."""
    rows = []
    for fmt in formats:
        f = get_format(fmt)
        dt = np.dtype(getattr(ml_dtypes, fmt))
        codes = np.empty(x.size, f.storage)
        vals = np.empty(x.size, np.float32)
        enc_s, dec_s = _serial_kernels(fmt)
        c = x.astype(dt).view(f.storage)
        moved = x.size * (4 + f.storage.itemsize)
        rows.append((f"encode {fmt}", moved, {
            "ml_dtypes": lambda dt=dt: x.astype(dt),
            "numba 1 thread": lambda e=enc_s, o=codes: e(x, o),
            "numba prange": lambda o=codes, fmt=fmt: codecs.encode_array(x, fmt, out=o),
        }))
        rows.append((f"decode {fmt}", moved, {
            "ml_dtypes": lambda c=c, dt=dt: c.view(dt).astype(np.float32),
            "numba 1 thread": lambda d=dec_s, c=c, o=vals: d(c, o),
            "numba prange": lambda c=c, o=vals, fmt=fmt: codecs.decode_array(c, fmt, out=o),
        }))
    x2 = x.reshape(-1, 512)
    for s in SCHEMES if formats == FORMATS else []:
        rows.append((f"quantize {s}", 0, {
            "ml_dtypes": lambda s=s: blocks.quantize(x2, s),  # numpy reference
            "numba prange": lambda s=s: blocks_jit.quantize(x2, s),
        }))
    dst = np.empty_like(x)
    rows.append(("copy float32", 8 * x.size, {"np.copyto": lambda: np.copyto(dst, x)}))
    return rows


def _measure(rows, rounds: int) -> dict[tuple[str, str], float]:
    for _, _, comp in rows:  # compile and warm up
        for fn in comp.values():
            fn()
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):  # interleaved: every competitor once per round
        for name, _, comp in rows:
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
    p.add_argument("--formats", nargs="+", default=FORMATS, choices=FORMATS)
    a = p.parse_args()
    numba.set_num_threads(a.threads)
    x = np.random.default_rng(0).standard_normal(a.n).astype(np.float32)
    rows = _cases(x, a.formats)
    med = _measure(rows, a.rounds)
    print(f"n = {a.n} float32 N(0,1) elements, {a.rounds} interleaved rounds (median), "
          f"numba threads = {a.threads}, load average {os.getloadavg()[0]:.1f}")
    print(f"| {'operation':24} | {'competitor':15} | {'Melem/s':>8} | {'vs ml_dtypes':>12} "
          f"| {'GB/s':>6} |")
    print(f"|{'-' * 26}|{'-' * 17}|{'-' * 10}|{'-' * 14}|{'-' * 8}|")
    for name, moved, comp in rows:
        base = med.get((name, "ml_dtypes"))
        for who in comp:
            t = med[(name, who)]
            label = "numpy+ml_dtypes" if name.startswith("quantize") and who == "ml_dtypes" \
                else who
            ratio = f"{base / t:11.1f}x" if base else f"{'':12}"
            gbs = f"{moved / t / 1e9:6.1f}" if moved else f"{'':6}"
            print(f"| {name:24} | {label:15} | {a.n / t / 1e6:8.0f} | {ratio} | {gbs} |")


if __name__ == "__main__":
    main()
