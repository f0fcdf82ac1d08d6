"""CPU half of the check of TileLang's Mamba chunk-state / chunk-scan examples against a GPU
reference (docs/migration.md, "The three checks that miss on CPU numerics"): runs the
examples' kernels through tilepy's compatibility mode (JIT) on seeded normal fp16 inputs,
and their own torch reference on the CPU in fp16 and in float64; saves all of it to
cpu_side.npz for gpu_side.py. The examples are fetched separately, unchanged.

    python bench/tilelang_gpu_checks/cpu_side.py FOLDER   (FOLDER holds the two examples)

Needs torch and einops (the examples import them; neither is a tilepy dependency).
"""
import importlib
import sys

import numpy as np
import torch

import tilepy.compat as compat

SIZES = dict(batch=1, heads=2, groups=1, seq_len=512, chunk_size=256, dim=64, dstate=128)
STATE = "linear_attention_example_mamba_chunk_state"
SCAN = "linear_attention_example_mamba_chunk_scan"


def build(mod):
    """The example's kernel at SIZES with the block sizes its main uses, and its inputs' shapes."""
    m = importlib.import_module(mod)
    b, h, g, L, cs, d, n = SIZES.values()
    nc = L // cs
    if mod == STATE:
        k = m.chunk_state_fwd(b, L, cs, g, h, d, n, block_M=64, block_N=128, block_K=64,
                              num_stages=4, threads=128)
        return m, k, [(b, L, g, n), (b, L, h, d), (b, h, nc, cs), (b, h, nc, cs)]
    k = m.chunk_scan_fwd(b, L, cs, g, h, d, n, block_M=64, block_N=64, block_K=64,
                         block_Dstate=128, num_stages=2, threads=128)
    return m, k, [(b, nc, g, cs, cs), (b, L, h, d), (b, h, nc, cs), (b, h, nc, cs),
                  (b, L, g, n), (b, nc, h, d, n), (h,)]


def main(folder: str) -> None:
    compat.install(cuda_to_cpu=True)
    sys.path.insert(0, folder)
    out = {}
    for mod in (STATE, SCAN):
        m, k, shapes = build(mod)
        tag = mod.rsplit("_", 1)[1]
        for seed in range(4):
            rng = np.random.default_rng(seed)
            ins = [torch.from_numpy(rng.standard_normal(s).astype(np.float16)) for s in shapes]
            out[f"{tag}_s{seed}_tilepy"] = k(*ins).numpy()
            out[f"{tag}_s{seed}_cpu16"] = m.ref_program(*ins).numpy()
            out[f"{tag}_s{seed}_f64"] = m.ref_program(*[t.double() for t in ins]).numpy()
            for i, t in enumerate(ins):
                out[f"{tag}_s{seed}_in{i}"] = t.numpy()
    np.savez_compressed("cpu_side.npz", **out)


if __name__ == "__main__":
    main(sys.argv[1])
