"""Captures real GPU outputs (cuBLAS, cuDNN, SDPA, Triton) as test data for tilepy.validate.

Run on a machine with a CUDA GPU and PyTorch: `python capture.py OUTDIR`. Each case is one
`<case>.npz`: its inputs under their role names (a, b, scale_a, scale_b, x, weight, bias,
q, k, v, target), the GPU's output under `out`, and `meta`, a JSON string: op, the dtypes of
inputs and output, the backend's settings (allow_tf32, fast_accum, causal, stride, ...),
versions and GPU name. Arrays of formats numpy lacks (bfloat16, float8_*) are stored as
their bit patterns (uint16/uint8); meta["dtypes"] names the real format of every array.
MANIFEST.json, written last, lists every case with its meta (and the cases that failed).
Inputs come from numpy's seeded generator, so they are the same on every run.
"""

import json
import os
import sys
import traceback

import numpy as np
import torch
import torch.nn.functional as F

DEV = "cuda"
BITS = {torch.bfloat16: ("bfloat16", torch.int16, np.uint16),
        torch.float8_e4m3fn: ("float8_e4m3fn", torch.uint8, np.uint8),
        torch.float8_e5m2: ("float8_e5m2", torch.uint8, np.uint8)}
PLAIN = {torch.float16: "float16", torch.float32: "float32", torch.float64: "float64",
         torch.int64: "int64", torch.int32: "int32"}


def to_numpy(t: torch.Tensor):
    """(numpy array, format name): bit patterns for formats numpy lacks."""
    t = t.detach().to("cpu").contiguous()
    if t.dtype in BITS:
        name, view, np_bits = BITS[t.dtype]
        return t.view(view).numpy().view(np_bits), name
    return t.numpy(), PLAIN[t.dtype]


def randn(rng, shape, dtype, scale=1.0):
    """A seeded standard-normal tensor on the GPU, rounded to `dtype` (nearest-even)."""
    x = torch.from_numpy((rng.standard_normal(shape) * scale).astype(np.float32))
    return x.to(dtype).to(DEV)


def settings():
    return {"allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
            "fp16_reduced_precision_reduction":
                torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
            "bf16_reduced_precision_reduction":
                torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction}


def save(outdir, case, op, arrays, config, manifest):
    torch.cuda.synchronize()
    data, dtypes = {}, {}
    for role, t in arrays.items():
        data[role], dtypes[role] = to_numpy(t)
    meta = {"case": case, "op": op, "dtypes": dtypes, "shapes": {k: list(v.shape)
            for k, v in data.items()}, "config": config, "settings": settings(),
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name()}
    np.savez_compressed(os.path.join(outdir, case + ".npz"), meta=json.dumps(meta), **data)
    manifest["cases"].append(meta)


def gemms(outdir, manifest):
    rng = np.random.default_rng(1)
    M, K, N = 64, 512, 64
    a, b = randn(rng, (M, K), torch.float32), randn(rng, (K, N), torch.float32)
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        out = a @ b
        save(outdir, f"gemm_fp32_tf32{'on' if tf32 else 'off'}", "gemm",
             {"a": a, "b": b, "out": out}, {"accumulate": "tf32" if tf32 else "fp32"}, manifest)
    torch.backends.cuda.matmul.allow_tf32 = False
    K = 1024
    for dt, name in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
        a, b = randn(rng, (M, K), dt), randn(rng, (K, N), dt)
        save(outdir, f"gemm_{name}", "gemm", {"a": a, "b": b, "out": a @ b},
             {"accumulate": "fp32", "out_dtype": name}, manifest)
        out32 = torch.matmul(a.float(), b.float())  # the same inputs, fp32 math
        save(outdir, f"gemm_{name}_in_fp32_out", "gemm", {"a": a, "b": b, "out": out32},
             {"accumulate": "fp32", "note": "inputs upcast to fp32 before the matmul"},
             manifest)


def scaled_mms(outdir, manifest):
    rng = np.random.default_rng(2)
    M, K, N = 32, 4096, 32
    # values spread over e4m3's range so accumulation differences show
    a = randn(rng, (M, K), torch.float32, 4.0).to(torch.float8_e4m3fn)
    bt = randn(rng, (N, K), torch.float32, 4.0).to(torch.float8_e4m3fn)
    b = bt.t()  # column-major K x N, as cuBLASLt wants
    sa = torch.tensor(0.5, device=DEV)
    sb = torch.tensor(0.25, device=DEV)
    for fast in (True, False):
        for out_dt, oname in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
            out = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=out_dt,
                                   use_fast_accum=fast)
            save(outdir, f"scaled_mm_e4m3_{'fast' if fast else 'promoted'}_{oname}",
                 "scaled_gemm", {"a": a, "b": b.contiguous(), "scale_a": sa, "scale_b": sb,
                                 "out": out},
                 {"fast_accum": fast, "accumulate": "fast" if fast else "promote",
                  "out_dtype": oname}, manifest)


def rowwise(outdir, manifest):
    rng = np.random.default_rng(3)
    R, C = 64, 512
    for dt, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16"),
                     (torch.float16, "fp16")):
        x = randn(rng, (R, C), dt, 3.0)
        save(outdir, f"softmax_{name}", "softmax", {"x": x, "out": torch.softmax(x, -1)},
             {"dim": -1}, manifest)
        w, bias = randn(rng, (C,), dt), randn(rng, (C,), dt)
        out = F.layer_norm(x, (C,), w, bias, eps=1e-5)
        save(outdir, f"layernorm_{name}", "layernorm",
             {"x": x, "weight": w, "bias": bias, "out": out}, {"eps": 1e-5}, manifest)
        out = F.rms_norm(x, (C,), w, eps=1e-6)
        save(outdir, f"rmsnorm_{name}", "rmsnorm", {"x": x, "weight": w, "out": out},
             {"eps": 1e-6}, manifest)
        V = 1000
        logits = randn(rng, (R, V), dt, 2.0)
        target = torch.from_numpy(rng.integers(0, V, R)).to(DEV)
        loss = F.cross_entropy(logits, target, reduction="none")
        save(outdir, f"cross_entropy_{name}", "cross_entropy",
             {"x": logits, "target": target, "out": loss}, {"reduction": "none"}, manifest)


def attentions(outdir, manifest):
    rng = np.random.default_rng(4)
    B, H, S, D = 1, 4, 64, 64
    for dt, name in ((torch.bfloat16, "bf16"), (torch.float16, "fp16"),
                     (torch.float32, "fp32")):
        q, k, v = (randn(rng, (B, H, S, D), dt) for _ in range(3))
        for causal in (False, True):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            save(outdir, f"sdpa_{name}_{'causal' if causal else 'full'}", "attention",
                 {"q": q, "k": k, "v": v, "out": out},
                 {"causal": causal, "scale": 1 / np.sqrt(D)}, manifest)
    q = randn(rng, (B, 8, S, D), torch.bfloat16)
    k, v = (randn(rng, (B, 2, S, D), torch.bfloat16) for _ in range(2))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    save(outdir, "sdpa_bf16_gqa_causal", "attention", {"q": q, "k": k, "v": v, "out": out},
         {"causal": True, "gqa": True, "scale": 1 / np.sqrt(D)}, manifest)


def convs(outdir, manifest):
    rng = np.random.default_rng(5)
    specs = [("plain", dict(stride=1, padding=1, dilation=1, groups=1), 8),
             ("s2_d2_g2", dict(stride=2, padding=2, dilation=2, groups=2), 4)]
    for label, kw, cin_g in specs:
        x32 = randn(rng, (2, 8, 16, 16), torch.float32)
        w32 = randn(rng, (16, cin_g, 3, 3), torch.float32)
        for tf32 in (False, True):
            torch.backends.cudnn.allow_tf32 = tf32
            out = F.conv2d(x32, w32, **kw)
            save(outdir, f"conv2d_nchw_{label}_fp32_tf32{'on' if tf32 else 'off'}", "conv2d",
                 {"x": x32, "weight": w32, "out": out},
                 {**kw, "layout": "NCHW", "accumulate": "tf32" if tf32 else "fp32"}, manifest)
        torch.backends.cudnn.allow_tf32 = False
        xb, wb = x32.to(torch.bfloat16), w32.to(torch.bfloat16)
        out = F.conv2d(xb, wb, **kw)
        save(outdir, f"conv2d_nchw_{label}_bf16", "conv2d", {"x": xb, "weight": wb, "out": out},
             {**kw, "layout": "NCHW", "accumulate": "fp32", "out_dtype": "bf16"}, manifest)
        xl = xb.contiguous(memory_format=torch.channels_last)
        wl = wb.contiguous(memory_format=torch.channels_last)
        out = F.conv2d(xl, wl, **kw).permute(0, 2, 3, 1)  # NHWC
        save(outdir, f"conv2d_nhwc_{label}_bf16", "conv2d",
             {"x": xb.permute(0, 2, 3, 1), "weight": wb.permute(0, 2, 3, 1), "out": out},
             {**kw, "layout": "NHWC", "weight_layout": "OHWI", "accumulate": "fp32",
              "out_dtype": "bf16"}, manifest)


def tritons(outdir, manifest):
    import triton
    import triton.language as tl

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
            b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty))

    @triton.jit
    def softmax_kernel(x_ptr, y_ptr, C: tl.constexpr):
        r = tl.program_id(0)
        cols = tl.arange(0, C)
        x = tl.load(x_ptr + r * C + cols).to(tl.float32)
        e = tl.exp(x - tl.max(x, 0))
        tl.store(y_ptr + r * C + cols, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty))

    rng = np.random.default_rng(6)
    M, K, N = 64, 1024, 64
    for dt, name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
        a, b = randn(rng, (M, K), dt), randn(rng, (K, N), dt)
        c = torch.empty((M, N), dtype=dt, device=DEV)
        matmul_kernel[(M // 32, N // 32)](a, b, c, M, N, K, BM=32, BN=32, BK=32)
        save(outdir, f"triton_matmul_{name}", "gemm", {"a": a, "b": b, "out": c},
             {"accumulate": "fp32", "out_dtype": name, "source": "triton tl.dot"}, manifest)
        x = randn(rng, (64, 512), dt, 3.0)
        y = torch.empty_like(x)
        softmax_kernel[(64,)](x, y, C=512)
        save(outdir, f"triton_softmax_{name}", "softmax", {"x": x, "out": y},
             {"dim": -1, "compute": "fp32", "source": "triton"}, manifest)


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    manifest = {"cases": [], "failed": []}
    for step in (gemms, scaled_mms, rowwise, attentions, convs, tritons):
        try:
            step(outdir, manifest)
        except Exception:  # record and go on: device time is scarce
            manifest["failed"].append({"step": step.__name__, "error": traceback.format_exc()})
            print(traceback.format_exc(), file=sys.stderr)
    with open(os.path.join(outdir, "MANIFEST.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)
    print(len(manifest["cases"]), "cases,", len(manifest["failed"]), "failed steps")


if __name__ == "__main__":
    main(sys.argv[1])
