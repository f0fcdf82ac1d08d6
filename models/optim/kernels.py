"""The optimisers' tile kernels: one launch updates every parameter of one dtype.

Each kernel walks a flat buffer in blocks of `block` elements; `blocks[b] = (start, row)`
gives block b's first element and its parameter's row of the hyper-parameter table `hp`
(per-parameter learning rate, bias corrections, flags), so parameters of different groups
and step counts share one launch. Arithmetic is in float32 (float64 for float64 buffers),
one rounding per operation, in the order torch's single-tensor implementation uses.
"""

import tilepy
import tilepy.language as T

# hp columns of each kernel (host code fills rows by these names)
SGD_COLS = ("neg_lr", "weight_decay", "momentum", "one_minus_dampening", "first",
            "nesterov", "maximize", "grad_scale")
ADAM_COLS = ("neg_step_size", "bias_correction2_sqrt", "one_minus_beta1", "beta2",
             "one_minus_beta2", "eps", "weight_decay", "decay", "maximize", "grad_scale")


def compute_dtype(dtype: str) -> str:
    return "float64" if dtype == "float64" else "float32"


@tilepy.jit
def sgd_kernel(block=1024, dtype="float32", momentum=True):
    """p -= lr * update, with L2 weight decay, momentum (dampening, Nesterov) per row."""
    n, nb, rows = T.symbolic("n"), T.symbolic("nb"), T.symbolic("rows")
    ct = compute_dtype(dtype)
    w = len(SGD_COLS)

    @T.prim_func
    def sgd_step(P: T.Tensor((n,), dtype), G: T.Tensor((n,), dtype),
                 B: T.Tensor((n,), dtype), blocks: T.Tensor((nb, 2), "int32"),
                 hp: T.Tensor((rows, w), ct)):
        with T.Kernel(nb, threads=128) as bx:
            start = blocks[bx, 0]
            r = blocks[bx, 1]
            neg_lr, wd, mom = hp[r, 0], hp[r, 1], hp[r, 2]
            damp1, first, nesterov, maximize, gs = hp[r, 3], hp[r, 4], hp[r, 5], hp[r, 6], hp[r, 7]
            p = T.alloc_fragment((block,), ct)
            g = T.alloc_fragment((block,), ct)
            b = T.alloc_fragment((block,), ct)
            T.copy(P[start], p)
            T.copy(G[start], g)
            if momentum:
                T.copy(B[start], b)
            for i in T.Parallel(block):
                g0 = g[i] * gs
                g1 = T.if_then_else(maximize != 0, -g0, g0)
                g2 = T.if_then_else(wd != 0, g1 + wd * p[i], g1)
                if momentum:
                    b1 = T.if_then_else(first != 0, g2, b[i] * mom + damp1 * g2)
                    b[i] = T.if_then_else(mom != 0, b1, b[i])
                    u = T.if_then_else(nesterov != 0, g2 + mom * b1, b1)
                    p[i] = p[i] + neg_lr * T.if_then_else(mom != 0, u, g2)
                else:
                    p[i] = p[i] + neg_lr * g2
            T.copy(p, P[start])
            if momentum:
                T.copy(b, B[start])

    return sgd_step


@tilepy.jit
def adam_kernel(block=1024, dtype="float32"):
    """Adam and AdamW (decoupled decay when a row's `decay` is not 1) per row."""
    n, nb, rows = T.symbolic("n"), T.symbolic("nb"), T.symbolic("rows")
    ct = compute_dtype(dtype)
    w = len(ADAM_COLS)

    @T.prim_func
    def adam_step(P: T.Tensor((n,), dtype), G: T.Tensor((n,), dtype),
                  M: T.Tensor((n,), dtype), V: T.Tensor((n,), dtype),
                  blocks: T.Tensor((nb, 2), "int32"), hp: T.Tensor((rows, w), ct)):
        with T.Kernel(nb, threads=128) as bx:
            start = blocks[bx, 0]
            r = blocks[bx, 1]
            neg_step, bc2s, w1, beta2, w2 = hp[r, 0], hp[r, 1], hp[r, 2], hp[r, 3], hp[r, 4]
            eps, wd, decay, maximize, gs = hp[r, 5], hp[r, 6], hp[r, 7], hp[r, 8], hp[r, 9]
            p = T.alloc_fragment((block,), ct)
            g = T.alloc_fragment((block,), ct)
            m = T.alloc_fragment((block,), ct)
            v = T.alloc_fragment((block,), ct)
            T.copy(P[start], p)
            T.copy(G[start], g)
            T.copy(M[start], m)
            T.copy(V[start], v)
            for i in T.Parallel(block):
                g0 = g[i] * gs
                g1 = T.if_then_else(maximize != 0, -g0, g0)
                p1 = p[i] * decay
                g2 = T.if_then_else(wd != 0, g1 + wd * p1, g1)
                # torch's lerp: small weights from m, large ones from g
                m1 = T.if_then_else(w1 < 0.5, m[i] + w1 * (g2 - m[i]),
                                    g2 - (g2 - m[i]) * (1.0 - w1))
                v1 = v[i] * beta2 + (w2 * g2) * g2
                denom = T.sqrt(v1) / bc2s + eps
                m[i] = m1
                v[i] = v1
                p[i] = p1 + (neg_step * m1) / denom
            T.copy(p, P[start])
            T.copy(m, M[start])
            T.copy(v, V[start])

    return adam_step


@tilepy.jit(out_idx=[-1])
def sumsq_kernel(block=1024, dtype="float32"):
    """out[b] = sum of squares of block b (float64, ascending): the global norm's partials."""
    n, nb = T.symbolic("n"), T.symbolic("nb")

    @T.prim_func
    def grad_sumsq(G: T.Tensor((n,), dtype), starts: T.Tensor((nb,), "int32"),
                   out: T.Tensor((nb,), "float64")):
        with T.Kernel(nb, threads=128) as bx:
            g = T.alloc_fragment((block,), "float64")
            s = T.alloc_fragment((1,), "float64")
            T.copy(G[starts[bx]], g)
            for i in T.Parallel(block):
                g[i] = g[i] * g[i]
            T.reduce_sum(g, s, dim=0)
            out[bx] = s[0]

    return grad_sumsq


@tilepy.jit
def scale_kernel(block=1024, dtype="float32"):
    """G[i] *= coef[0] over the listed blocks (gradient clipping's rescale)."""
    n, nb = T.symbolic("n"), T.symbolic("nb")
    ct = compute_dtype(dtype)

    @T.prim_func
    def grad_scale(G: T.Tensor((n,), dtype), starts: T.Tensor((nb,), "int32"),
                   coef: T.Tensor((1,), ct)):
        with T.Kernel(nb, threads=128) as bx:
            start = starts[bx]
            c = coef[0]
            g = T.alloc_fragment((block,), ct)
            T.copy(G[start], g)
            for i in T.Parallel(block):
                g[i] = g[i] * c
            T.copy(g, G[start])

    return grad_scale


@tilepy.jit
def cast_kernel(block=1024, src="float32", dst="bfloat16"):
    """D[start:start+block] = S[start:start+block] rounded to D's dtype (nearest even):
    master weights to their low-precision copies."""
    n, nb = T.symbolic("n"), T.symbolic("nb")

    @T.prim_func
    def cast_copy(S: T.Tensor((n,), src), D: T.Tensor((n,), dst),
                  starts: T.Tensor((nb,), "int32")):
        with T.Kernel(nb, threads=128) as bx:
            start = starts[bx]
            x = T.alloc_fragment((block,), dst)
            T.copy(S[start], x)
            T.copy(x, D[start])

    return cast_copy
