"""Cross-entropy over rows of logits X (M, C) with int32 labels, label smoothing eps and an
ignored label:
  forward   LSE[i] = log sum_j exp(X[i, j]) (online over chunks of block_C, in float32);
            Loss[i] = LSE[i] - (1 - eps) X[i, y_i] - (eps / C) sum_j X[i, j], 0 if ignored
  backward  dX[i, j] = dLoss[i] (exp(X[i, j] - LSE[i]) - (1 - eps)[j == y_i] - eps / C),
            0 for ignored rows.
With class weights w (`xent_fwd_weighted`, `xent_bwd_weighted`, torch's definition, where
the smoothing term weights each class):
  Loss[i] = (1 - eps) w[y_i] (LSE[i] - X[i, y_i]) + (eps / C) sum_j w[j] (LSE[i] - X[i, j])
          = (1 - eps) w[y_i] (LSE[i] - X[i, y_i]) + (eps / C) (W LSE[i] - sum_j w[j] X[i, j])
  dX[i, j] = dLoss[i] (p_ij ((1 - eps) w[y_i] + (eps / C) W) - (1 - eps) w[y_i] [j == y_i]
             - (eps / C) w[j]),   p_ij = exp(X[i, j] - LSE[i]), W = sum_j w[j] (WSum).
Per-row results; tilepy.kernels.xent_api reduces them (torch's 'mean' | 'sum' | 'none').
"""

import tilepy
import tilepy.language as T

ACC = "float32"


@T.macro
def _lse_state(block_M):
    """(m_new, m_old, total): the online logsumexp's running max and sum, cleared."""
    m_new = T.alloc_fragment((block_M,), ACC)
    m_old = T.alloc_fragment((block_M,), ACC)
    total = T.alloc_fragment((block_M,), ACC)
    T.fill(m_new, -T.infinity(ACC))
    T.clear(total)
    return m_new, m_old, total


@T.macro
def _lse_step(x, state, c, C, block_M, block_C):
    """Fold one chunk of columns (x, clobbered) into the running max and sum."""
    m_new, m_old, total = state
    for i, j in T.Parallel(block_M, block_C):
        if c * block_C + j >= C:
            x[i, j] = -T.infinity(ACC)
    T.copy(m_new, m_old)
    T.reduce_max(x, m_new, dim=1, clear=False)
    for i in T.Parallel(block_M):
        total[i] = total[i] * T.exp(m_old[i] - m_new[i])
    for i, j in T.Parallel(block_M, block_C):
        x[i, j] = T.exp(x[i, j] - m_new[i])
    T.reduce_sum(x, total, dim=1, clear=False)


@tilepy.jit(out_idx=[-2, -1])
def xent_fwd(ignore_index=-100, smoothing=0.0, block_M=8, block_C=256, dtype="float32"):
    M, C = T.symbolic("M"), T.symbolic("C")

    @T.prim_func
    def xent_fwd(X: T.Tensor((M, C), dtype), Labels: T.Tensor((M,), "int32"),
                 Loss: T.Tensor((M,), ACC), LSE: T.Tensor((M,), ACC)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, block_C), ACC)
            state = _lse_state(block_M)
            m_new, m_old, total = state
            xsum = T.alloc_fragment((block_M,), ACC)
            T.clear(xsum)
            for c in T.serial(T.ceildiv(C, block_C)):
                T.copy(X[bx * block_M, c * block_C], x)
                if smoothing != 0.0:  # columns past C read 0: they add nothing here
                    T.reduce_sum(x, xsum, dim=1, clear=False)
                _lse_step(x, state, c, C, block_M, block_C)
            for i in T.Parallel(block_M):
                r = bx * block_M + i
                y = Labels[r]
                lse = m_new[i] + T.log(total[i])
                LSE[r] = lse
                Loss[r] = T.if_then_else(  # only the chosen side loads: X[r, y] when kept
                    y == ignore_index, 0.0,
                    lse - (1.0 - smoothing) * X[r, y] - (smoothing / C) * xsum[i])

    return xent_fwd


@tilepy.jit(out_idx=[-1])
def xent_bwd(ignore_index=-100, smoothing=0.0, block_M=8, block_C=256, dtype="float32"):
    M, C = T.symbolic("M"), T.symbolic("C")

    @T.prim_func
    def xent_bwd(X: T.Tensor((M, C), dtype), Labels: T.Tensor((M,), "int32"),
                 LSE: T.Tensor((M,), ACC), dLoss: T.Tensor((M,), ACC),
                 dX: T.Tensor((M, C), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(C, block_C), threads=128) as (bx, by):
            x = T.alloc_fragment((block_M, block_C), ACC)
            T.copy(X[bx * block_M, by * block_C], x)
            for i, j in T.Parallel(block_M, block_C):
                r, col = bx * block_M + i, by * block_C + j
                y = Labels[r]
                hot = T.if_then_else(col == y, 1.0 - smoothing, 0.0)
                g = (T.exp(x[i, j] - LSE[r]) - hot - smoothing / C) * dLoss[r]
                x[i, j] = T.if_then_else(y == ignore_index, 0.0, g)
            T.copy(x, dX[bx * block_M, by * block_C])

    return xent_bwd


@tilepy.jit(out_idx=[-2, -1])
def xent_fwd_weighted(ignore_index=-100, smoothing=0.0, block_M=8, block_C=256,
                      dtype="float32"):
    """The forward with class weights W (C,) and their sum WSum (1,), float32."""
    M, C = T.symbolic("M"), T.symbolic("C")

    @T.prim_func
    def xent_fwd_weighted(X: T.Tensor((M, C), dtype), Labels: T.Tensor((M,), "int32"),
                          W: T.Tensor((C,), ACC), WSum: T.Tensor((1,), ACC),
                          Loss: T.Tensor((M,), ACC), LSE: T.Tensor((M,), ACC)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, block_C), ACC)
            wx = T.alloc_fragment((block_M, block_C), ACC)
            w = T.alloc_fragment((block_C,), ACC)
            state = _lse_state(block_M)
            m_new, m_old, total = state
            wxsum = T.alloc_fragment((block_M,), ACC)
            T.clear(wxsum)
            for c in T.serial(T.ceildiv(C, block_C)):
                T.copy(X[bx * block_M, c * block_C], x)
                T.copy(W[c * block_C], w)  # columns past C read 0 in both
                for i, j in T.Parallel(block_M, block_C):
                    wx[i, j] = w[j] * x[i, j]
                T.reduce_sum(wx, wxsum, dim=1, clear=False)
                _lse_step(x, state, c, C, block_M, block_C)
            for i in T.Parallel(block_M):
                r = bx * block_M + i
                y = Labels[r]
                lse = m_new[i] + T.log(total[i])
                LSE[r] = lse
                Loss[r] = T.if_then_else(  # only the chosen side loads: X[r, y] when kept
                    y == ignore_index, 0.0,
                    (1.0 - smoothing) * W[y] * (lse - X[r, y])
                    + (smoothing / C) * (WSum[0] * lse - wxsum[i]))

    return xent_fwd_weighted


@tilepy.jit(out_idx=[-1])
def xent_bwd_weighted(ignore_index=-100, smoothing=0.0, block_M=8, block_C=256,
                      dtype="float32"):
    """The backward with class weights W (C,) and their sum WSum (1,), float32."""
    M, C = T.symbolic("M"), T.symbolic("C")

    @T.prim_func
    def xent_bwd_weighted(X: T.Tensor((M, C), dtype), Labels: T.Tensor((M,), "int32"),
                          LSE: T.Tensor((M,), ACC), dLoss: T.Tensor((M,), ACC),
                          W: T.Tensor((C,), ACC), WSum: T.Tensor((1,), ACC),
                          dX: T.Tensor((M, C), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(C, block_C), threads=128) as (bx, by):
            x = T.alloc_fragment((block_M, block_C), ACC)
            T.copy(X[bx * block_M, by * block_C], x)
            for i, j in T.Parallel(block_M, block_C):
                r, col = bx * block_M + i, by * block_C + j
                y = Labels[r]
                wy = T.if_then_else(y == ignore_index, 0.0, (1.0 - smoothing) * W[y])
                hot = T.if_then_else(col == y, wy, 0.0)
                wc = T.if_then_else(col < C, W[col], 0.0)
                g = (T.exp(x[i, j] - LSE[r]) * (wy + (smoothing / C) * WSum[0]) - hot
                     - (smoothing / C) * wc) * dLoss[r]
                x[i, j] = T.if_then_else(y == ignore_index, 0.0, g)
            T.copy(x, dX[bx * block_M, by * block_C])

    return xent_bwd_weighted
