"""2-d max and average pooling (N, C, H, W), forward and backward, no padding. Window size
and stride are run-time values (S = [kernel, stride]) and every size is symbolic, so each
kernel compiles once per dtype and kind. Each block handles `block` consecutive elements of
the flattened output (forward) or input (backward), splitting their indices once.

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
    def pool2d_fwd(X: T.Tensor((N, C, H, W), dtype), S: T.Tensor((2,), "int32"),
                   Y: T.Tensor((N, C, OH, OW), dtype), Arg: T.Tensor((N, C, OH, OW), "int32")):
        total = N * C * OH * OW
        with T.Kernel(T.ceildiv(total, block), threads=128) as bx:
            size, stride = S[0], S[1]
            Xf = T.Tensor((N * C * H * W,), dtype, X.data)
            Yf = T.Tensor((total,), dtype, Y.data)
            Argf = T.Tensor((total,), "int32", Arg.data)
            best = T.alloc_fragment((block,), dtype)
            arg = T.alloc_fragment((block,), "int32")
            top = T.alloc_fragment((block,), "int32")  # flat index of the window's corner
            at = T.alloc_fragment((block,), "int32")  # its offset in the plane
            for i in T.Parallel(block):
                e = bx * block + i
                at[i] = e % (OH * OW) // OW * stride * W + e % OW * stride
                top[i] = e // (OH * OW) * H * W + at[i]
                best[i] = -T.infinity(dtype) if kind == "max" else 0.0
                arg[i] = 0
            for a in T.serial(size):
                for b in T.serial(size):
                    for i in T.Parallel(block):
                        v = T.if_then_else(bx * block + i < total, Xf[top[i] + a * W + b], 0.0)
                        if kind == "max":
                            take = v > best[i]
                            arg[i] = T.if_then_else(take, at[i] + a * W + b, arg[i])
                            best[i] = T.if_then_else(take, v, best[i])
                        else:
                            best[i] = best[i] + v
            if kind == "avg":
                for i in T.Parallel(block):
                    best[i] = best[i] / T.cast(size * size, dtype)
            T.copy(best, Yf[bx * block])
            T.copy(arg, Argf[bx * block])

    return pool2d_fwd


@tilepy.jit
def pool2d_bwd(kind="max", block=256, dtype="float32"):
    N, C, H, W = T.symbolic("N"), T.symbolic("C"), T.symbolic("H"), T.symbolic("W")
    OH, OW = T.symbolic("OH"), T.symbolic("OW")

    @T.prim_func
    def pool2d_bwd(dY: T.Tensor((N, C, OH, OW), dtype), Arg: T.Tensor((N, C, OH, OW), "int32"),
                   S: T.Tensor((2,), "int32"), dX: T.Tensor((N, C, H, W), dtype)):
        total = N * C * H * W
        with T.Kernel(T.ceildiv(total, block), threads=128) as bx:
            size, stride = S[0], S[1]
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
                oh0[i] = T.if_then_else(e < total, pix[i] // W // stride, -size - 1)
                ow0[i] = pix[i] % W // stride
                plane[i] = e // (H * W) * OH * OW
                acc[i] = 0.0
            for a in T.serial(span):
                for b in T.serial(span):
                    for i in T.Parallel(block):
                        oh, ow = oh0[i] - (span - 1) + a, ow0[i] - (span - 1) + b
                        ok = (oh >= 0 and ow >= 0 and oh < OH and ow < OW
                              and pix[i] // W - oh * stride < size
                              and pix[i] % W - ow * stride < size)
                        o = plane[i] + oh * OW + ow
                        if kind == "max":
                            hit = T.if_then_else(ok, Argf[o], -1) == pix[i]
                            acc[i] = acc[i] + T.if_then_else(hit, dYf[o], 0.0)
                        else:
                            g = T.if_then_else(ok, dYf[o], 0.0)
                            acc[i] = acc[i] + g / T.cast(size * size, dtype)
            T.copy(acc, dXf[bx * block])

    return pool2d_bwd
