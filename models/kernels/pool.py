"""2-d max and average pooling (N, C, H, W), forward and backward, with zero padding.
Window, stride, padding and count_include_pad are run-time values (S = [kernel, stride,
pad, include_pad]) and every size is symbolic, so each kernel compiles once per dtype and
kind. Each block handles `block` consecutive elements of the flattened output (forward)
or input (backward), splitting their indices once.

Window (oh, ow) covers rows oh*stride - pad .. + kernel - 1 (columns likewise); padded
positions never win a max and add nothing to a sum. An average divides by kernel^2 when
include_pad is 1, else by the window's positions inside the input (PyTorch's rule).
The forward of max pooling also writes the argmax (the first maximum in the window, row-
major) as a flat index into the (H, W) plane; the backward gathers, for each input element,
the gradient of every window whose argmax (max) or area (avg) holds it: no atomics, and a
fixed order (window row, then column), so results do not depend on the schedule.
"""

import tilepy
import tilepy.language as T


@tilepy.jit
def pool2d_fwd(kind="max", block=256, dtype="float32"):
    N, C, H, W = T.symbolic("N"), T.symbolic("C"), T.symbolic("H"), T.symbolic("W")
    OH, OW = T.symbolic("OH"), T.symbolic("OW")

    @T.prim_func
    def pool2d_fwd(X: T.Tensor((N, C, H, W), dtype), S: T.Tensor((4,), "int32"),
                   Y: T.Tensor((N, C, OH, OW), dtype), Arg: T.Tensor((N, C, OH, OW), "int32")):
        total = N * C * OH * OW
        with T.Kernel(T.ceildiv(total, block), threads=128) as bx:
            size, stride, pad, include = S[0], S[1], S[2], S[3]
            Xf = T.Tensor((N * C * H * W,), dtype, X.data)
            Yf = T.Tensor((total,), dtype, Y.data)
            Argf = T.Tensor((total,), "int32", Arg.data)
            best = T.alloc_fragment((block,), dtype)
            arg = T.alloc_fragment((block,), "int32")
            row = T.alloc_fragment((block,), "int32")  # the window's first row, column
            col = T.alloc_fragment((block,), "int32")
            base = T.alloc_fragment((block,), "int32")  # flat index of the plane
            cnt = T.alloc_fragment((block,), "int32")  # positions inside the input
            for i in T.Parallel(block):
                e = bx * block + i
                row[i] = e % (OH * OW) // OW * stride - pad
                col[i] = e % OW * stride - pad
                base[i] = e // (OH * OW) * H * W
                best[i] = -T.infinity(dtype) if kind == "max" else 0.0
                arg[i] = 0
                cnt[i] = 0
            for a in T.serial(size):
                for b in T.serial(size):
                    for i in T.Parallel(block):
                        r, c = row[i] + a, col[i] + b
                        inside = (bx * block + i < total and r >= 0 and r < H and c >= 0
                                  and c < W)
                        v = T.if_then_else(inside, Xf[base[i] + r * W + c], 0.0)
                        if kind == "max":
                            take = inside and v > best[i]
                            arg[i] = T.if_then_else(take, r * W + c, arg[i])
                            best[i] = T.if_then_else(take, v, best[i])
                        else:
                            best[i] = best[i] + v
                            cnt[i] = cnt[i] + T.if_then_else(inside, 1, 0)
            if kind == "avg":
                for i in T.Parallel(block):
                    n = T.if_then_else(include > 0, size * size, T.max(cnt[i], 1))
                    best[i] = best[i] / T.cast(n, dtype)
            T.copy(best, Yf[bx * block])
            T.copy(arg, Argf[bx * block])

    return pool2d_fwd


@tilepy.jit
def pool2d_bwd(kind="max", block=256, dtype="float32"):
    N, C, H, W = T.symbolic("N"), T.symbolic("C"), T.symbolic("H"), T.symbolic("W")
    OH, OW = T.symbolic("OH"), T.symbolic("OW")

    @T.prim_func
    def pool2d_bwd(dY: T.Tensor((N, C, OH, OW), dtype), Arg: T.Tensor((N, C, OH, OW), "int32"),
                   S: T.Tensor((4,), "int32"), dX: T.Tensor((N, C, H, W), dtype)):
        total = N * C * H * W
        with T.Kernel(T.ceildiv(total, block), threads=128) as bx:
            size, stride, pad, include = S[0], S[1], S[2], S[3]
            span = T.ceildiv(size, stride)  # windows along one axis that can hold a pixel
            dYf = T.Tensor((N * C * OH * OW,), dtype, dY.data)
            Argf = T.Tensor((N * C * OH * OW,), "int32", Arg.data)
            dXf = T.Tensor((total,), dtype, dX.data)
            acc = T.alloc_fragment((block,), dtype)
            oh0 = T.alloc_fragment((block,), "int32")  # the last window row holding the pixel
            ow0 = T.alloc_fragment((block,), "int32")
            pix = T.alloc_fragment((block,), "int32")  # the pixel's offset in its plane
            plane = T.alloc_fragment((block,), "int32")  # offset of its plane in dY
            for i in T.Parallel(block):
                e = bx * block + i
                pix[i] = e % (H * W)
                oh0[i] = T.if_then_else(e < total, (pix[i] // W + pad) // stride, -size - 1)
                ow0[i] = (pix[i] % W + pad) // stride
                plane[i] = e // (H * W) * OH * OW
                acc[i] = 0.0
            for a in T.serial(span):
                for b in T.serial(span):
                    for i in T.Parallel(block):
                        oh, ow = oh0[i] - (span - 1) + a, ow0[i] - (span - 1) + b
                        r0, c0 = oh * stride - pad, ow * stride - pad
                        ok = (oh >= 0 and ow >= 0 and oh < OH and ow < OW
                              and pix[i] // W - r0 < size and pix[i] % W - c0 < size)
                        o = plane[i] + oh * OW + ow
                        if kind == "max":
                            hit = T.if_then_else(ok, Argf[o], -1) == pix[i]
                            acc[i] = acc[i] + T.if_then_else(hit, dYf[o], 0.0)
                        else:
                            inside = ((T.min(r0 + size, H) - T.max(r0, 0))
                                      * (T.min(c0 + size, W) - T.max(c0, 0)))
                            n = T.if_then_else(include > 0, size * size, T.max(inside, 1))
                            g = T.if_then_else(ok, dYf[o], 0.0)
                            acc[i] = acc[i] + g / T.cast(n, dtype)
            T.copy(acc, dXf[bx * block])

    return pool2d_bwd
