"""`tilelang.intrinsics`: its layout helpers, which feed `T.annotate_layout` hints (recorded,
never applied on the CPU reference), and `get_swizzle_layout`, the index permutation those
hints describe. The warp-level MMA emitters run as a CPU model (`mma_macro_generator`, with
the fragment layouts in `mma_layout`)."""

from tilepy.compat.tilelang.layout import make_swizzled_layout
from tilepy.frontend.dtypes import dtype as _dtype

make_mma_swizzle_layout = make_swizzled_layout
make_mma_load_layout = make_swizzled_layout


def get_swizzle_layout(row, col, row_size, dtype):
    """Where element (row, col) of a shared buffer whose rows hold `row_size` elements goes
    in TileLang's bank-conflict-free layout: (row, col') with col's 16-byte unit XORed with
    a function of the row (a permutation of each row). Works on ints and kernel values."""
    bits = _dtype(dtype).bits
    unit = 128 // bits  # elements per 16 bytes
    outer, inner = col // unit, col % unit
    row_bits = bits * row_size
    if row_bits % 1024 == 0:  # 8 units of 16 B per 128 B: unit ^ (row % 8)
        new_outer = outer ^ (row % unit)
    elif row_bits % 512 == 0:  # 4 units per 64 B: unit ^ ((row % 8) // 2), for 16-bit data
        new_outer = outer ^ ((row % unit) // (32 // bits))
    else:
        raise ValueError(f"get_swizzle_layout: a row of {row_size} {dtype} ({row_bits} bits) "
                         "is not a multiple of 512 bits")
    return row, new_outer * unit + inner
