"""`tilelang.quantize.utils`: host-side helpers of TileLang's quantized examples, on torch
tensors: random 4-bit weights (gen_quant4), packing low-bit values into bytes
(general_compress) and the nibble interleave its fast decoders expect (interleave_weight)."""

from __future__ import annotations


def gen_quant4(k: int, n: int, groupsize: int = -1):
    """Random float16 weights (k, n), 4-bit quantized per group of rows: returns the
    original, a torch Linear holding the dequantized ones, the scales and the signed codes."""
    import torch

    maxq = 16
    w = torch.randn((k, n), dtype=torch.half, device="cpu")
    original = w.clone()
    g = k if groupsize == -1 else groupsize
    grouped = w.reshape((-1, g, n)).permute(1, 0, 2).reshape((g, -1))
    s = torch.max(torch.abs(grouped), 0, keepdim=True)[0] * (2 / maxq)
    q = torch.clamp(torch.round(grouped / s).int() + maxq // 2, 0, maxq)
    ref = (q - maxq // 2).half() * s

    def back(x):
        return x.reshape((g, -1, n)).permute(1, 0, 2).reshape((k, n)).contiguous()

    ref, q = back(ref), back(q)
    linear = torch.nn.Linear(k, n, bias=False)
    linear.weight.data = ref.t()
    return original, linear, s.reshape((-1, n)).contiguous(), q - maxq // 2


def general_compress(lowprecision_weight, source_bits: int = 4, storage_dtype=None):
    """Packs `source_bits`-wide values along the last axis into int8 bytes, the first value
    in the lowest bits, then views them as `storage_dtype` (default int8)."""
    import torch

    per = 8 // source_bits
    w = lowprecision_weight
    if w.dtype == torch.float16:
        w = w.to(torch.int8)
    out = torch.zeros((*w.shape[:-1], w.shape[-1] // per), dtype=torch.int8, device=w.device)
    for j in range(out.shape[-1]):
        for k in range(per):
            out[..., j] |= (w[..., j * per + k] << (source_bits * k)).to(torch.int8)
    return out.to(storage_dtype or torch.int8)


def interleave_weight(qweight, nbits: int = 4, target_dtype: str = "float16"):
    """Reorders the `nbits` fields of each 32-bit word of `qweight` (int8 storage) into the
    order TileLang's fast decoders read: field `o` moves to bit
    `(o % groups) * stride + (o // groups) * nbits` (stride 16 for float16, 8 for int8,
    groups = 32 // stride); 1- and 2-bit fields get the decoders' extra byte shuffles."""
    import torch

    if target_dtype not in ("float16", "int8"):
        raise ValueError(f"interleave_weight: expected target_dtype float16 or int8; "
                         f"got {target_dtype!r}")
    words = qweight.view(torch.int32)
    out = torch.zeros_like(words)
    stride = 8 if target_dtype == "int8" else 16
    groups = 32 // stride
    mask = (1 << nbits) - 1
    for o in range(groups * (stride // nbits)):
        shift = (o % groups) * stride + (o // groups) * nbits
        out |= ((words >> (nbits * o)) & mask) << shift
    moves = _SHUFFLES.get((nbits, target_dtype))
    if moves is None:
        return out.view(torch.int8)
    keep, pieces = moves
    res = out & _i32(keep)
    for src_mask, down, up in pieces:
        res |= ((out & _i32(src_mask)) >> down) << up
    return res.view(torch.int8)


def _i32(x: int):
    import torch

    return torch.tensor(x - (1 << 32) if x >= 1 << 31 else x, dtype=torch.int32)


# (bits, target): (bits kept in place, [(source mask, right shift, left shift)...])
_SHUFFLES = {
    (1, "int8"): (0xF0F00F0F, [(0x000000F0, 4, 16), (0x0000F000, 12, 24),
                               (0x000F0000, 16, 4), (0x0F000000, 24, 12)]),
    (2, "float16"): (0xFF0000FF, [(0x0000FF00, 8, 16), (0x00FF0000, 16, 8)]),
    (1, "float16"): (0xF000000F, [(0x000000F0, 4, 8), (0x00000F00, 8, 16),
                                  (0x0000F000, 12, 24), (0x000F0000, 16, 4),
                                  (0x00F00000, 20, 12), (0x0F000000, 24, 20)]),
}
