"""`tilelang.transform`: of TileLang's IR passes only `simplify_prim_func`, whose
simplification changes no result: the kernel is returned as it is; and
`PassConfigKey` (the top-level one)."""


def simplify_prim_func(func):
    """A decorator (or a call on a prim_func): the same function."""
    return func


def __getattr__(name):
    # TileLang defines PassConfigKey here and re-exports it at the top level.
    if name == "PassConfigKey":
        from tilepy.compat.tilelang import PassConfigKey

        return PassConfigKey
    raise AttributeError(f"module 'tilelang.transform' has no attribute {name!r}")
