"""2-d max and average pooling (N, C, H, W), forward and backward, with zero padding.
Window, stride, padding and count_include_pad are run-time values (S = [kernel, stride,
pad, include_pad]) and every size is symbolic, so each kernel compiles once per dtype and
kind. Each block handles `block` consecutive elements of the flattened output (forward)
or input (backward), splitting their indices once, without integer divisions (`_div`), and
reads the input through indices its `if` bounds, so the JIT runs those loads unchecked.

Window (oh, ow) covers rows oh*stride - pad .. + kernel - 1 (columns likewise); padded
positions never win a max and add nothing to a sum. An average divides by kernel^2 when
include_pad is 1, else by the window's positions inside the input (PyTorch's rule).
The forward of max pooling also writes the argmax (the first maximum in the window, row-
major) as a flat index into the (H, W) plane; the backward gathers, for each input element,
the gradient of every window whose argmax (max) or area (avg) holds it: no atomics, and a
fixed order (window row, then column), so results do not depend on the schedule.
`pool2d_tiled_fwd` / `pool2d_tiled_bwd` serve windows that tile the input (stride =
window, no padding, sizes multiples of it) with the same values and fewer index splits.
"""

import tilepy
import tilepy.language as T


@T.macro
def _inverse(d):
    return 1.0 / T.cast(d, "float64")


@T.macro
def _div(e, d, inv):
    """e // d for 0 <= e < 2**30 and 1 <= d < 2**30 without an integer division (which does
    not vectorise): the float64 product with 1/d truncated is e // d or one below it
    (where 1/d rounded down and d divides e), so one test corrects it."""
    q = T.cast(T.cast(e, "float64") * inv, "int32")
    return q + T.if_then_else((q + 1) * d <= e, 1, 0)


@T.macro
def _take(kind, v, best, arg, i, pos):
    """One window position's value v at position `pos` into element i: max keeps the first
    maximum and its position (strictly greater replaces), avg adds."""
    if kind == "max":
        take = v > best[i]
        arg[i] = T.if_then_else(take, pos, arg[i])
        best[i] = T.if_then_else(take, v, best[i])
    else:
        best[i] = best[i] + v


@tilepy.jit
def pool2d_fwd(kind="max", block=256, dtype="float32"):
    N, C, H, W = T.symbolic("N"), T.symbolic("C"), T.symbolic("H"), T.symbolic("W")
    OH, OW = T.symbolic("OH"), T.symbolic("OW")

    @T.prim_func
    def pool2d_fwd(X: T.Tensor((N, C, H, W), dtype), S: T.Tensor((4,), "int32"),
                   Y: T.Tensor((N, C, OH, OW), dtype), Arg: T.Tensor((N, C, OH, OW), "int32")):
        total = N * C * OH * OW
        with T.Kernel(T.ceildiv(total, block), threads=128) as bx:
            window, stride, pad, include = S[0], S[1], S[2], S[3]
            size = N * C * H * W
            Xf = T.Tensor((size,), dtype, X.data)
            Yf = T.Tensor((total,), dtype, Y.data)
            Argf = T.Tensor((total,), "int32", Arg.data)
            best = T.alloc_fragment((block,), dtype)
            arg = T.alloc_fragment((block,), "int32")
            row = T.alloc_fragment((block,), "int32")  # the window's first row, column
            col = T.alloc_fragment((block,), "int32")
            base = T.alloc_fragment((block,), "int32")  # flat index of the plane
            cnt = T.alloc_fragment((block,), "int32")  # positions inside the input
            inv_plane, inv_w = _inverse(OH * OW), _inverse(OW)
            for i in T.Parallel(block):
                e = bx * block + i
                p = _div(e, OH * OW, inv_plane)
                q = e - p * (OH * OW)
                oh = _div(q, OW, inv_w)
                row[i] = oh * stride - pad
                col[i] = (q - oh * OW) * stride - pad
                base[i] = p * H * W
                best[i] = -T.infinity(dtype) if kind == "max" else 0.0
                arg[i] = 0
                cnt[i] = 0
            for a in T.serial(window):
                for b in T.serial(window):
                    for i in T.Parallel(block):
                        r, c = row[i] + a, col[i] + b
                        at = base[i] + r * W + c
                        inside = (bx * block + i < total and r >= 0 and r < H and c >= 0
                                  and c < W)
                        if inside and at >= 0 and at < size:  # (bounds at: unchecked loads)
                            v = Xf[at]
                            _take(kind, v, best, arg, i, r * W + c)
                            if kind != "max":
                                cnt[i] = cnt[i] + 1
            if kind == "avg":
                for i in T.Parallel(block):
                    n = T.if_then_else(include > 0, window * window, T.max(cnt[i], 1))
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
            outs = N * C * OH * OW
            dYf = T.Tensor((outs,), dtype, dY.data)
            Argf = T.Tensor((outs,), "int32", Arg.data)
            dXf = T.Tensor((total,), dtype, dX.data)
            acc = T.alloc_fragment((block,), dtype)
            oh0 = T.alloc_fragment((block,), "int32")  # the last window row holding the pixel
            ow0 = T.alloc_fragment((block,), "int32")
            pix = T.alloc_fragment((block,), "int32")  # the pixel's offset in its plane
            prow = T.alloc_fragment((block,), "int32")  # its row and column
            pcol = T.alloc_fragment((block,), "int32")
            plane = T.alloc_fragment((block,), "int32")  # offset of its plane in dY
            inv_plane, inv_w, inv_s = _inverse(H * W), _inverse(W), _inverse(stride)
            for i in T.Parallel(block):
                e = bx * block + i
                p = _div(e, H * W, inv_plane)
                pix[i] = e - p * (H * W)
                prow[i] = _div(pix[i], W, inv_w)
                pcol[i] = pix[i] - prow[i] * W
                oh0[i] = T.if_then_else(e < total, _div(prow[i] + pad, stride, inv_s), -size - 1)
                ow0[i] = _div(pcol[i] + pad, stride, inv_s)
                plane[i] = p * OH * OW
                acc[i] = 0.0
            for a in T.serial(span):
                for b in T.serial(span):
                    for i in T.Parallel(block):
                        oh, ow = oh0[i] - (span - 1) + a, ow0[i] - (span - 1) + b
                        r0, c0 = oh * stride - pad, ow * stride - pad
                        ok = (oh >= 0 and ow >= 0 and oh < OH and ow < OW
                              and prow[i] - r0 < size and pcol[i] - c0 < size)
                        o = plane[i] + oh * OW + ow
                        # a window not holding the pixel adds nothing (acc + 0.0 is acc:
                        # acc starts at +0.0, so it is never -0.0)
                        if ok and o >= 0 and o < outs:  # (bounds o: unchecked loads)
                            if kind == "max":
                                acc[i] = acc[i] + T.if_then_else(Argf[o] == pix[i], dYf[o], 0.0)
                            else:
                                inside = ((T.min(r0 + size, H) - T.max(r0, 0))
                                          * (T.min(c0 + size, W) - T.max(c0, 0)))
                                n = T.if_then_else(include > 0, size * size, T.max(inside, 1))
                                acc[i] = acc[i] + dYf[o] / T.cast(n, dtype)
            T.copy(acc, dXf[bx * block])

    return pool2d_bwd


@tilepy.jit
def pool2d_tiled_fwd(kind="max", block=512, dtype="float32"):
    """pool2d_fwd where the windows tile the input (stride = window, no padding, H and W
    multiples of the window): each output reads its window at fixed offsets, none outside
    the input, so no edge tests, and output row r of all planes together reads input rows
    r*window.. (one index split per output). Same values and order as pool2d_fwd; the
    argmax (the same element) is kept as its place in the window, a*window + b, for
    pool2d_tiled_bwd. S = [window, stride, padding, count_include_pad, relu]: relu = 1
    (max, on a ReLU's output) keeps -1 where the maximum is not > 0, the ReLU's mask
    folded in: the backward then gives that window +0.0, the ReLU backward's value."""
    N, C, H, W = T.symbolic("N"), T.symbolic("C"), T.symbolic("H"), T.symbolic("W")
    OH, OW = T.symbolic("OH"), T.symbolic("OW")

    @T.prim_func
    def pool2d_tiled_fwd(X: T.Tensor((N, C, H, W), dtype), S: T.Tensor((5,), "int32"),
                         Y: T.Tensor((N, C, OH, OW), dtype),
                         Arg: T.Tensor((N, C, OH, OW), "int32")):
        total = N * C * OH * OW
        with T.Kernel(T.ceildiv(total, block), threads=128) as bx:
            window, relu = S[0], S[4]
            size = N * C * H * W
            Xf = T.Tensor((size,), dtype, X.data)
            Yf = T.Tensor((total,), dtype, Y.data)
            Argf = T.Tensor((total,), "int32", Arg.data)
            best = T.alloc_fragment((block,), dtype)
            arg = T.alloc_fragment((block,), "int32")
            at0 = T.alloc_fragment((block,), "int32")  # the window's first element
            inv_w = _inverse(OW)
            for i in T.Parallel(block):
                e = T.min(bx * block + i, total - 1)  # (past the end: not stored)
                r = _div(e, OW, inv_w)  # the output row over all planes: window rows r*k..
                at0[i] = r * window * W + (e - r * OW) * window
                best[i] = -T.infinity(dtype) if kind == "max" else 0.0
                arg[i] = 0
            for a in T.serial(window):
                for b in T.serial(window):
                    for i in T.Parallel(block):
                        at = at0[i] + a * W + b
                        if at >= 0 and at < size:  # (always: bounds at for unchecked loads)
                            v = Xf[at]
                            _take(kind, v, best, arg, i, a * window + b)
            for i in T.Parallel(block):
                if bx * block + i < total:
                    if kind == "max":
                        Yf[bx * block + i] = best[i]
                    else:
                        Yf[bx * block + i] = best[i] / T.cast(window * window, dtype)
                    if relu != 0 and best[i] <= 0.0:  # (a ReLU's output: never NaN)
                        Argf[bx * block + i] = -1
                    else:
                        Argf[bx * block + i] = arg[i]

    return pool2d_tiled_fwd


@tilepy.jit
def pool2d_tiled_bwd(kind="max", block=512, dtype="float32"):
    """pool2d_bwd where the windows tile the input (as pool2d_tiled_fwd): each output
    writes its window's gradients (max: dY at the argmax, +0.0 elsewhere; avg: dY / k^2
    to all), each input written once. The values are pool2d_bwd's: +0.0 plus the one
    window's term (so a -0.0 gradient gives +0.0, as there)."""
    N, C, H, W = T.symbolic("N"), T.symbolic("C"), T.symbolic("H"), T.symbolic("W")
    OH, OW = T.symbolic("OH"), T.symbolic("OW")

    @T.prim_func
    def pool2d_tiled_bwd(dY: T.Tensor((N, C, OH, OW), dtype),
                         Arg: T.Tensor((N, C, OH, OW), "int32"), S: T.Tensor((5,), "int32"),
                         dX: T.Tensor((N, C, H, W), dtype)):
        total = N * C * OH * OW
        with T.Kernel(T.ceildiv(total, block), threads=128) as bx:
            window = S[0]
            size = N * C * H * W
            dYf = T.Tensor((total,), dtype, dY.data)
            Argf = T.Tensor((total,), "int32", Arg.data)
            dXf = T.Tensor((size,), dtype, dX.data)
            g = T.alloc_fragment((block,), dtype)
            am = T.alloc_fragment((block,), "int32")  # the argmax in the window
            at0 = T.alloc_fragment((block,), "int32")  # the window's first element
            inv_w = _inverse(OW)
            for i in T.Parallel(block):
                e = T.min(bx * block + i, total - 1)
                r = _div(e, OW, inv_w)
                at0[i] = T.if_then_else(bx * block + i < total,
                                        r * window * W + (e - r * OW) * window, -size - 1)
                if kind == "max":
                    g[i] = dYf[e]
                    am[i] = Argf[e]
                else:
                    g[i] = dYf[e] / T.cast(window * window, dtype)
                    am[i] = 0
            for a in T.serial(window):
                for b in T.serial(window):
                    for i in T.Parallel(block):
                        at = at0[i] + a * W + b
                        if at >= 0 and at < size:  # (bounds at: unchecked stores)
                            if kind == "max":
                                dXf[at] = 0.0 + T.if_then_else(am[i] == a * window + b, g[i],
                                                               0.0)
                            else:
                                dXf[at] = 0.0 + g[i]

    return pool2d_tiled_bwd
