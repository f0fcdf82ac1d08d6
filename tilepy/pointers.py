"""Tables of addresses (`T.Tensor([n], T.ptr)` holding `tensor.data_ptr()` values) at a call:
for each `T.make_tensor` view, the tensors the addresses point at are copied into the
kernel's stacked buffer before it runs and, when the kernel writes that buffer, copied back
after. Every address range is checked against this process's memory map first, so a bad
address is an ArgumentError, never a crash. Decides no semantics of the kernel.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from tilepy.errors import ArgumentError, Loc
from tilepy.ir.stmt import PrimFunc, written_params


def _mapped() -> list[tuple[int, int, bool]]:
    """(start, end, writable) of each readable mapping of this process (Linux)."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            span, perms = line.split()[:2]
            if perms[0] == "r":
                lo, hi = (int(x, 16) for x in span.split("-"))
                out.append((lo, hi, perms[1] == "w"))
    return out


def _inside(maps, addr: int, n: int, write: bool) -> bool:
    end = addr + n  # mappings are sorted and may be contiguous: walk across neighbours
    for lo, hi, w in maps:
        if lo <= addr < hi and (w or not write):
            if end <= hi:
                return True
            addr = hi
    return False


def _views(table: np.ndarray, shape, dtype: np.dtype, write: bool, what: str, loc: Loc):
    nbytes = math.prod(shape) * dtype.itemsize
    maps = _mapped()
    views = []
    for k, addr in enumerate(int(a) for a in table.reshape(-1)):
        if addr == 0 or addr % dtype.itemsize or not _inside(maps, addr, nbytes, write):
            raise ArgumentError(
                f"{what}[{k}]: expected the address of {nbytes} {'writable ' if write else ''}"
                f"bytes ({dtype.name} {tuple(shape)}); got {addr:#x}, which is not", loc,
                hint="fill the table with tensor.data_ptr() of live, contiguous tensors of "
                     "that shape and dtype")
        raw = (ctypes.c_char * nbytes).from_address(addr)
        views.append(np.frombuffer(raw, dtype=dtype).reshape(shape))
    return views


def fill(func: PrimFunc, arrays: dict, loc: Loc):
    """Copy each pointer table's tensors into its stacked buffer; returns the function to
    call after the kernel ran (it copies written buffers back to the tensors)."""
    if not func.pointees:
        return lambda: None
    written = written_params(func)
    backs = []
    for h, t in func.pointees:
        buf, table = func.params[h], func.params[t]
        stacked = arrays[buf.name]
        write = buf.name in written
        views = _views(arrays[table.name], stacked.shape[1:], stacked.dtype, write,
                       table.name, loc)
        for k, v in enumerate(views):
            stacked[k] = v
        if write:
            backs.append((stacked, views))

    def write_back() -> None:
        for stacked, views in backs:
            for k, v in enumerate(views):
                v[...] = stacked[k]

    return write_back
