"""`tilelang.carver.template`: the tile recommender's templates. Building one is fine;
asking it for hints needs a GPU model and is refused (tilelang.carver.arch)."""

from __future__ import annotations

from tilepy.compat.tilelang.carver.arch import _refuse


class _Template:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def with_arch(self, arch):
        _refuse("the carver's GPU tile recommender")

    def recommend_hints(self, *args, **kwargs):
        _refuse("the carver's GPU tile recommender")


class MatmulTemplate(_Template):
    pass


class GEMVTemplate(_Template):
    pass


class ElementwiseTemplate(_Template):
    pass


class GeneralReductionTemplate(_Template):
    pass


class FlashAttentionTemplate(_Template):
    pass


class ConvTemplate(_Template):
    pass
