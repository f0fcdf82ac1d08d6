"""`tilelang.transform`: of TileLang's IR passes only `simplify_prim_func`, whose
simplification changes no result: the kernel is returned as it is; and
`PassConfigKey` (also exported at the top level)."""

import enum


def simplify_prim_func(func):
    """A decorator (or a call on a prim_func): the same function."""
    return func


class _AnyKey(enum.EnumMeta):
    def __getattr__(cls, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return name


class PassConfigKey(enum.Enum, metaclass=_AnyKey):
    """TileLang's compiler pass options: any key is accepted (as its name) and ignored."""
