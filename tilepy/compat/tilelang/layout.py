"""`tilelang.layout`: layout constructors, which only appear in `T.annotate_layout` hints
(recorded, never applied on the CPU reference)."""

from tilepy.language import Fragment, Layout, make_swizzled_layout  # noqa: F401


def __getattr__(name: str):
    if name.startswith("make_"):  # make_mma_swizzle_layout, make_wgmma_swizzled_layout...
        return make_swizzled_layout
    raise AttributeError(f"module 'tilelang.layout' has no attribute {name!r}")
