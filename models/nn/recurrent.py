"""LSTM and GRU (PyTorch's API: num_layers, bias, batch_first, dropout, bidirectional,
hidden state in and out, PackedSequence input). Per layer and direction, one gemm projects
every time step's input (nn.functional.linear); the recurrence is one graph node: per step
a gemm h W_hh^T and the fused gate kernel (models/kernels/recurrent.py), and backward
through time runs the steps in reverse with the gate backward kernel and one gemm per step
for dh, then one gemm for dW_hh. Variable lengths run as torch runs packed batches: the
sequences sorted by decreasing length, step t updates only the first batch_sizes[t] rows.
"""

from __future__ import annotations

import numpy as np

from tilepy.models import kops as K
from tilepy.models.errors import model_error
from tilepy.models.kernels import recurrent as R
from tilepy.models.kernels.launch import launch
from tilepy.models.kernels.record import contiguous, copy_into, refuse
from tilepy.models.nn import functional as F
from tilepy.models.nn import init
from tilepy.models.nn.module import Module, as_input
from tilepy.models.nn.utils.rnn import PackedSequence, gather_rows, packed_index, scatter_rows
from tilepy.models.ops import cat, in_float32, record
from tilepy.models.tensor import Parameter, Tensor

GATES = {"lstm": 4, "gru": 3}


def _active(batch_sizes, steps: int, n: int) -> list[int]:
    """The number of running sequences (the first rows) at each step."""
    if batch_sizes is None:
        return [n] * steps
    return [int(b) for b in batch_sizes]


def recurrence(kind: str, gi: Tensor, h0: Tensor, c0, w_hh: Tensor, b_hh: Tensor,
               batch_sizes=None, reverse: bool = False, w_hr: Tensor | None = None) -> Tensor:
    """Run the recurrence over gi (T, N, G*H) = x W_ih^T + b_ih from h0 (and c0: LSTM),
    steps in increasing time order (decreasing with `reverse`); with batch_sizes, step t
    updates rows [0, batch_sizes[t]) only (rows sorted by decreasing length). With w_hr
    (LSTM, torch's proj_size P) the state h_t = (o_t * tanh(c_t)) W_hr^T is P wide, and
    w_hh is (4H, P). Returns (T + 1, N, H) (GRU) or (T + 1, N, P + H) (LSTM: h then c;
    P = H without w_hr): row t < T is the state after step t (zeros where a sequence has
    ended), row T each sequence's final state."""
    steps, n, _ = gi.shape
    hid, p, d, lstm = gi.shape[2] // GATES[kind], w_hh.shape[1], gi.dtype, kind == "lstm"
    sizes = _active(batch_sizes, steps, n)
    order = range(steps - 1, -1, -1) if reverse else range(steps)
    # host copies go through record's helpers, so that a captured step repeats them
    gid, wt = contiguous(gi.data), contiguous(w_hh.data.T)
    hs, h_prev = np.zeros((steps, n, p), d), np.zeros((steps, n, p), d)
    us = hs if w_hr is None else np.zeros((steps, n, hid), d)  # o * tanh(c), unprojected
    wrt = None if w_hr is None else contiguous(w_hr.data.T)
    acts = np.zeros((steps, n, 4 * hid), d)
    cs, tcs, c_prev = (np.zeros((steps, n, hid), d) for _ in range(3)) if lstm else (None,) * 3
    hcur = copy_into(np.empty(h0.shape, d), h0.data)
    ccur = copy_into(np.empty(c0.shape, d), c0.data) if lstm else None
    for t in order:
        m = sizes[t]
        copy_into(h_prev[t, :m], hcur[:m])
        hw = K.matmul(hcur[:m], wt)
        if lstm:
            copy_into(c_prev[t, :m], ccur[:m])
            launch(K.kernel(R.lstm_fwd, dtype=d), gid[t, :m], hw, b_hh.data, c_prev[t, :m],
                   us[t, :m], cs[t, :m], acts[t, :m], tcs[t, :m])
            copy_into(ccur[:m], cs[t, :m])
            if wrt is not None:
                copy_into(hs[t, :m], K.matmul(us[t, :m], wrt))
        else:
            launch(K.kernel(R.gru_fwd, dtype=d), gid[t, :m], hw, b_hh.data, h_prev[t, :m],
                   hs[t, :m], acts[t, :m])
        copy_into(hcur[:m], hs[t, :m])
    back = list(reversed(order))

    def bwd(g):
        g = contiguous(g)
        if lstm:
            return _lstm_bwd(g, acts, c_prev, tcs, h_prev, w_hh, sizes, back, w_hr, us)
        return _gru_bwd(g, acts, h_prev, w_hh, sizes, back)
    out = np.empty((steps + 1, n, p + hid if lstm else p), d)
    for dst, src in ((out[:steps, :, :p], hs), (out[steps, :, :p], hcur)) + (
            ((out[:steps, :, p:], cs), (out[steps, :, p:], ccur)) if lstm else ()):
        copy_into(dst, src)
    parents = (gi, h0, c0, w_hh, b_hh) if lstm else (gi, h0, w_hh, b_hh)
    return record(out, parents + (() if w_hr is None else (w_hr,)), bwd, kind)


def _weight_grads(dgh: np.ndarray, h_prev: np.ndarray):
    """dW_hh = sum over steps of dGh_t^T h_{t-1} (one gemm), db_hh = column sums."""
    rows = dgh.reshape(-1, dgh.shape[-1])
    return K.matmul(rows.T, h_prev.reshape(-1, h_prev.shape[-1])), K.reduce(
        rows, (0,), "sum", False)


def _lstm_bwd(g, acts, c_prev, tcs, h_prev, w_hh, sizes, back, w_hr=None, us=None):
    """Steps in `back` order; the final states' gradients (g[T]) enter as the carries.
    With a projection, step t's h gradient (output's plus carry) is saved, mapped back
    through W_hr to o * tanh(c)'s, and gives dW_hr = sum_t dh_t^T u_t (one gemm)."""
    steps, n, p = h_prev.shape
    hid, d = c_prev.shape[2], h_prev.dtype
    gh, gc = contiguous(g[..., :p]), contiguous(g[..., p:])
    dg = np.zeros((steps, n, 4 * hid), d)
    dh = copy_into(np.empty((n, p), d), gh[steps])
    dc = copy_into(np.empty((n, hid), d), gc[steps])
    dhs = None if w_hr is None else np.zeros((steps, n, p), d)
    zero = None if w_hr is None else K.zeros((n, hid), d)
    for t in back:
        m = sizes[t]
        dc_prev = np.empty((m, hid), d)
        dho, dhr = gh[t, :m], dh[:m]
        if w_hr is not None:  # u's gradient enters alone; the kernel adds zeros
            K.binary(dho, dhr, "add", out=dhs[t, :m])
            dho, dhr = K.matmul(dhs[t, :m], w_hr.data), zero[:m]
        launch(K.kernel(R.lstm_bwd, dtype=d), dho, dhr, gc[t, :m], dc[:m],
               acts[t, :m], c_prev[t, :m], tcs[t, :m], dg[t, :m], dc_prev)
        copy_into(dh[:m], K.matmul(dg[t, :m], w_hh.data))
        copy_into(dc[:m], dc_prev)
    dw, db = _weight_grads(dg, h_prev)
    if w_hr is None:
        return dg, dh, dc, dw, db
    dw_hr = K.matmul(dhs.reshape(-1, p).T, us.reshape(-1, hid))
    return dg, dh, dc, dw, db, dw_hr


def _gru_bwd(g, acts, h_prev, w_hh, sizes, back):
    steps, n, h = h_prev.shape
    d = h_prev.dtype
    dgi, dgh = np.zeros((steps, n, 3 * h), d), np.zeros((steps, n, 3 * h), d)
    dhm = copy_into(np.empty((n, h), d), K.zeros((n, h), d))  # refilled on replay
    dhz = copy_into(np.empty((n, h), d), g[steps])
    for t in back:
        m = sizes[t]
        dhp = np.empty((m, h), d)
        launch(K.kernel(R.gru_bwd, dtype=d), g[t, :m], dhm[:m], dhz[:m], acts[t, :m],
               h_prev[t, :m], dgi[t, :m], dgh[t, :m], dhp)
        copy_into(dhm[:m], K.matmul(dgh[t, :m], w_hh.data))
        copy_into(dhz[:m], dhp)
    dw, db = _weight_grads(dgh, h_prev)
    return dgi, K.binary(dhm, dhz, "add"), dw, db


class _Recurrent(Module):
    """The layers and parameters shared by LSTM and GRU (torch's names: weight_ih_l0,
    weight_hh_l0, bias_ih_l0, bias_hh_l0, weight_hr_l0 (LSTM with proj_size), then the
    same with _reverse when bidirectional, then layer 1 ...; U(-1/sqrt(H), 1/sqrt(H))
    initialisation)."""

    kind = "lstm"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, dtype=np.float32):
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise model_error(f"{type(self).__name__}: dropout must be in [0, 1); got "
                              f"{dropout}")
        self._check_proj(proj_size, hidden_size)
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dtype = bias, batch_first, np.dtype(dtype)
        self.dropout, self.bidirectional = float(dropout), bool(bidirectional)
        self.proj_size = int(proj_size)
        g, bound = GATES[self.kind] * hidden_size, 1.0 / np.sqrt(hidden_size)
        for k in range(num_layers):
            inp = input_size if k == 0 else self.state_size * self.directions
            for sfx in self._suffixes(k):
                setattr(self, f"weight_ih{sfx}", Parameter(init.uniform((g, inp), bound, dtype)))
                setattr(self, f"weight_hh{sfx}",
                        Parameter(init.uniform((g, self.state_size), bound, dtype)))
                if bias:
                    setattr(self, f"bias_ih{sfx}", Parameter(init.uniform((g,), bound, dtype)))
                    setattr(self, f"bias_hh{sfx}", Parameter(init.uniform((g,), bound, dtype)))
                if self.proj_size:
                    setattr(self, f"weight_hr{sfx}", Parameter(
                        init.uniform((self.proj_size, hidden_size), bound, dtype)))

    def _check_proj(self, proj_size, hidden_size: int) -> None:
        name = type(self).__name__
        if proj_size and self.kind != "lstm":
            raise model_error(f"{name}: proj_size is only supported by LSTM; got "
                              f"proj_size={proj_size}", hint="leave proj_size at 0")
        if not isinstance(proj_size, (int, np.integer)) or not 0 <= proj_size < hidden_size:
            raise model_error(f"{name}: proj_size must be an integer in [0, hidden_size="
                              f"{hidden_size}); got {proj_size!r}",
                              hint="0 disables the projection")

    @property
    def state_size(self) -> int:
        """The width of h: proj_size when projecting, else hidden_size."""
        return self.proj_size or self.hidden_size

    @property
    def directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _suffixes(self, k: int) -> list[str]:
        return [f"_l{k}", f"_l{k}_reverse"][:self.directions]

    def extra_repr(self) -> str:
        return (f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
                f"batch_first={self.batch_first}"
                + (f", dropout={self.dropout}" if self.dropout else "")
                + (", bidirectional=True" if self.bidirectional else "")
                + (f", proj_size={self.proj_size}" if self.proj_size else ""))

    def _state(self, given, n: int, what: str, order, width: int) -> Tensor:
        want = (self.num_layers * self.directions, n, width)
        if given is None:
            return Tensor(K.zeros(want, self.dtype))
        given = as_input(self, given, self.dtype)
        if given.shape != want:
            raise model_error(f"{self!r}: expected {what} of shape {want}; got {given.shape}",
                              hint="(num_layers * num_directions, batch, hidden_size)")
        return given if order is None else _take_batch(given, order)

    def _direction(self, x: Tensor, sfx: str, h0, c0, sizes, reverse: bool) -> Tensor:
        b_hh = getattr(self, f"bias_hh{sfx}", None)
        if b_hh is None:
            b_hh = Tensor(K.zeros((GATES[self.kind] * self.hidden_size,), self.dtype))
        gi = F.linear(x, getattr(self, f"weight_ih{sfx}"), getattr(self, f"bias_ih{sfx}", None),
                      who=self)
        return in_float32(recurrence, self.kind, gi, h0, c0, getattr(self, f"weight_hh{sfx}"),
                          b_hh, sizes, reverse, getattr(self, f"weight_hr{sfx}", None))

    def _run(self, x: Tensor, h0: Tensor, c0: Tensor | None, sizes):
        """The output sequence (T, N, D*H) and each layer and direction's final h (and c)."""
        hs, cs = [], []
        steps, h = x.shape[0], self.state_size
        for k in range(self.num_layers):
            outs = []
            for d, sfx in enumerate(self._suffixes(k)):
                i = k * self.directions + d
                out = self._direction(x, sfx, h0[i], None if c0 is None else c0[i], sizes,
                                      reverse=d == 1)
                outs.append(out[:steps, :, :h] if c0 is not None else out[:steps])
                hs.append(out[steps:, :, :h])
                if c0 is not None:
                    cs.append(out[steps:, :, h:])
            x = outs[0] if len(outs) == 1 else cat(outs, dim=2)
            if self.dropout and self.training and k < self.num_layers - 1:
                x = F.dropout(x, self.dropout)
        return x, cat(hs, dim=0), (cat(cs, dim=0) if cs else None)

    def _input(self, x):
        """(T, N, input_size) time-major input, the batch sizes per step (None: all
        running) and the packed input's sorted_indices, or None."""
        if isinstance(x, PackedSequence):
            return self._unpack(x)
        x = as_input(self, x, self.dtype)
        if x.ndim != 3 or x.shape[2] != self.input_size:
            order = "(N, T, input_size)" if self.batch_first else "(T, N, input_size)"
            raise model_error(f"{self!r}: expected input of shape {order} with input_size="
                              f"{self.input_size}; got {x.shape}",
                              hint="variable lengths: pass a PackedSequence "
                                   "(nn.utils.rnn.pack_padded_sequence)")
        return (x.permute((1, 0, 2)) if self.batch_first else x), None, None

    def _unpack(self, p: PackedSequence):
        data = as_input(self, p.data, self.dtype)
        if data.ndim != 2 or data.shape[1] != self.input_size:
            raise model_error(f"{self!r}: expected packed data of shape (steps, "
                              f"{self.input_size}); got {data.shape}")
        refuse(f"{type(self).__name__} over a PackedSequence: its batch sizes, read on "
               "the host, set the rows every step updates",
               hint="pad the batch to one length and mask the loss, or run the step "
                    "without capture")
        sizes = np.asarray(p.batch_sizes)
        steps, n = len(sizes), int(sizes[0])
        rows = scatter_rows(data, packed_index(sizes, np.arange(n), n), steps * n)
        return rows.reshape((steps, n, self.input_size)), sizes, p.sorted_indices

    def _output(self, y: Tensor, packed) -> Tensor | PackedSequence:
        if packed is not None:
            sizes = packed.batch_sizes
            n = int(sizes[0])
            flat = y.reshape((y.shape[0] * n, y.shape[2]))
            return PackedSequence(gather_rows(flat, packed_index(sizes, np.arange(n), n)),
                                  sizes, packed.sorted_indices, packed.unsorted_indices)
        return y.permute((1, 0, 2)) if self.batch_first else y

    def _final(self, state: Tensor, packed) -> Tensor:
        """A final state (L*D, N, H) in the caller's batch order."""
        if packed is None or packed.unsorted_indices is None:
            return state
        return _take_batch(state, packed.unsorted_indices)


def _take_batch(state: Tensor, order) -> Tensor:
    """state[:, order] for a permutation `order` of the batch (a differentiable move)."""
    moved = state.permute((1, 0, 2))
    return gather_rows(moved, np.asarray(order)).permute((1, 0, 2))


class LSTM(_Recurrent):
    """forward(x, (h0, c0)=None) -> (output, (h_n, c_n)) as torch.nn.LSTM; x may be a
    PackedSequence (the output is one then, and h_n, c_n hold each sequence's last step).
    With proj_size P > 0, h (the output, h0, h_n) is P wide: h_t = W_hr (o_t * tanh(c_t))."""

    kind = "lstm"

    def forward(self, x, hx=None):
        packed = x if isinstance(x, PackedSequence) else None
        x, sizes, order = self._input(x)
        h0, c0 = (None, None) if hx is None else hx
        n = x.shape[1]
        h0 = self._state(h0, n, "h0", order, self.state_size)
        c0 = self._state(c0, n, "c0", order, self.hidden_size)
        y, hn, cn = self._run(x, h0, c0, sizes)
        return self._output(y, packed), (self._final(hn, packed), self._final(cn, packed))


class GRU(_Recurrent):
    """forward(x, h0=None) -> (output, h_n) as torch.nn.GRU (PackedSequence input too)."""

    kind = "gru"

    def forward(self, x, hx=None):
        packed = x if isinstance(x, PackedSequence) else None
        x, sizes, order = self._input(x)
        h0 = self._state(hx, x.shape[1], "h0", order, self.hidden_size)
        y, hn, _ = self._run(x, h0, None, sizes)
        return self._output(y, packed), self._final(hn, packed)
