"""tilepy.jit: lowers tile IR to readable Python source and compiles it with Numba.

jit/ never decides semantics; it only transcribes the op table. Imported lazily.
"""
