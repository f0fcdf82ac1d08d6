"""tilepy.ir: the tile IR: types, buffers, expressions, statements, the op table, verifier,
printer, parser, passes and analyses. Pure data and functions over it; never executes a kernel.
"""
