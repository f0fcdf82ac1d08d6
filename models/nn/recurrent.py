"""LSTM and GRU (PyTorch's API subset: num_layers, bias, batch_first, hidden state in and
out; one direction). Per layer, one gemm projects every time step's input (nn.functional
.linear); the recurrence is one graph node: per step a gemm h W_hh^T and the fused gate
kernel (models/kernels/recurrent.py), and backward through time runs the steps in reverse
with the gate backward kernel and one gemm per step for dh, then one gemm for dW_hh.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import kops as K
from tilepy.models.errors import model_error
from tilepy.models.kernels import recurrent as R
from tilepy.models.kernels.launch import launch
from tilepy.models.nn import functional as F
from tilepy.models.nn import init
from tilepy.models.nn.module import Module, as_input
from tilepy.models.ops import cat, record
from tilepy.models.tensor import Parameter, Tensor

GATES = {"lstm": 4, "gru": 3}


def recurrence(kind: str, gi: Tensor, h0: Tensor, c0, w_hh: Tensor, b_hh: Tensor) -> Tensor:
    """Run the recurrence over gi (T, N, G*H) = x W_ih^T + b_ih from h0 (and c0: LSTM).
    Returns the hidden states (T, N, H) (GRU) or hidden and cell states (T, N, 2H) (LSTM)."""
    steps, n, _ = gi.shape
    h = w_hh.shape[1]
    d = gi.dtype
    gid, wt = np.ascontiguousarray(gi.data), np.ascontiguousarray(w_hh.data.T)
    hs = np.empty((steps, n, h), d)
    acts = np.empty((steps, n, 4 * h), d)
    lstm = kind == "lstm"
    cs, tcs = (np.empty((steps, n, h), d), np.empty((steps, n, h), d)) if lstm else (None,) * 2
    hp = np.ascontiguousarray(h0.data)
    cp = np.ascontiguousarray(c0.data) if lstm else None
    for t in range(steps):
        hw = K.matmul(hp, wt)
        if lstm:
            launch(K.kernel(R.lstm_fwd, dtype=d), gid[t], hw, b_hh.data, cp, hs[t], cs[t],
                   acts[t], tcs[t])
            cp = cs[t]
        else:
            launch(K.kernel(R.gru_fwd, dtype=d), gid[t], hw, b_hh.data, hp, hs[t], acts[t])
        hp = hs[t]
    h_prev = np.concatenate([h0.data[None], hs[:-1]])  # h_{t-1} per step (data movement)
    c_prev = np.concatenate([c0.data[None], cs[:-1]]) if lstm else None

    def bwd(g):
        g = np.ascontiguousarray(g)
        if lstm:
            return _lstm_bwd(g[..., :h], g[..., h:], acts, c_prev, tcs, h_prev, w_hh)
        return _gru_bwd(g, acts, h_prev, w_hh)
    out = np.concatenate([hs, cs], axis=2) if lstm else hs
    parents = (gi, h0, c0, w_hh, b_hh) if lstm else (gi, h0, w_hh, b_hh)
    return record(out, parents, bwd, kind)


def _weight_grads(dgh: np.ndarray, h_prev: np.ndarray):
    """dW_hh = sum over steps of dGh_t^T h_{t-1} (one gemm), db_hh = column sums."""
    rows = dgh.reshape(-1, dgh.shape[-1])
    return K.matmul(rows.T, h_prev.reshape(-1, h_prev.shape[-1])), K.reduce(
        rows, (0,), "sum", False)


def _lstm_bwd(gh_out, gc_out, acts, c_prev, tcs, h_prev, w_hh):
    steps, n, h = h_prev.shape
    d = h_prev.dtype
    dg = np.empty((steps, n, 4 * h), d)
    dh, dc = np.zeros((n, h), d), np.zeros((n, h), d)
    gh_out, gc_out = np.ascontiguousarray(gh_out), np.ascontiguousarray(gc_out)
    for t in range(steps - 1, -1, -1):
        dc_prev = np.empty((n, h), d)
        launch(K.kernel(R.lstm_bwd, dtype=d), gh_out[t], dh, gc_out[t], dc, acts[t],
               c_prev[t], tcs[t], dg[t], dc_prev)
        dh, dc = K.matmul(dg[t], w_hh.data), dc_prev
    dw, db = _weight_grads(dg, h_prev)
    return dg, dh, dc, dw, db


def _gru_bwd(g, acts, h_prev, w_hh):
    steps, n, h = h_prev.shape
    d = h_prev.dtype
    dgi, dgh = np.empty((steps, n, 3 * h), d), np.empty((steps, n, 3 * h), d)
    dhm, dhz = np.zeros((n, h), d), np.zeros((n, h), d)
    for t in range(steps - 1, -1, -1):
        dhp = np.empty((n, h), d)
        launch(K.kernel(R.gru_bwd, dtype=d), g[t], dhm, dhz, acts[t], h_prev[t], dgi[t],
               dgh[t], dhp)
        dhm, dhz = K.matmul(dgh[t], w_hh.data), dhp
    dw, db = _weight_grads(dgh, h_prev)
    return dgi, K.binary(dhm, dhz, "add"), dw, db


class _Recurrent(Module):
    """The layers and parameters shared by LSTM and GRU (torch's names: weight_ih_l0,
    weight_hh_l0, bias_ih_l0, bias_hh_l0, ...; U(-1/sqrt(H), 1/sqrt(H)) initialisation)."""

    kind = "lstm"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dtype=np.float32):
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dtype = bias, batch_first, np.dtype(dtype)
        g, bound = GATES[self.kind] * hidden_size, 1.0 / np.sqrt(hidden_size)
        for k in range(num_layers):
            inp = input_size if k == 0 else hidden_size
            setattr(self, f"weight_ih_l{k}", Parameter(init.uniform((g, inp), bound, dtype)))
            setattr(self, f"weight_hh_l{k}",
                    Parameter(init.uniform((g, hidden_size), bound, dtype)))
            if bias:
                setattr(self, f"bias_ih_l{k}", Parameter(init.uniform((g,), bound, dtype)))
                setattr(self, f"bias_hh_l{k}", Parameter(init.uniform((g,), bound, dtype)))

    def extra_repr(self) -> str:
        return (f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
                f"batch_first={self.batch_first}")

    def _state(self, given, n: int, what: str) -> Tensor:
        want = (self.num_layers, n, self.hidden_size)
        if given is None:
            return Tensor(np.zeros(want, self.dtype))
        given = as_input(self, given, self.dtype)
        if given.shape != want:
            raise model_error(f"{self!r}: expected {what} of shape {want}; got {given.shape}",
                              hint="(num_layers, batch, hidden_size)")
        return given

    def _run(self, x, h0: Tensor, c0: Tensor | None):
        """The output sequence (T, N, H) and each layer's last h (and c)."""
        hs, cs = [], []
        h = self.hidden_size
        for k in range(self.num_layers):
            b_hh = getattr(self, f"bias_hh_l{k}", None)
            b_hh = b_hh if b_hh is not None else Tensor(np.zeros((GATES[self.kind] * h,),
                                                                 self.dtype))
            gi = F.linear(x, getattr(self, f"weight_ih_l{k}"), getattr(self, f"bias_ih_l{k}",
                                                                       None), who=repr(self))
            out = recurrence(self.kind, gi, h0[k], None if c0 is None else c0[k],
                             getattr(self, f"weight_hh_l{k}"), b_hh)
            x = out if c0 is None else out[:, :, :h]
            hs.append(x[-1].reshape(1, -1, h))
            if c0 is not None:
                cs.append(out[-1, :, h:].reshape(1, -1, h))
        return x, cat(hs, dim=0), (cat(cs, dim=0) if cs else None)

    def _input(self, x) -> Tensor:
        x = as_input(self, x, self.dtype)
        if x.ndim != 3 or x.shape[2] != self.input_size:
            order = "(N, T, input_size)" if self.batch_first else "(T, N, input_size)"
            raise model_error(f"{self!r}: expected input of shape {order} with input_size="
                              f"{self.input_size}; got {x.shape}")
        return x.permute((1, 0, 2)) if self.batch_first else x

    def _output(self, y: Tensor) -> Tensor:
        return y.permute((1, 0, 2)) if self.batch_first else y


class LSTM(_Recurrent):
    """forward(x, (h0, c0)=None) -> (output, (h_n, c_n)) as torch.nn.LSTM."""

    kind = "lstm"

    def forward(self, x, hx=None):
        x = self._input(x)
        h0, c0 = (None, None) if hx is None else hx
        h0, c0 = self._state(h0, x.shape[1], "h0"), self._state(c0, x.shape[1], "c0")
        y, hn, cn = self._run(x, h0, c0)
        return self._output(y), (hn, cn)


class GRU(_Recurrent):
    """forward(x, h0=None) -> (output, h_n) as torch.nn.GRU."""

    kind = "gru"

    def forward(self, x, hx=None):
        x = self._input(x)
        y, hn, _ = self._run(x, self._state(hx, x.shape[1], "h0"), None)
        return self._output(y), hn
