"""`tilelang.carver.roller.rasterization`: the block-order plans a recommender's hint
carries (block order is a GPU cache hint; tilepy's results do not depend on it)."""


class Rasterization:
    """A block launch order."""


class NoRasterization(Rasterization):
    pass


class Rasterization2DRow(Rasterization):
    pass


class Rasterization2DColumn(Rasterization):
    pass
