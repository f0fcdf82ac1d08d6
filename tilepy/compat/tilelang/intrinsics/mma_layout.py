"""`tilelang.intrinsics.mma_layout`: which lane of a warp holds which element of an
`mma.sync` operand (m16n8k16 for 16-bit data, m16n8k32 for 8-bit data), as `ldmatrix` x4
leaves it, and of the 16 x 16 accumulator tile that two m16n8 instructions make. Plain
integer arithmetic: it works on ints and on kernel values (the emitters trace it).

Per lane `l` (g = l // 4, t = l % 4) and fragment slot `v`:
- A (16 rows x k): 16-bit: row g + 8 * (v // 2 % 2), k 8 * (v // 4) + 2 * t + v % 2;
  8-bit: row g + 8 * (v // 4 % 2), k 16 * (v // 8) + 4 * t + v % 4.
- B (16 columns n x k, read from an [n, k] tile): slots of the first half hold n < 8:
  16-bit: n 8 * (v // 4) + g, k 8 * (v // 2 % 2) + 2 * t + v % 2;
  8-bit: n 8 * (v // 8) + g, k 16 * (v // 4 % 2) + 4 * t + v % 4.
- C (16 x 16): row g + 8 * (v // 2 % 2), column 8 * (v // 4) + 2 * t + v % 2.
"""

from tilepy.compat.tilelang.intrinsics import get_swizzle_layout  # noqa: F401
from tilepy.compat.tilelang.layout import make_swizzled_layout

make_mma_swizzle_layout = make_swizzled_layout  # a layout hint: recorded, never applied


def _per_byte(bits: int) -> int:
    """Elements per 32-bit register: 2 for 16-bit data, 4 for 8-bit data."""
    return 32 // bits


def a_element(lane, v, bits=16):
    """(row, k) of the A operand held in slot `v` of `lane`."""
    e = _per_byte(bits)
    return lane // 4 + 8 * (v // e % 2), 4 * e * (v // (2 * e)) + e * (lane % 4) + v % e


def b_element(lane, v, bits=16):
    """(n, k) of the B operand ([n, k] storage) held in slot `v` of `lane`."""
    e = _per_byte(bits)
    return 8 * (v // (2 * e)) + lane // 4, 4 * e * (v // e % 2) + e * (lane % 4) + v % e


def c_element(lane, v):
    """(row, column) of the 16 x 16 accumulator tile held in slot `v` of `lane`."""
    return lane // 4 + 8 * (v // 2 % 2), 8 * (v // 4) + 2 * (lane % 4) + v % 2


def a_owner(row, k, bits=16):
    """(lane, slot) that holds A[row, k]: the inverse of `a_element`."""
    e = _per_byte(bits)
    lane = 4 * (row % 8) + k % (4 * e) // e
    return lane, 2 * e * (k // (4 * e)) + e * (row // 8) + k % e


def b_owner(n, k, bits=16):
    """(lane, slot) that holds B[n, k] ([n, k] storage): the inverse of `b_element`."""
    e = _per_byte(bits)
    lane = 4 * (n % 8) + k % (4 * e) // e
    return lane, 2 * e * (n // 8) + e * (k // (4 * e)) + k % e


def mma_sources(lane, v, kq, t4, ke, bits=16):
    """((lane, slot) of A, (lane, slot) of B) that accumulator slot `v` of `lane` reads at
    k = 4e * kq + e * t4 + ke (e elements a register): `a_owner` / `b_owner` of its row and
    column, written so that only `lane` varies at run time."""
    e = _per_byte(bits)
    a = 4 * (lane // 4) + t4, 2 * e * kq + e * (v // 2 % 2) + ke
    b = 4 * (2 * (lane % 4) + v % 2) + t4, 2 * e * (v // 4) + e * kq + ke
    return a, b


def mma_store_32x8_to_shared_16x16_layout(thread_id, local_id):
    """TileLang's name for `c_element`."""
    return c_element(thread_id, local_id)
