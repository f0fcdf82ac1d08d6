"""`tilelang.intrinsics`: only its layout helpers, which feed `T.annotate_layout` hints
(recorded, never applied on the CPU reference)."""

from tilepy.compat.tilelang.layout import make_swizzled_layout

make_mma_swizzle_layout = make_swizzled_layout
make_mma_load_layout = make_swizzled_layout
