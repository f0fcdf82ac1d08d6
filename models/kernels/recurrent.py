"""The fused gate arithmetic of one LSTM or GRU time step, forward and backward (PyTorch's
gate orders: LSTM i, f, g, o; GRU r, z, n). The step's matmuls (x W_ih^T for all steps at
once, h W_hh^T per step) are gemms outside; each kernel here is elementwise over (N, H)
and reads the H gates of a hidden unit at columns j, H + j, 2H + j (, 3H + j).

LSTM   gh = Hw + Bh; i, f, o = sigmoid(Gi + gh), g = tanh(Gi + gh);
       c' = f * c + i * g; h' = o * tanh(c')           (saves Act = i, f, g, o; TC = tanh(c'))
GRU    r = sigmoid(Gi_r + gh_r), z = sigmoid(Gi_z + gh_z), n = tanh(Gi_n + r * gh_n),
       h' = (1 - z) * n + z * h                        (saves Act = r, z, n, gh_n)
The backward kernels take the output's gradient and the recurrent carries separately and
sum them first, and return the pre-activation gradients: of Gi and (GRU) of gh.
"""

import tilepy
import tilepy.language as T


@tilepy.jit
def lstm_fwd(block_N=4, block_H=64, dtype="float32"):
    N, H = T.symbolic("N"), T.symbolic("H")

    @T.prim_func
    def lstm_fwd(Gi: T.Tensor((N, 4 * H), dtype), Hw: T.Tensor((N, 4 * H), dtype),
                 Bh: T.Tensor((4 * H,), dtype), C: T.Tensor((N, H), dtype),
                 Hn: T.Tensor((N, H), dtype), Cn: T.Tensor((N, H), dtype),
                 Act: T.Tensor((N, 4 * H), dtype), TC: T.Tensor((N, H), dtype)):
        with T.Kernel(T.ceildiv(H, block_H), T.ceildiv(N, block_N), threads=128) as (bx, by):
            for a, b in T.Parallel(block_N, block_H):
                r, j = by * block_N + a, bx * block_H + b
                if r < N and j < H:
                    i = T.sigmoid(Gi[r, j] + (Hw[r, j] + Bh[j]))
                    f = T.sigmoid(Gi[r, H + j] + (Hw[r, H + j] + Bh[H + j]))
                    g = T.tanh(Gi[r, 2 * H + j] + (Hw[r, 2 * H + j] + Bh[2 * H + j]))
                    o = T.sigmoid(Gi[r, 3 * H + j] + (Hw[r, 3 * H + j] + Bh[3 * H + j]))
                    c = f * C[r, j] + i * g
                    tc = T.tanh(c)
                    Cn[r, j] = c
                    TC[r, j] = tc
                    Hn[r, j] = o * tc
                    Act[r, j] = i
                    Act[r, H + j] = f
                    Act[r, 2 * H + j] = g
                    Act[r, 3 * H + j] = o

    return lstm_fwd


@tilepy.jit
def lstm_bwd(block_N=4, block_H=64, dtype="float32"):
    N, H = T.symbolic("N"), T.symbolic("H")

    @T.prim_func
    def lstm_bwd(dHo: T.Tensor((N, H), dtype), dHr: T.Tensor((N, H), dtype),
                 dCo: T.Tensor((N, H), dtype), dCr: T.Tensor((N, H), dtype),
                 Act: T.Tensor((N, 4 * H), dtype), C: T.Tensor((N, H), dtype),
                 TC: T.Tensor((N, H), dtype), dG: T.Tensor((N, 4 * H), dtype),
                 dC: T.Tensor((N, H), dtype)):
        with T.Kernel(T.ceildiv(H, block_H), T.ceildiv(N, block_N), threads=128) as (bx, by):
            for a, b in T.Parallel(block_N, block_H):
                r, j = by * block_N + a, bx * block_H + b
                if r < N and j < H:
                    i, f = Act[r, j], Act[r, H + j]
                    g, o = Act[r, 2 * H + j], Act[r, 3 * H + j]
                    tc = TC[r, j]
                    dh = dHo[r, j] + dHr[r, j]
                    dc = (dCo[r, j] + dCr[r, j]) + dh * o * (1.0 - tc * tc)
                    dG[r, j] = dc * g * (i * (1.0 - i))
                    dG[r, H + j] = dc * C[r, j] * (f * (1.0 - f))
                    dG[r, 2 * H + j] = dc * i * (1.0 - g * g)
                    dG[r, 3 * H + j] = dh * tc * (o * (1.0 - o))
                    dC[r, j] = dc * f

    return lstm_bwd


@tilepy.jit
def gru_fwd(block_N=4, block_H=64, dtype="float32"):
    N, H = T.symbolic("N"), T.symbolic("H")

    @T.prim_func
    def gru_fwd(Gi: T.Tensor((N, 3 * H), dtype), Hw: T.Tensor((N, 3 * H), dtype),
                Bh: T.Tensor((3 * H,), dtype), Hp: T.Tensor((N, H), dtype),
                Hn: T.Tensor((N, H), dtype), Act: T.Tensor((N, 4 * H), dtype)):
        with T.Kernel(T.ceildiv(H, block_H), T.ceildiv(N, block_N), threads=128) as (bx, by):
            for a, b in T.Parallel(block_N, block_H):
                r, j = by * block_N + a, bx * block_H + b
                if r < N and j < H:
                    rg = T.sigmoid(Gi[r, j] + (Hw[r, j] + Bh[j]))
                    z = T.sigmoid(Gi[r, H + j] + (Hw[r, H + j] + Bh[H + j]))
                    ghn = Hw[r, 2 * H + j] + Bh[2 * H + j]
                    n = T.tanh(Gi[r, 2 * H + j] + rg * ghn)
                    Hn[r, j] = (1.0 - z) * n + z * Hp[r, j]
                    Act[r, j] = rg
                    Act[r, H + j] = z
                    Act[r, 2 * H + j] = n
                    Act[r, 3 * H + j] = ghn

    return gru_fwd


@tilepy.jit
def gru_bwd(block_N=4, block_H=64, dtype="float32"):
    N, H = T.symbolic("N"), T.symbolic("H")

    @T.prim_func
    def gru_bwd(dHo: T.Tensor((N, H), dtype), dHm: T.Tensor((N, H), dtype),
                dHz: T.Tensor((N, H), dtype), Act: T.Tensor((N, 4 * H), dtype),
                Hp: T.Tensor((N, H), dtype), dGi: T.Tensor((N, 3 * H), dtype),
                dGh: T.Tensor((N, 3 * H), dtype), dHp: T.Tensor((N, H), dtype)):
        with T.Kernel(T.ceildiv(H, block_H), T.ceildiv(N, block_N), threads=128) as (bx, by):
            for a, b in T.Parallel(block_N, block_H):
                r, j = by * block_N + a, bx * block_H + b
                if r < N and j < H:
                    rg, z = Act[r, j], Act[r, H + j]
                    n, ghn = Act[r, 2 * H + j], Act[r, 3 * H + j]
                    dh = (dHo[r, j] + dHm[r, j]) + dHz[r, j]
                    dn = dh * (1.0 - z) * (1.0 - n * n)
                    dr = dn * ghn * (rg * (1.0 - rg))
                    dz = dh * (Hp[r, j] - n) * (z * (1.0 - z))
                    dGi[r, j] = dr
                    dGi[r, H + j] = dz
                    dGi[r, 2 * H + j] = dn
                    dGh[r, j] = dr
                    dGh[r, H + j] = dz
                    dGh[r, 2 * H + j] = dn * rg
                    dHp[r, j] = dh * z

    return gru_bwd
