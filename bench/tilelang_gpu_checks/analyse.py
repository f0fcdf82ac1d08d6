"""The fraction of elements outside the Mamba examples' tolerance (rtol = atol = 1e-2) for
each pair of tilepy's kernel, the fp16 reference on the CPU and on the GPU, and the float64
reference: reads cpu_side.npz and gpu_refs.npz (cpu_side.py, gpu_side.py).

    python bench/tilelang_gpu_checks/analyse.py
"""
import numpy as np


def outside(a, b) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float((~np.isclose(a, b, rtol=1e-2, atol=1e-2)).mean())


def main() -> None:
    cpu, gpu = np.load("cpu_side.npz"), np.load("gpu_refs.npz")
    for tag in ("state", "scan"):
        for s in range(4):
            t, c16, f64 = (cpu[f"{tag}_s{s}_{k}"] for k in ("tilepy", "cpu16", "f64"))
            g16 = gpu[f"{tag}_s{s}_gpu16"]
            print(f"{tag} seed {s}: tilepy vs cpu16 {outside(t, c16):.4f}, vs gpu16 "
                  f"{outside(t, g16):.4f}; against float64: tilepy {outside(t, f64):.4f}, "
                  f"cpu16 {outside(c16, f64):.4f}, gpu16 {outside(g16, f64):.4f}")


if __name__ == "__main__":
    main()
