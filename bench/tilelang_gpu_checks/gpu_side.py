"""GPU half (run where CUDA, torch and Triton are; FOLDER holds the two Mamba examples and
einops): the examples' torch references in fp16 on CUDA for cpu_side.npz's inputs, saved to
gpu_refs.npz; and the split-K gemm of TileLang's gemm_splitk example written in Triton (fp16
inputs, fp32 tl.dot accumulation, each of 4 partials rounded to fp16 and added with fp16
atomics, 1024^3, 128x128x32 tiles), checked as the example checks (torch.testing.assert_close
at rtol=atol=1e-2 against a @ b), for 10 seeds: splitk.json.

    python gpu_side.py FOLDER OUT_DIR
"""
import importlib
import json
import os
import sys
import types

import numpy as np
import torch
import triton
import triton.language as tl


def stub_tilelang():
    """The examples import tilelang at the top; only their ref_program is used here."""
    def ident(*a, **k):
        return lambda f: f
    top, tuner, lang = (types.ModuleType(n) for n in
                        ("tilelang", "tilelang.autotuner", "tilelang.language"))
    top.jit, tuner.autotune, tuner.__all__ = ident, ident, ["autotune"]
    top.autotuner, top.language = tuner, lang
    sys.modules.update({"tilelang": top, "tilelang.autotuner": tuner, "tilelang.language": lang})


def mamba_refs(out_dir: str) -> None:
    data = np.load("cpu_side.npz")
    res = {}
    for mod, tag, n in (("linear_attention_example_mamba_chunk_state", "state", 4),
                        ("linear_attention_example_mamba_chunk_scan", "scan", 7)):
        m = importlib.import_module(mod)
        for seed in range(4):
            ins = [torch.from_numpy(data[f"{tag}_s{seed}_in{i}"]).cuda() for i in range(n)]
            res[f"{tag}_s{seed}_gpu16"] = m.ref_program(*ins).cpu().numpy()
    np.savez_compressed(os.path.join(out_dir, "gpu_refs.npz"), **res)


@triton.jit
def splitk_kernel(a, b, c, M, N, K, SPLIT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                  BK: tl.constexpr):
    pm, pn, pk = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    span = K // SPLIT
    for k0 in range(pk * span, (pk + 1) * span, BK):
        rk = k0 + tl.arange(0, BK)
        acc += tl.dot(tl.load(a + rm[:, None] * K + rk[None, :]),
                      tl.load(b + rk[:, None] * N + rn[None, :]))
    tl.atomic_add(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


def splitk(out_dir: str) -> None:
    stats = []
    for seed in range(10):
        torch.manual_seed(seed)
        A, B = (torch.randn(1024, 1024).cuda().half() for _ in range(2))
        C = torch.zeros(1024, 1024, device="cuda", dtype=torch.float16)
        splitk_kernel[(8, 8, 4)](A, B, C, 1024, 1024, 1024, SPLIT=4, BM=128, BN=128, BK=32)
        ref = A @ B
        close = torch.isclose(C.float(), ref.float(), rtol=1e-2, atol=1e-2)
        stats.append(dict(seed=seed, passed=bool(close.all()), mismatched=int((~close).sum()),
                          max_abs_err=float((C.float() - ref.float()).abs().max())))
    info = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                triton=triton.__version__, splitk=stats)
    with open(os.path.join(out_dir, "splitk.json"), "w") as f:
        json.dump(info, f, indent=1)


if __name__ == "__main__":
    folder, out_dir = sys.argv[1], sys.argv[2]
    sys.path.insert(0, folder)
    stub_tilelang()
    mamba_refs(out_dir)
    splitk(out_dir)
