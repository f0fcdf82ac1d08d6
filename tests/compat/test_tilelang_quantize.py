"""`tilelang.quantize`: the converters TileLang programs call inside kernels to unpack
packed storage, checked on every byte against the bit formulas of TileLang's own
converters (written out here with numpy), the host-side weight helpers, and the refusal of
the CUDA-source intrinsic groups tilepy does not run."""

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


def _unpack_kernel(T, q):
    @T.prim_func
    def unpack(B: T.Tensor((16, 16), "int8"), S: T.Tensor((16, 32), "float16"),
               U: T.Tensor((16, 32), "int32"), O: T.Tensor((16, 32), "int32"),
               Z: T.Tensor((16, 32), "int32"), F: T.Tensor((16, 32), "float16"),
               E: T.Tensor((16, 16), "float16")):
        with T.Kernel(16) as bx:
            for j in T.serial(32):
                v = B[bx, j // 2]
                S[bx, j] = q._tir_packed_int_to_int_convert("int", 8)(4, v, j % 2, "float16")
                U[bx, j] = q._tir_packed_to_unsigned_convert("int", 8)(4, v, j % 2, "int32")
                O[bx, j] = q._tir_packed_to_signed_convert("int", 8)(4, v, j % 2, "int32")
                Z[bx, j] = q._tir_packed_to_unsigned_convert_with_zeros("int", 8)(
                    4, v, j % 2, 5, "int32")
                F[bx, j] = q._tir_packed_to_fp4_to_f16("int", 8)(4, v, j % 2, "float16")
            for j in T.serial(16):
                E[bx, j] = q._tir_u8_to_f8_e4m3_to_f16(8, B[bx, j], "float16")

    return unpack


def test_packed_converters_match_tilelangs_bit_formulas_on_every_byte(tl):
    import tilelang.language as T
    import tilelang.quantize as q

    b = np.arange(256, dtype=np.uint8).view(np.int8).reshape(16, 16)
    outs = [np.zeros((16, 32), d) for d in (np.float16, np.int32, np.int32, np.int32,
                                            np.float16)] + [np.zeros((16, 16), np.float16)]
    with tilepy.backend("interp"):
        _unpack_kernel(T, q)(b, *outs)
    s, u, o, z, f, e = outs
    byte = b.view(np.uint8).astype(np.int64)
    nib = np.stack([byte & 15, byte >> 4], -1).reshape(16, 32)  # low nibble first
    assert (s == np.where(nib >= 8, nib - 16, nib)).all()      # sign-extended int4
    assert (u == nib).all() and (o == nib - 8).all() and (z == nib - 5).all()
    exp, sign = nib & 7, nib >> 3                                # TileLang's fp4: s eee
    half = ((exp | 8 | sign << 5) << 10).astype(np.uint16)
    assert (f.view(np.uint16) == np.where(exp == 0, 0, half)).all()
    e4 = byte & 0x40
    bits = ((byte >> 7) << 15) | ((((byte & 63) << 7) | e4 << 8 | e4 << 7) ^ 0x2000)
    assert (e.view(np.uint16) == bits.astype(np.uint16)).all()
    assert float(e.reshape(-1)[0x38]) == 1.0 and float(e.reshape(-1)[0xB8]) == -1.0  # e4m3 +-1


def test_a_converter_given_another_storage_dtype_says_so(tl):
    import tilelang.language as T
    from tilelang.quantize import _tir_packed_int_to_int_convert

    with pytest.raises(TileTypeError, match="expected a value of the storage dtype uint8; "
                                            "got int8"):
        @T.prim_func
        def wrong(B: T.Tensor((4,), "int8"), S: T.Tensor((8,), "int32")):
            with T.Kernel(1) as _:
                for j in T.serial(8):
                    S[j] = _tir_packed_int_to_int_convert("uint", 8)(4, B[j // 2], j % 2,
                                                                     "int32")


def test_interleave_and_compress_and_refused_intrinsic_groups(tl):
    torch = pytest.importorskip("torch")
    from tilelang.quantize import (
        gen_quant4,
        general_compress,
        get_lop3_intrin_group,
        interleave_weight,
    )

    words = np.array([0x76543210, 0x0FEDCBA9], np.uint32)
    q = torch.from_numpy(words.view(np.int32).copy()).view(torch.int8)
    out = interleave_weight(q, 4, "float16").view(torch.int32).numpy().view(np.uint32)
    # float16 target: nibble o goes to bit (o % 2) * 16 + (o // 2) * 4
    assert [hex(x) for x in out] == ["0x75316420", "0xecafdb9"]
    codes = torch.tensor([[1, 2, 3, 4, 15, 8, 7, 0]], dtype=torch.int8)  # unsigned codes
    packed = general_compress(codes, 4).view(torch.uint8).tolist()
    assert packed == [[0x21, 0x43, 0x8F, 0x07]]
    original, linear, scales, signed = gen_quant4(64, 8, groupsize=32)
    assert scales.shape == (2, 8) and signed.min() >= -8 and signed.max() <= 8
    assert linear.weight.shape == (8, 64)
    with pytest.raises(NotPortableError, match="decode_i2s_to_f16 .tilelang.quantize"):
        get_lop3_intrin_group(out_dtype="float16", source_format="int", source_bit=2)
