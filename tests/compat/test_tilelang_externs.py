"""TileLang's inline CUDA decode helpers behind `T.import_source` / `T.call_extern`
(`tilelang.quantize.get_mxfp_intrin_group` / `get_lop3_intrin_group`), checked against numpy
models written from the helpers' documented bit work (byte swap, masks and a bf16x2
multiply by 2**126 for the fp4 twiddling; LOP3's 0x6400 magic number and fp16 subtract for
4-bit ints), and the refusals of what tilepy does not run."""

import ml_dtypes
import numpy as np
import pytest

import tilepy
from tilepy import compat
from tilepy.errors import NotPortableError, TileTypeError


@pytest.fixture
def tl():
    assert compat.install()
    import tilelang

    yield tilelang
    compat.uninstall()


def _twiddling_model(b: np.ndarray) -> np.ndarray:
    """decode_fp4_to_bf16_twiddling on groups of 4 bytes (rows of b) -> 8 bfloat16 each,
    as its PTX does: the 4 bytes loaded as a little-endian word, byte-swapped (prmt 0x0123),
    four masked/shifted copies, each half of a copy read as bf16 and multiplied by bf16
    0x7e80 (2**126); the high half of copy j is output j, the low half output j + 4."""
    b = b.astype(np.uint64)
    w = b[:, 0] | b[:, 1] << 8 | b[:, 2] << 16 | b[:, 3] << 24
    t = (w & 0xFF) << 24 | ((w >> 8) & 0xFF) << 16 | ((w >> 16) & 0xFF) << 8 | w >> 24
    mask, word = 0x81C081C0, 0xFFFFFFFF
    d = [t & mask, (t << 3) & word & mask, (t << 6) & word & mask,
         (t << 1) & 0x80008000 | (t >> 3) & 0x01800180 | (t >> 7) & 0x00400040]
    bias = np.uint16(0x7E80).view(ml_dtypes.bfloat16).astype(np.float32)

    def mul(half):
        x = half.astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
        return (x * bias).astype(ml_dtypes.bfloat16)

    out = np.zeros((len(b), 8), ml_dtypes.bfloat16)
    for j in range(4):
        out[:, j], out[:, j + 4] = mul(d[j] >> 16), mul(d[j] & 0xFFFF)
    return out


def _fp4_kernel(T, info, groups: int):
    fn, src = info["func_name"], info["c_source"]

    @T.prim_func
    def decode(B: T.Tensor((groups, 8), "uint8"), S: T.Tensor((groups,), "int32"),
               Out: T.Tensor((groups, 16), "bfloat16"), Scaled: T.Tensor((groups, 16),
                                                                         "bfloat16")):
        with T.Kernel(groups, threads=1) as bx:
            packed = T.alloc_local((8,), "uint8")
            vals = T.alloc_local((16,), "bfloat16")
            scale = T.alloc_local((1,), "bfloat16")
            T.import_source(src)
            for v in T.serial(8):
                packed[v] = B[bx, v]
            T.call_extern(fn, T.address_of(packed[0]), T.address_of(vals[0]), 2,
                          dtype="bfloat16")
            scale[0] = T.shift_left(1, S[bx])  # as the MXFP programs apply their scales
            for v in T.serial(16):
                Out[bx, v] = vals[v]
                Scaled[bx, v] = vals[v] * scale[0]

    return decode


def _fp4_case(groups: int):
    """Groups of 8 bytes; with 256 groups each of the 8 byte slots takes every byte value."""
    g = np.arange(groups, dtype=np.uint64)
    b = np.stack([(g * m + a) & 0xFF for m, a in ((1, 0), (255, 0), (7, 3), (13, 5),
                                                  (29, 1), (3, 7), (11, 2), (5, 9))], 1)
    s = (np.arange(groups) % 31).astype(np.int32)  # scales 2**0 .. 2**30
    return b.astype(np.uint8), s


def _run_fp4(T, q, groups: int):
    info = q.get_mxfp_intrin_group(out_dtype="bfloat16", source_format="uint", source_bit=4,
                                   storage_dtype="uint8", use_twiddling=True)
    assert info["func_name"] == "decode_fp4_to_bf16_twiddling" and info["c_source"]
    b, s = _fp4_case(groups)
    out, scaled = (np.zeros((groups, 16), ml_dtypes.bfloat16) for _ in range(2))
    _fp4_kernel(T, info, groups)(b, s, out, scaled)
    want = np.concatenate([_twiddling_model(b[:, :4]), _twiddling_model(b[:, 4:])], 1)
    assert (out.view(np.uint16) == want.view(np.uint16)).all()
    exact = want.astype(np.float64) * 2.0 ** s[:, None].astype(np.float64)
    assert (scaled.astype(np.float64) == exact).all()  # exact: at most 6 * 2**30
    assert (np.signbit(scaled.astype(np.float32)) == np.signbit(want.astype(np.float32))).all()
    return out, scaled


def test_the_fp4_twiddled_op_matches_the_ptx_on_every_half_word():
    from tilepy.ir.ops import Op, reference
    from tilepy.ir.types import dtype

    h = np.arange(65536, dtype=np.int64)
    want = _twiddling_model(np.stack([h >> 8, h & 0xFF, h >> 8, h & 0xFF], 1))
    for j in range(4):
        got = reference(Op.FP4_TWIDDLED, [h.astype(np.int32), np.int32(j)],
                        (dtype("int32"),) * 2, dtype("bfloat16"))
        bits = np.asarray(got, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
        assert (bits == want[:, j].view(np.uint16)).all(), j
        assert (bits == want[:, j + 4].view(np.uint16)).all(), j
    vals = np.unique(want.astype(np.float32))
    assert sorted(vals.tolist()) == [-6, -4, -3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4, 6]
    zeros = want.view(np.uint16)[want.astype(np.float32) == 0]
    assert set(zeros.tolist()) == {0x0000, 0x8000}  # code 0b1000 gives -0.0


def test_fp4_twiddling_decode_in_a_kernel_matches_its_ptx_on_every_byte(tl):
    import tilelang.language as T
    import tilelang.quantize as q

    with tilepy.backend("interp"):
        _run_fp4(T, q, 256)


def test_fp4_twiddling_decode_gives_the_same_bits_on_the_jit(tl):
    import tilelang.language as T
    import tilelang.quantize as q

    with tilepy.backend("interp"):
        a = _run_fp4(T, q, 256)
    with tilepy.backend("jit"):
        b = _run_fp4(T, q, 256)
    for x, y in zip(a, b):
        assert (x.view(np.uint16) == y.view(np.uint16)).all()


def _lop3_model(b: np.ndarray, signed: bool) -> np.ndarray:
    """decode_i4{s,u}_to_f16 on groups of 4 bytes: the little-endian word w; for i < 4,
    lop3 gives the fp16 pair ((w >> 4i) & 0x000f000f) | 0x64006400, minus 0x6408 (signed) or
    0x6400 per half (sub.f16x2); the low half is output 2i, the high half output 2i + 1."""
    b = b.astype(np.uint64)
    w = b[:, 0] | b[:, 1] << 8 | b[:, 2] << 16 | b[:, 3] << 24
    median = np.uint16(0x6408 if signed else 0x6400).view(np.float16)
    out = np.zeros((len(b), 8), np.float16)
    for i in range(4):
        h = (w >> (4 * i)) & 0x000F000F | 0x64006400
        for half, col in ((h & 0xFFFF, 2 * i), (h >> 16, 2 * i + 1)):
            out[:, col] = half.astype(np.uint16).view(np.float16) - median
    return out


def test_lop3_int4_decodes_match_the_magic_number_model_on_every_byte(tl):
    torch = pytest.importorskip("torch")
    import tilelang.language as T
    from tilelang.quantize import get_lop3_intrin_group, interleave_weight

    infos = [get_lop3_intrin_group(out_dtype="float16", source_format=f, source_bit=4,
                                   storage_dtype="int8") for f in ("uint", "int")]
    assert [i["func_name"] for i in infos] == ["decode_i4u_to_f16", "decode_i4s_to_f16"]
    (fu, su), (fs, ss) = ((i["func_name"], i["c_source"]) for i in infos)

    @T.prim_func
    def decode(B: T.Tensor((256, 4), "int8"), U: T.Tensor((256, 8), "float16"),
               Sg: T.Tensor((256, 8), "float16"), U2: T.Tensor((256, 8), "float16")):
        with T.Kernel(256) as bx:
            packed = T.alloc_local((4,), "int8")
            u = T.alloc_local((8,), "float16")
            sg = T.alloc_local((8,), "float16")
            two = T.alloc_local((3, 2), "int8")  # pointers into 2-d buffers walk row-major
            u2 = T.alloc_local((3, 4), "float16")
            T.import_source(su)
            T.import_source(ss)
            for v in T.serial(4):
                packed[v] = B[bx, v]
                two[(v + 2) // 2, (v + 2) % 2] = B[bx, v]
            T.call_extern(fu, T.address_of(packed[0]), T.address_of(u[0]), dtype="float16")
            T.call_extern("handle", fs, T.address_of(packed[0]), T.address_of(sg[0]))
            T.call_extern(fu, T.address_of(two[1, 0]), T.address_of(u2[0, 2]), 8,
                          dtype="float16")
            for v in T.serial(8):
                U[bx, v] = u[v]
                Sg[bx, v] = sg[v]
                U2[bx, v] = u2[(v + 2) // 4, (v + 2) % 4]

    g = np.arange(256)
    b = np.stack([g, g * 7 + 3, g * 13 + 5, 255 - g], 1).astype(np.uint8).view(np.int8)
    u, s, u2 = (np.zeros((256, 8), np.float16) for _ in range(3))
    with tilepy.backend("interp"):
        decode(b, u, s, u2)
    assert (u == _lop3_model(b.view(np.uint8), False)).all() and (u2 == u).all()
    assert (s == _lop3_model(b.view(np.uint8), True)).all() and s.min() == -8
    # interleave_weight puts the nibbles where the decoder reads them: natural order back
    inter = interleave_weight(torch.from_numpy(b.copy()), 4, "float16").numpy()
    with tilepy.backend("interp"):
        decode(inter, u, s, u2)
    byte = b.view(np.uint8).astype(np.int64)
    nib = np.stack([byte & 15, byte >> 4], -1).reshape(256, 8)
    assert (u == nib).all()


def test_unknown_or_foreign_external_functions_are_refused(tl):
    import tilelang.language as T
    from tilelang.quantize import get_lop3_intrin_group, get_mxfp_intrin_group

    with pytest.raises(NotPortableError, match=r"external function 'my_decode' "
                                               r"\(T.call_extern; CUDA device code\)"):
        @T.prim_func
        def unknown(B: T.Tensor((4,), "uint8"), O: T.Tensor((8,), "bfloat16")):
            with T.Kernel(1) as _:
                T.call_extern("my_decode", T.address_of(B[0]), T.address_of(O[0]),
                              dtype="bfloat16")

    src = "__device__ void decode_fp4_to_bf16_twiddling(uint8_t *a, bf16 *b, int n) {}"
    with pytest.raises(NotPortableError, match="imports its own CUDA source for it"):
        @T.prim_func
        def foreign(B: T.Tensor((4,), "uint8"), O: T.Tensor((8,), "bfloat16")):
            with T.Kernel(1) as _:
                T.import_source(src)
                T.call_extern("decode_fp4_to_bf16_twiddling", T.address_of(B[0]),
                              T.address_of(O[0]), 1, dtype="bfloat16")

    info = get_mxfp_intrin_group(use_twiddling=True)
    with pytest.raises(TileTypeError, match="writes bfloat16 values: expected T.address_of "
                                            "an element of a bfloat16 buffer"):
        @T.prim_func
        def wrong_dtype(B: T.Tensor((4,), "uint8"), O: T.Tensor((8,), "float16")):
            with T.Kernel(1) as _:
                T.call_extern(info["func_name"], T.address_of(B[0]), T.address_of(O[0]), 1,
                              dtype="float16")

    with pytest.raises(NotPortableError, match=r"decode_fp4_to_bf16 \(tilelang.quantize"):
        get_mxfp_intrin_group(out_dtype="bfloat16", use_twiddling=False)
    with pytest.raises(NotPortableError, match=r"decode_i4s_to_f16_scale \(tilelang"):
        get_lop3_intrin_group(out_dtype="float16", source_format="int", with_scaling=True)


def _i2_model(b: np.ndarray, signed: bool) -> np.ndarray:
    """decode_i2{u,s}_to_i8s on groups of 4 bytes (word w, little-endian): for i < 4, lop3
    gives the word (w >> 2i) & 0x03030303, whose byte b is output 4i + b, minus 2 per byte
    (__vsub4 with 0x02020202) when signed."""
    b = b.astype(np.int64)
    out = np.stack([(b[:, k % 4] >> (2 * (k // 4))) & 3 for k in range(16)], 1)
    return (out - 2 * signed).astype(np.int8)


def test_lop3_int2_decodes_match_the_model_and_a_prelude_of_library_text_runs(tl, monkeypatch):
    import hashlib

    import tilelang.language as T
    from tilelang.quantize import get_lop3_intrin_group

    from tilepy.frontend import externs

    infos = [get_lop3_intrin_group(out_dtype="int8", source_format=f, source_bit=2)
             for f in ("uint", "int")]
    assert [i["func_name"] for i in infos] == ["decode_i2u_to_i8s", "decode_i2s_to_i8s"]
    library = "__device__ void decode_i2u_to_i8s(int8_t *a, int8_t *b, int n) {/* lib */}"
    monkeypatch.setattr(externs, "_LIBRARY", {hashlib.sha256(library.encode()).hexdigest()})

    def build(prelude):
        @T.prim_func
        def decode(B: T.Tensor((256, 4), "int8"), U: T.Tensor((256, 16), "int8"),
                   S: T.Tensor((256, 16), "int8")):
            with T.Kernel(256, prelude=prelude) as bx:
                packed = T.alloc_local((4,), "int8")
                u = T.alloc_local((16,), "int8")
                s = T.alloc_local((16,), "int8")
                for v in T.serial(4):
                    packed[v] = B[bx, v]
                T.call_extern("handle", "decode_i2u_to_i8s", T.address_of(packed[0]),
                              T.address_of(u[0]))
                T.call_extern("handle", "decode_i2s_to_i8s", T.address_of(packed[0]),
                              T.address_of(s[0]), 16)
                for v in T.serial(16):
                    U[bx, v] = u[v]
                    S[bx, v] = s[v]
        return decode

    g = np.arange(256)
    b = np.stack([g, g * 7 + 3, g * 13 + 5, 255 - g], 1).astype(np.uint8)  # every byte
    u, s = np.zeros((256, 16), np.int8), np.zeros((256, 16), np.int8)
    with tilepy.backend("interp"):
        build(library)(b.view(np.int8), u, s)  # the library's text: the modelled helper
    np.testing.assert_array_equal(u, _i2_model(b, False))
    np.testing.assert_array_equal(s, _i2_model(b, True))
    assert s.min() == -2 and s.max() == 1
    with pytest.raises(NotPortableError, match="imports its own CUDA source for it"):
        build(library.replace("lib", "mine"))  # other text for the name: refused


def test_dp4a_adds_the_dot_product_of_four_int8_pairs(tl):
    import tilelang.language as T

    @T.prim_func
    def dots(A: T.Tensor((64, 8), "int8"), B: T.Tensor((64, 8), "int8"),
             C: T.Tensor((64,), "int32")):
        with T.Kernel(64) as bx:
            a = T.alloc_local((8,), "int8")
            b = T.alloc_local((2, 4), "int8")  # a 2-d buffer: the 4 values walk row-major
            acc = T.alloc_local((1,), "int32")
            for v in T.serial(8):
                a[v] = A[bx, v]
                b[v // 4, v % 4] = B[bx, v]
            acc[0] = C[bx]
            for q in T.serial(2):
                T.dp4a(a[q * 4], b[q, 0], acc[0])
            C[bx] = acc[0]

    rng = np.random.default_rng(6)
    a = rng.integers(-128, 128, (64, 8)).astype(np.int8)
    b = rng.integers(-128, 128, (64, 8)).astype(np.int8)
    c = rng.integers(-1000, 1000, 64).astype(np.int32)
    want = c + (a.astype(np.int64) * b.astype(np.int64)).sum(1)
    with tilepy.backend("interp"):
        dots(a, b, c)
    np.testing.assert_array_equal(c, want)
    with pytest.raises(TileTypeError, match="expected int8 a and b and an int32 c"):
        @T.prim_func
        def wrong(A: T.Tensor((4,), "int8"), C: T.Tensor((1,), "float32")):
            with T.Kernel(1) as _:
                T.dp4a(A[0], A[0], C[0])
