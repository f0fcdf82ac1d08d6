"""`tilelang.intrinsics.mma_macro_generator`: TileLang's emitters of warp-level tensor-core
code (`ldmatrix_a`, `ldmatrix_b`, `mma`, `stmatrix`), modelled on the CPU. Each method is a
macro of per-thread tile-language code: after `ldmatrix_*` every thread's local fragment
holds exactly the elements the GPU instruction would put there (mma_layout.py), and `mma`
computes each thread's accumulator elements from its warp's fragments.

`mma` is a warp-shuffle model: every thread publishes its fragments in a per-block table
indexed [thread, slot] (the warp's registers), and after the barrier that table needs each
thread reads the A and B elements of its accumulator elements from the lanes that hold them
(the layout's inverse). Numerics of one instruction: from the accumulator's value, k
ascending within the instruction, each product exact (fp16, bf16, fp8 and int8 inputs),
accumulated in float32 (int32 for integer data) and rounded once to the accumulator dtype.
"""

from __future__ import annotations

import inspect

import tilepy.language as T
from tilepy.compat.tilelang.intrinsics import mma_layout as L
from tilepy.errors import Loc, NotPortableError, TileTypeError
from tilepy.frontend.dtypes import dtype as _dtype
from tilepy.ir.types import Scope

_WARP = 32
_MODELLED = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8")


def _caller_loc() -> Loc | None:
    """The program's line that built the emitter (the first frame outside this file)."""
    for info in inspect.stack()[2:]:
        if info.filename != __file__:
            return Loc(info.filename, info.lineno)
    return None


def _refuse(name: str, expected: str, got, hint: str):
    raise NotPortableError(
        f"not portable to the CPU reference: TensorCoreIntrinEmitter option {name}: the CPU "
        f"model has {expected}; got {got!r}", _caller_loc(), hint=hint)


class TensorCoreIntrinEmitter:
    """The m16n8k16 (16-bit inputs) / m16n8k32 (8-bit inputs) emitter for a block of
    block_row_warps x block_col_warps warps, each computing warp_row_tiles x warp_col_tiles."""

    M_DIM = N_DIM = 16
    WARP_SIZE = _WARP
    is_m_first = False

    def __init__(self, a_dtype="float16", b_dtype="float16", accum_dtype="float16",
                 a_transposed=False, b_transposed=False, block_row_warps=2,
                 block_col_warps=2, warp_row_tiles=8, warp_col_tiles=8, chunk=16,
                 reduce_k=1, num_elems_per_byte=1, is_m_first=False, thread_var=None):
        self.a_dtype, self.b_dtype = str(_dtype(a_dtype)), str(_dtype(b_dtype))
        self.accum_dtype = str(_dtype(accum_dtype))
        self._check(a_transposed, b_transposed, reduce_k, num_elems_per_byte)
        self.a_transposed, self.b_transposed = a_transposed, b_transposed
        self.block_row_warps, self.block_col_warps = block_row_warps, block_col_warps
        self.warp_row_tiles, self.warp_col_tiles = warp_row_tiles, warp_col_tiles
        self.chunk, self.reduce_k = chunk, reduce_k
        self.num_elems_per_byte = num_elems_per_byte
        self.is_m_first = bool(is_m_first)
        self.thread_var = thread_var
        self.bits = _dtype(self.a_dtype).bits
        self.k_dim = 256 // self.bits
        self.micro_size_x = self.micro_size_y = 16
        self.micro_size_k = self.k_dim
        self.mma_prefix = f"m16n8k{self.k_dim}"
        self.local_size_a = self.local_size_b = 16 * self.k_dim // _WARP
        self.local_size_out = 16 * 16 // _WARP
        self.warp_rows, self.warp_cols = warp_row_tiles // 16, warp_col_tiles // 16
        self.threads = _WARP * block_row_warps * block_col_warps * reduce_k
        if self.warp_rows == 0 or self.warp_cols == 0 or warp_row_tiles % 16 \
                or warp_col_tiles % 16:
            raise TileTypeError(
                f"TensorCoreIntrinEmitter: warp tiles {warp_row_tiles} x {warp_col_tiles}: "
                f"expected positive multiples of 16", _caller_loc(),
                hint="each warp computes whole 16 x 16 accumulator tiles")

    def _check(self, a_transposed, b_transposed, reduce_k, num_elems_per_byte):
        hint = ("the model covers A as [m, k] and B as [n, k] tiles (a_transposed=False, "
                "b_transposed=True) of fp16, bf16, fp8 or int8 data; write other products "
                "as T.gemm, the portable form")
        for name, got in (("a_dtype", self.a_dtype), ("b_dtype", self.b_dtype)):
            if got not in _MODELLED:
                _refuse(name, f"one of {', '.join(_MODELLED)}", got, hint)
        if _dtype(self.a_dtype).bits != _dtype(self.b_dtype).bits:
            _refuse("b_dtype", f"the width of a_dtype ({self.a_dtype})", self.b_dtype, hint)
        expected = {"float16": "float16 or float32", "bfloat16": "float32",
                    "int8": "int32"}.get(self.a_dtype, "float32")
        if self.accum_dtype not in expected.split(" or "):
            _refuse("accum_dtype", expected, self.accum_dtype, hint)
        if a_transposed or not b_transposed:
            _refuse("a_transposed/b_transposed", "a_transposed=False, b_transposed=True",
                    (a_transposed, b_transposed), hint)
        if reduce_k != 1 or num_elems_per_byte != 1:
            _refuse("reduce_k/num_elems_per_byte", "1 and 1",
                    (reduce_k, num_elems_per_byte), hint)

    # ------------------------------------------------ build-time helpers (traced on IR)
    def extract_thread_binding(self, thread_id, is_m_first=None):
        """(lane, warp_n, warp_m) of a thread, as TileLang numbers the block's warps."""
        m_first = self.is_m_first if is_m_first is None else is_m_first
        warp = thread_id // _WARP
        if m_first:
            return (thread_id % _WARP, warp % self.block_col_warps,
                    warp // self.block_col_warps % self.block_row_warps)
        return (thread_id % _WARP, warp // self.block_row_warps % self.block_col_warps,
                warp % self.block_row_warps)

    def _a_at(self, lane, v):
        return L.a_element(lane, v, self.bits)

    def _b_at(self, lane, v):
        return L.b_element(lane, v, self.bits)

    def _math_dtype(self):
        return "int32" if self.accum_dtype == "int32" else "float32"

    def _product(self, a, b):
        """a * b, exact in the accumulation dtype."""
        return T.cast(a, self._math_dtype()) * T.cast(b, self._math_dtype())

    @staticmethod
    def _unrolled(n: int) -> tuple:
        """range(n) as a build-time sequence: a loop over it is unrolled in the kernel."""
        return tuple(range(n))

    @staticmethod
    def _slots(buf) -> int:
        """The slots of a per-thread fragment: a 1-d T.alloc_local buffer."""
        if getattr(buf, "scope", None) is not Scope.LOCAL or buf.ndim != 1:
            raise TileTypeError(
                f"the MMA emitters' fragments: expected a 1-d T.alloc_local buffer (per "
                f"thread); got {getattr(buf, 'name', buf)!r} in {getattr(buf, 'scope', '?')} "
                "memory", hint="allocate A_local, B_local and C_local with T.alloc_local, as "
                               "TileLang's intrinsics examples do")
        (n,) = buf.static_shape()
        return n

    # ------------------------------------------------ the emitted code (macros)
    @T.macro
    def ldmatrix_a(self, A_local_buf, A_shared_buf, ki, rk=0, thread_binding=None):
        """A's fragments of this warp's warp_rows 16-row tiles at k-step `ki`."""
        tx = T.get_thread_binding() if thread_binding is None else thread_binding
        lane, _, warp_m = self.extract_thread_binding(tx)
        self._slots(A_local_buf)
        for i in T.serial(self.warp_rows):
            for v in T.serial(self.local_size_a):
                a_row, a_k = self._a_at(lane, v)
                A_local_buf[i * self.local_size_a + v] = A_shared_buf[
                    warp_m * self.warp_row_tiles + i * 16 + a_row,
                    rk * self.chunk + ki * self.micro_size_k + a_k]

    @T.macro
    def ldmatrix_b(self, B_local_buf, B_shared_buf, ki, rk=0, thread_binding=None):
        """B's fragments ([n, k] tile) of this warp's warp_cols 16-column tiles."""
        tx = T.get_thread_binding() if thread_binding is None else thread_binding
        lane, warp_n, _ = self.extract_thread_binding(tx)
        self._slots(B_local_buf)
        for j in T.serial(self.warp_cols):
            for v in T.serial(self.local_size_b):
                b_n, b_k = self._b_at(lane, v)
                B_local_buf[j * self.local_size_b + v] = B_shared_buf[
                    warp_n * self.warp_col_tiles + j * 16 + b_n,
                    rk * self.chunk + ki * self.micro_size_k + b_k]

    @T.macro
    def mma(self, A_local_buf, B_local_buf, C_local_buf, k_inner=0):
        """C += A @ B.T on every (i, j) 16 x 16 tile of the warp: two m16n8 instructions.
        `k_inner` offsets only fragment-scope buffers in TileLang; local ones (the model's)
        start at slot 0 whatever it is."""
        tx = T.get_thread_binding()
        lane = tx % _WARP
        first = tx - lane  # the warp's first thread
        a_regs = T.alloc_shared((self.threads, self._slots(A_local_buf)), self.a_dtype)
        b_regs = T.alloc_shared((self.threads, self._slots(B_local_buf)), self.b_dtype)
        self._slots(C_local_buf)
        acc = T.alloc_local((1,), self._math_dtype())
        for v in T.serial(self._slots(A_local_buf)):
            a_regs[tx, v] = A_local_buf[v]
        for v in T.serial(self._slots(B_local_buf)):
            b_regs[tx, v] = B_local_buf[v]
        e = 32 // self.bits  # elements a 32-bit register holds
        for i, j in T.grid(self.warp_rows, self.warp_cols):
            for v in T.serial(self.local_size_out):
                at = (i * self.warp_cols + j) * self.local_size_out + v
                acc[0] = T.cast(C_local_buf[at], self._math_dtype())
                # k = 4e * kq + e * t4 + ke, ascending: one add per k
                for kq in T.serial(self.micro_size_k // (4 * e)):
                    for t4 in T.serial(4):
                        for ke in self._unrolled(e):
                            (la, sa), (lb, sb) = L.mma_sources(lane, v, kq, t4, ke, self.bits)
                            acc[0] = acc[0] + self._product(
                                a_regs[first + la, i * self.local_size_a + sa],
                                b_regs[first + lb, j * self.local_size_b + sb])
                C_local_buf[at] = T.cast(acc[0], self.accum_dtype)

    @T.macro
    def stmatrix(self, C_local_buf, C_buf, pid_m=None, pid_n=None, thread_binding=None):
        """Store the accumulators: into a [tiles_m, tiles_n, 16, 16] shared tile, a 2-d
        block tile, or (pid_m, pid_n given) the 2-d global C at that block."""
        tx = T.get_thread_binding() if thread_binding is None else thread_binding
        lane, warp_n, warp_m = self.extract_thread_binding(tx)
        for i, j in T.grid(self.warp_rows, self.warp_cols):
            for v in T.serial(self.local_size_out):
                row, col = L.c_element(lane, v)
                value = C_local_buf[(i * self.warp_cols + j) * self.local_size_out + v]
                ti = warp_m * self.warp_rows + i
                tj = warp_n * self.warp_cols + j
                if len(C_buf.shape) == 4:
                    C_buf[ti, tj, row, col] = value
                elif pid_m is None:
                    C_buf[ti * 16 + row, tj * 16 + col] = value
                else:
                    C_buf[(pid_m * self.block_row_warps * self.warp_rows + ti) * 16 + row,
                          (pid_n * self.block_col_warps * self.warp_cols + tj) * 16 + col
                          ] = value


class INT4TensorCoreIntrinEmitter(TensorCoreIntrinEmitter):
    """TileLang's int4 emitter: int8 fragments loaded as for int8 data, multiplied by int4
    m16n8k32 instructions, which read each byte as two signed 4-bit values (low nibble
    first): a byte pair contributes lo(a) * lo(b) + hi(a) * hi(b). On bytes in 0..7 that
    is the int8 product (the BitNet programs' data)."""

    def _product(self, a, b):
        x, y = T.cast(a, "int32"), T.cast(b, "int32")
        lo_x, lo_y = ((x & 15) ^ 8) - 8, ((y & 15) ^ 8) - 8
        return lo_x * lo_y + (x >> 4) * (y >> 4)


class TensorCoreIntrinEmitterWithLadderTransform(TensorCoreIntrinEmitter):
    """The ladder-transform variant: its transformed layouts are not modelled."""

    def __init__(self, *args, transform_kind_a=0, transform_kind_b=0, **kwargs):
        super().__init__(*args, **kwargs)
        if int(transform_kind_a) or int(transform_kind_b):
            _refuse("transform_kind_a/transform_kind_b", "0 and 0 (no ladder transform)",
                    (transform_kind_a, transform_kind_b),
                    "the ladder transforms re-lay the shared tiles; use T.gemm")
