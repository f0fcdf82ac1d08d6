"""2-d max and average pooling (N, C, H, W), forward and backward, no padding. Window size
and stride are run-time values (S = [kernel, stride]) and every size is symbolic, so each
kernel compiles once per dtype and kind. Each block handles `block` consecutive elements
of the flattened output (forward) or input (backward).

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
            best = T.alloc_fragment((block,), dtype)
            arg = T.alloc_fragment((block,), "int32")
            if kind == "max":
                T.fill(best, -T.infinity(dtype))
            else:
                T.clear(best)
            T.clear(arg)
            for a in T.serial(size):
                for b in T.serial(size):
                    for i in T.Parallel(block):
                        e = bx * block + i
                        plane, oh, ow = e // (OH * OW), e % (OH * OW) // OW, e % OW
                        ih, iw = oh * stride + a, ow * stride + b
                        v = T.if_then_else(e < total, X[plane // C, plane % C, ih, iw], 0.0)
                        if kind == "max":
                            take = v > best[i]
                            arg[i] = T.if_then_else(take, ih * W + iw, arg[i])
                            best[i] = T.if_then_else(take, v, best[i])
                        else:
                            best[i] = best[i] + v
            for i in T.Parallel(block):
                e = bx * block + i
                if e < total:
                    plane, oh, ow = e // (OH * OW), e % (OH * OW) // OW, e % OW
                    if kind == "max":
                        Y[plane // C, plane % C, oh, ow] = best[i]
                    else:
                        Y[plane // C, plane % C, oh, ow] = best[i] / T.cast(size * size, dtype)
                    Arg[plane // C, plane % C, oh, ow] = arg[i]

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
            acc = T.alloc_fragment((block,), dtype)
            T.clear(acc)
            for a in T.serial(span):
                for b in T.serial(span):
                    for i in T.Parallel(block):
                        e = bx * block + i
                        plane, ih, iw = e // (H * W), e % (H * W) // W, e % W
                        oh, ow = ih // stride - (span - 1) + a, iw // stride - (span - 1) + b
                        ok = (e < total and oh >= 0 and ow >= 0 and oh < OH and ow < OW
                              and ih - oh * stride < size and iw - ow * stride < size)
                        n, c = plane // C, plane % C
                        if kind == "max":
                            hit = T.if_then_else(ok, Arg[n, c, oh, ow], -1) == ih * W + iw
                            acc[i] = acc[i] + T.if_then_else(hit, dY[n, c, oh, ow], 0.0)
                        else:
                            g = T.if_then_else(ok, dY[n, c, oh, ow], 0.0)
                            acc[i] = acc[i] + g / T.cast(size * size, dtype)
            dX_flat = T.Tensor((total,), dtype, dX.data)
            T.copy(acc, dX_flat[bx * block])

    return pool2d_bwd
