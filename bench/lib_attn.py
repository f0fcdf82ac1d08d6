"""Library bench, attention rows (issue #18): the training attention's forward and backward
(tilepy.kernels.attention_api, fast mode and exact) against torch SDPA's forward and
autograd backward, every output first checked against its derived bound: self-attention
(causal or not), cross-attention (twice as many keys as queries) and bfloat16 inputs.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/lib_attn.py [--quick]

torch is optional (its rows say so when it is absent); torch and Numba run with the same
thread count (NUMBA_NUM_THREADS).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib_sparse import _table, best_of  # noqa: E402

import tilepy  # noqa: E402
from tilepy.kernels.attention_api import attention, attention_backward  # noqa: E402
from tilepy.kernels.checks_lib import attention_train_case  # noqa: E402

TILES = {"fast": (256, 256, 256), "exact": (64, 64, 64)}  # block_M, block_N, bwd block
# Fast forward without a causal mask: query tiles of up to 512 rows, so each head's K and V
# tiles are loaded once, 4-6% less CPU than 256 rows on one thread (docs/perf-log.md, s13);
# a causal mask would leave half of a 512-row tile's products masked.
FAST_FWD_ROWS = 512


def _torch(threads: int):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return torch


def _fns(case, mode):
    i, (bm, bn, bb) = case.inputs, TILES[mode]
    if mode == "fast" and not i["causal"]:
        bm = max(bm, min(FAST_FWD_ROWS, i["q"].shape[-2]))
    args = (i["q"], i["k"], i["v"])
    kw = {"causal": i["causal"], "cu_seqlens": i["cu_seqlens"],
          "cu_seqlens_k": i["cu_seqlens_k"]}
    with tilepy.backend("jit", fast=mode == "fast"):
        o, lse = attention(*args, block_M=bm, block_N=bn, **kw)
        grads = attention_backward(*args, o, lse, i["do"], block=bb, **kw)
    checked = case.check(dict(zip(("o", "lse", "dq", "dk", "dv"), (o, lse, *grads))))
    bad = {k: v for k, v in checked.items() if not v[2]}
    if bad:
        raise AssertionError(f"{case.name} {mode}: outside the bound: {bad}")
    worst = max(v[1] for v in checked.values())

    def fwd():
        with tilepy.backend("jit", fast=mode == "fast"):
            attention(*args, block_M=bm, block_N=bn, **kw)

    def bwd():
        with tilepy.backend("jit", fast=mode == "fast"):
            attention_backward(*args, o, lse, i["do"], block=bb, **kw)
    return fwd, bwd, f"ok, max err/bound {worst:.2g} (o, lse, dq, dk, dv)"


def _torch_fns(torch, case):
    i = case.inputs
    dt = torch.bfloat16 if i["q"].dtype.name == "bfloat16" else torch.float32

    def tensor(x):  # bfloat16 values convert exactly through float32
        return torch.from_numpy(x.astype(np.float32)).to(dt)
    q, k, v = (tensor(i[n]).requires_grad_() for n in ("q", "k", "v"))
    do = tensor(i["do"])
    g = q.shape[1] // k.shape[1]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    fwd = (lambda: sdpa(q, k, v, is_causal=i["causal"], enable_gqa=g > 1))
    out = fwd()

    def bwd():
        torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
    return fwd, bwd


CONFIGS = [  # (heads, kv heads, causal, keys per query, dtype)
    (8, 8, False, 1, "float32"), (8, 8, True, 1, "float32"),  # causal is a run-time flag
    (8, 8, False, 2, "float32"),  # cross-attention: 2S keys for S queries
    (8, 8, False, 1, "bfloat16"),
]


def _name(H, KH, S, causal, per, dtype):
    keys = f" cross ({per * S} keys)" if per != 1 else ""
    lowp = " bf16" if dtype == "bfloat16" else ""
    return f"attention 1x{H}x{S}x64{lowp}{keys}{' causal' if causal else ''} KV heads {KH}"


def rows(quick: bool = False) -> list[dict]:
    import numba

    threads = numba.config.NUMBA_NUM_THREADS
    torch = _torch(threads)
    S = 256 if quick else 512
    out = []
    for H, KH, causal, per, dtype in CONFIGS:
        case = attention_train_case(np.random.default_rng(0), [S], H, KH, 64, causal, False,
                                    [per * S], dtype)
        fast_f, fast_b, check = _fns(case, "fast")
        ex_f, ex_b, check_e = _fns(case, "exact")
        fns = {"fast_f": fast_f, "fast_b": fast_b, "ex_f": ex_f, "ex_b": ex_b}
        if torch is not None:
            fns["peer_f"], fns["peer_b"] = _torch_fns(torch, case)
        t = best_of(fns, 3 if quick else 5)
        name = _name(H, KH, S, causal, per, dtype)
        for part in ("f", "b"):
            out.append({"kernel": f"{name} {'forward' if part == 'f' else 'backward'}",
                        "check": f"fast {check}; exact {check_e}",
                        "fast": t[f"fast_{part}"], "exact": t[f"ex_{part}"],
                        "peer": t.get(f"peer_{part}", float("nan")),
                        "peer_name": "torch SDPA" + (" autograd" if part == "b" else "")
                        if torch is not None else "torch not installed",
                        "goal": ">= 1x peer", "note": f"{threads} threads"})
    return out


if __name__ == "__main__":
    print(_table(rows("--quick" in sys.argv)))
