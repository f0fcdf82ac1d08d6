"""`tilelang.intrinsics.utils`: the index helpers programs import next to the MMA emitters
(`index_to_coordinates`, `get_mma_micro_size`, `mma_store_index_map`)."""

from tilepy.compat.tilelang.intrinsics.mma_layout import c_element


def index_to_coordinates(index, shape):
    """Row-major coordinates of a flat `index` in `shape` (ints or kernel values)."""
    coords = []
    for size in reversed(list(shape)):
        coords.append(index % size)
        index = index // size
    return coords[::-1]


def get_mma_micro_size(dtype):
    """(16, 16, k) of one MMA tile: k = 32 for 8-bit inputs, else 16."""
    from tilepy.frontend.dtypes import dtype as _dtype

    return 16, 16, 32 if _dtype(dtype).bits == 8 else 16


def mma_store_index_map(thread_id, local_id):
    """(row, column) of accumulator slot `local_id` of lane `thread_id` (a 16 x 16 tile)."""
    return c_element(thread_id % 32, local_id)
