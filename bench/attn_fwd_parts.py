"""Where the fast attention forward's time goes (issue #18): 1x8x512x64 float32, 256x256
tiles, one thread, CPU seconds (`time.process_time`, minimum over alternating rounds in one
process). Not a test.

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/attn_fwd_parts.py linkonce
    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/attn_fwd_parts.py parts

`linkonce`: the kernel compiled with jit/linkonce.py's one-pass LLVM compile and without it
(same generated source), side by side: compile CPU time, vector instructions in the block's
machine code, output bits, run time. `parts`: the generated source as it is and with parts
taken out (timing only, wrong values): both gemms, the online softmax (max, exp2, sum,
rescale), the K/V tile loads; torch SDPA's forward on one thread beside them if installed.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time

import numpy as np


def _case():
    from tilepy.kernels.attention_api import _flags
    from tilepy.kernels.attn_layout import describe, flat, tile_table
    from tilepy.kernels.flash_attn import attention_fwd

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 8, 512, 64), dtype=np.float32) for _ in range(3))
    heads, kvh, dim, cu_q, cu_k, varlen = describe(q, k, v, None, None)
    kern = attention_fwd(heads, kvh, dim, 256, 256, "float32")
    Q, K, V = flat(q), flat(k), flat(v)
    o, lse = np.empty_like(Q), np.empty(Q.shape[0], np.float32)
    tiles = tile_table(np.diff(cu_q), 256)
    args = (Q, K, V, cu_q, cu_k, tiles, _flags(False, varlen), o, lse)
    return kern, args, (o, lse)


def _best(fns: dict, rounds: int, calls: int = 3) -> dict:
    from tilepy.jit.blas import one_thread

    best = dict.fromkeys(fns, math.inf)
    with one_thread():
        for r in range(rounds):
            for k, f in (fns.items() if r % 2 else reversed(fns.items())):
                for _ in range(calls):
                    t0 = time.process_time()
                    f()
                    best[k] = min(best[k], time.process_time() - t0)
    return best


def linkonce(rounds: int = 40) -> None:
    from tilepy.jit import compiler, diskcache
    from tilepy.kernel import bind_arguments

    kern, args, outs = _case()
    arrays, sizes = bind_arguments(kern.func, args, None, False)
    built, bits = {}, {}
    for on in (False, True):
        key0, lo = diskcache.key, compiler.linked_once
        diskcache.key = lambda *a, _on=on, _k=key0, **kw: _k(*a, **kw) + ("on" if _on else "off")
        if not on:
            compiler.linked_once = lambda blocks: contextlib.nullcontext()
        t0 = time.process_time()
        try:
            built[on] = compiler._build(kern.func, True, "numba", False, True)
        finally:
            diskcache.key, compiler.linked_once = key0, lo
        seconds = time.process_time() - t0
        built[on](arrays, sizes)
        bits[on] = [a.copy() for a in outs]
        asm = "\n".join(built[on].fn.inspect_asm().values())
        block = [ln for ln in asm.splitlines() if "zmm" in ln or "ymm" in ln]
        print(f"linkonce {'on' if on else 'off'}: compile {seconds:.2f} s CPU, "
              f"{len(block)} vector instructions")
    same = all(np.array_equal(a.view(np.uint32), b.view(np.uint32))
               for a, b in zip(bits[False], bits[True]))
    print(f"outputs bit-identical: {same}")
    best = _best({on: (lambda c=c: c(arrays, sizes)) for on, c in built.items()}, rounds)
    print(f"run, one thread CPU: off {best[False] * 1e3:.3f} ms, on {best[True] * 1e3:.3f} ms")


G1 = "_gemm_acc(Q_s, K_s, scores, False, True, 0.0)"
G2 = "_gemm_acc(scores, V_s, acc_o, False, False, 1.0)"


def _variants(src: str) -> dict:
    rows = [ln for ln in src.splitlines() if "for fuse_r" in ln and "range(256)" in ln]
    fused = rows[-1]  # the KV loop's fused online softmax (the last fused row loop)
    no_softmax = src.replace(fused, fused.replace("range(256)", "range(0)"))
    loads = no_softmax
    for d in ("d_1", "d_2"):  # the K and V tile loads' column loops
        loads = loads.replace(f"for {d} in range(64):", f"for {d} in range(0):")
    return {"as generated": src, "no gemms": src.replace(G1, "pass").replace(G2, "pass"),
            "no softmax": no_softmax, "gemms only": loads}


def _torch_sdpa() -> dict:
    """torch SDPA's forward on the same shape, one thread, if torch is installed."""
    try:
        import torch
    except ImportError:
        return {}
    torch.set_num_threads(1)
    q, k, v = (torch.randn(1, 8, 512, 64) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return {"torch SDPA": lambda: sdpa(q, k, v)}


def parts(rounds: int = 20) -> None:
    import numba

    from tilepy.jit.fast import namespace, options
    from tilepy.jit.lower import lower
    from tilepy.jit.runtime import numba_namespace

    kern, args, _ = _case()
    low = lower(kern.func, fast=True, fuse=True)
    q = args[0]
    sizes = (q.shape[0], args[1].shape[0], args[3].size, args[5].shape[0])
    full = (*args, *(np.int64(s) for s in sizes))
    fns = {}
    numba.config.SLP_VECTORIZE = int(low.slp)  # as jit/compiler.py compiles it
    for name, src in _variants(low.source).items():
        ns = {**numba_namespace(low.codecs), **namespace("numba")}
        exec(compile(src, f"<{name}>", "exec"), ns)  # noqa: S102 (the generated source)
        for b in low.blocks:
            ns[b] = numba.njit(error_model="numpy", **options())(ns[b])
        f = numba.njit(parallel=True, error_model="numpy", **options())(ns[low.entry])
        f(*full)
        fns[name] = (lambda f=f: f(*full))
    fns.update(_torch_sdpa())
    for k, v in _best(fns, rounds).items():
        print(f"{k}: {v * 1e3:.3f} ms")


if __name__ == "__main__":
    from tilepy.precision.numba_target import configure

    configure()
    {"linkonce": linkonce, "parts": parts}[sys.argv[1] if len(sys.argv) > 1 else "parts"]()
