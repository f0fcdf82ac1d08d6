"""Training attention (tilepy.kernels.attention_api): forward, logsumexp and gradients
against a float64 numpy reference within the bounds of tilepy.kernels.checks_lib, for
causal (top-left or bottom-right aligned) / not, GQA, variable lengths, cross-attention
(keys of other lengths) and bfloat16 / float16 inputs; the JIT gives the interpreter's
bits."""

import numpy as np
import pytest

import tilepy
from tilepy.errors import KernelInputError
from tilepy.kernels.attention_api import attention, attention_backward
from tilepy.kernels.checks_lib import attention_train_case

TILE = 32
SHAPES = [  # (lengths, heads, kv_heads, dim, causal, varlen): one compile serves them all
    ([70, 70], 4, 2, 16, True, False),
    ([45, 45], 4, 2, 16, False, False),
    ([5, 0, 70, 33], 4, 2, 16, True, True),
    ([1, 40, 64], 4, 2, 16, False, True),
]


CROSS = [  # (lengths, keys' lengths, heads, kv_heads, dim, causal, varlen, dtype)
    ([40, 40], [70, 70], 4, 2, 16, True, False, "float32"),  # more keys than queries
    ([70], [23], 2, 2, 16, True, False, "float32"),  # more queries: rows past 23 see all
    ([5, 0, 70, 33], [64, 7, 9, 40], 4, 2, 16, False, True, "float32"),
    ([30, 45], [70, 12], 4, 2, 16, True, True, "float32"),
    ([45, 45], [45, 45], 4, 2, 16, True, False, "bfloat16"),
    ([5, 0, 70, 33], [64, 7, 9, 40], 4, 2, 16, True, True, "bfloat16"),
    ([40, 40], [70, 70], 2, 1, 16, False, False, "float16"),
]


BOTTOM_RIGHT = [  # causal="bottom_right": query i sees keys j <= i + Lk - Lq
    ([70, 70], [40, 40], 4, 2, 16, "bottom_right", False, "float32"),  # 30 rows see no key
    ([40, 40], [70, 70], 4, 2, 16, "bottom_right", False, "float32"),
    ([5, 0, 70, 33], [64, 7, 9, 40], 4, 2, 16, "bottom_right", True, "float32"),
    ([5, 0, 70, 33], [64, 7, 9, 40], 4, 2, 16, "bottom_right", True, "bfloat16"),
]


def _run(case):
    i = case.inputs
    o, lse = attention(i["q"], i["k"], i["v"], i["causal"], i["cu_seqlens"], TILE, TILE,
                       i["cu_seqlens_k"])
    dq, dk, dv = attention_backward(i["q"], i["k"], i["v"], o, lse, i["do"], i["causal"],
                                    i["cu_seqlens"], TILE, i["cu_seqlens_k"])
    return {"o": o, "lse": lse, "dq": dq, "dk": dk, "dv": dv}


def _cross_case(shape, seed):
    lengths, lengths_k, *rest, dtype = shape
    return attention_train_case(np.random.default_rng(seed), lengths, *rest, lengths_k, dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}-causal{s[4]}-varlen{s[5]}")
def test_attention_forward_and_gradients_within_bound(shape):
    case = attention_train_case(np.random.default_rng(3), *shape)
    with tilepy.backend("interp"):
        outs = _run(case)
    for name, (err, ratio, ok) in case.check(outs).items():
        assert ok, f"{case.name} {name}: max error {err:.3g} is {ratio:.3g}x the bound"


@pytest.mark.parametrize("shape", CROSS, ids=lambda s: f"{s[0]}x{s[1]}-causal{s[5]}-{s[7]}")
def test_cross_attention_and_narrow_inputs_within_bound(shape):
    case = _cross_case(shape, 8)
    with tilepy.backend("interp"):
        outs = _run(case)
    assert outs["o"].dtype == outs["dq"].dtype == np.dtype(shape[-1])
    for name, (err, ratio, ok) in case.check(outs).items():
        assert ok, f"{case.name} {name}: max error {err:.3g} is {ratio:.3g}x the bound"


@pytest.mark.parametrize("shape", BOTTOM_RIGHT, ids=lambda s: f"{s[0]}x{s[1]}-varlen{s[6]}-"
                         f"{s[7]}")
def test_bottom_right_causal_within_bound(shape):
    # rows that see no key (Lq > Lk: the 61 last-but-9 of the varlen case's third
    # sequence, whole tiles of them) must give o = 0, lse = -inf and zero gradients exactly:
    # their bound is 0 and -inf matches only -inf
    case = _cross_case(shape, 12)
    with tilepy.backend("interp"):
        outs = _run(case)
    for name, (err, ratio, ok) in case.check(outs).items():
        assert ok, f"{case.name} {name}: max error {err:.3g} is {ratio:.3g}x the bound"


def test_bottom_right_is_aligned_at_the_last_key_and_empty_rows_are_zero():
    # 3 queries, 5 keys: query i sees keys 0..i+2; 5 queries, 3 keys: queries 0 and 1 see
    # none (o 0, lse -inf, gradients 0), query 2 sees key 0 alone (o = v[0] exactly)
    rng = np.random.default_rng(13)
    q = rng.standard_normal((1, 1, 5, 16)).astype(np.float32)
    k, v, do = (rng.standard_normal((1, 1, 5, 16)).astype(np.float32) for _ in range(3))
    with tilepy.backend("interp"):
        o, lse = attention(q[:, :, :3], k, v, causal="bottom_right", block_M=16,
                           block_N=16)
        s = q[0, 0, 0].astype(np.float64) @ k[0, 0, :3].T.astype(np.float64) / 4
        p = np.exp(s - s.max())
        np.testing.assert_allclose(o[0, 0, 0], p @ v[0, 0, :3] / p.sum(), rtol=1e-5)
        o, lse = attention(q, k[:, :, :3], v[:, :, :3], causal="bottom_right", block_M=16,
                           block_N=16)
        grads = attention_backward(q, k[:, :, :3], v[:, :, :3], o, lse, do, "bottom_right",
                                   block=16)
    assert np.all(o[0, 0, :2] == 0) and np.all(lse[0, 0, :2] == -np.inf)
    np.testing.assert_array_equal(o[0, 0, 2], v[0, 0, 0])
    assert np.all(grads[0][0, 0, :2] == 0)  # dq of the empty rows
    assert not any(np.isnan(g).any() for g in grads)
    assert np.all(grads[2][0, 0, 0] != 0)  # dv of key 0: queries 2..4 see it


def test_bfloat16_bound_catches_values_off_by_four_ulps():
    # the bfloat16 bound is a few of bfloat16's ulps: values off by 2^-5 (4 ulps) relative
    # must fail it
    case = _cross_case(CROSS[4], 9)
    i = case.inputs
    v = (i["v"].astype(np.float32) * (1 + 2**-5)).astype(i["v"].dtype)
    with tilepy.backend("interp"):
        o, _ = attention(i["q"], i["k"], v, i["causal"], None, TILE, TILE)
    assert not case.check({**case.refs, "o": o})["o"][2]


def test_causal_is_top_left_aligned_as_torch_sdpa():
    # 3 queries, 5 keys: query i sees keys 0..i (torch SDPA's is_causal); bottom-right
    # alignment (flash-attn's) would let query 0 see keys 0..2
    rng = np.random.default_rng(10)
    q = rng.standard_normal((1, 1, 3, 16)).astype(np.float32)
    k, v = (rng.standard_normal((1, 1, 5, 16)).astype(np.float32) for _ in range(2))
    with tilepy.backend("interp"):
        o, _ = attention(q, k, v, causal=True, block_M=16, block_N=16)
    np.testing.assert_array_equal(o[0, 0, 0], v[0, 0, 0])  # one key: its value, exactly
    s = q[0, 0, 1].astype(np.float64) @ k[0, 0, :2].T.astype(np.float64) / 4
    p = np.exp(s - s.max())
    np.testing.assert_allclose(o[0, 0, 1], p @ v[0, 0, :2] / p.sum(), rtol=1e-5)


@pytest.mark.parametrize("wrong", [False, True])
def test_wrong_mask_is_caught(wrong):
    # the bounds are far below the effect of a masking mistake: attending without the
    # causal mask must fail the causal case, and top-left alignment the bottom-right case
    case = attention_train_case(np.random.default_rng(4), *SHAPES[0]) if not wrong else \
        _cross_case(BOTTOM_RIGHT[1], 4)
    case.inputs["causal"] = wrong
    with tilepy.backend("interp"):
        outs = _run(case)
    assert not any(ok for *_, ok in case.check(outs).values())


@pytest.mark.parametrize("causal", [True, "bottom_right"])  # one kernel (a run-time flag)
def test_jit_forward_gives_the_interpreters_bits(causal):
    case = _cross_case(CROSS[3], 5)  # varlen, keys of other lengths (rows that see none)
    i = case.inputs
    outs = {}
    for backend in ("interp", "jit"):
        with tilepy.backend(backend):
            outs[backend] = attention(i["q"], i["k"], i["v"], causal, i["cu_seqlens"],
                                      TILE, TILE, i["cu_seqlens_k"])
    for want, got in zip(outs["interp"], outs["jit"]):
        assert np.array_equal(want, got)


@pytest.mark.exhaustive  # three more large kernels to compile (about a minute here)
@pytest.mark.parametrize("shape", [CROSS[3], CROSS[5], BOTTOM_RIGHT[2]],
                         ids=["float32", "bfloat16", "bottom-right"])
def test_jit_gives_the_interpreters_bits(shape):
    case = _cross_case(shape, 5)
    with tilepy.backend("interp"):
        want = _run(case)
    with tilepy.backend("jit"):
        got = _run(case)
    for k in want:
        assert np.array_equal(want[k], got[k]), k


def test_bad_shapes_name_the_callers_line():
    q = np.zeros((1, 3, 8, 16), np.float32)
    k = np.zeros((1, 2, 8, 16), np.float32)
    with pytest.raises(KernelInputError, match="multiple of kv_heads") as e:
        attention(q, k, k)
    assert e.value.loc.file == __file__
    with pytest.raises(KernelInputError, match="cu_seqlens"):
        attention(q[0], q[0], q[0], cu_seqlens=np.array([0, 5], np.int32))
    with pytest.raises(KernelInputError, match="queries but no keys"):
        attention(q, q[:, :, :0], q[:, :, :0])
    with pytest.raises(KernelInputError, match="one of float32, bfloat16, float16"):
        attention(q.astype(np.float64), q.astype(np.float64), q.astype(np.float64))
    with pytest.raises(KernelInputError, match="causal must be False, True, 'top_left'"):
        attention(q, q, q, causal="lower_right")
    with pytest.raises(KernelInputError, match="causal must be"):
        attention_backward(q, q, q, q, q[..., 0], q, causal=2)
    with pytest.raises(KernelInputError, match="cu_seqlens_k has 3 entries"):
        attention(q[0], q[0], q[0], cu_seqlens=np.array([0, 3], np.int32),
                  cu_seqlens_k=np.array([0, 1, 3], np.int32))


def test_gradients_without_dq_partials(monkeypatch):
    # past DQ_PARTS_BYTES the backward recomputes P in a dQ kernel instead of keeping dS K
    # per KV tile: the same bound
    import tilepy.kernels.attention_api as api

    monkeypatch.setattr(api, "DQ_PARTS_BYTES", 0)
    for case in (attention_train_case(np.random.default_rng(6), *SHAPES[2]),
                 _cross_case(BOTTOM_RIGHT[2], 6)):
        with tilepy.backend("interp"):
            outs = _run(case)
        for name, (err, ratio, ok) in case.check(outs).items():
            assert ok, f"{case.name} {name}: max error {err:.3g} is {ratio:.3g}x the bound"


@pytest.mark.parametrize("causal", [False, True, "bottom_right"])  # one length: one mask
def test_fixed_shape_flash_attention_is_the_training_forward_bit_for_bit(causal):
    # flash_attention (fixed sizes, (B, H, S, D)) runs the training forward's online
    # softmax: the same bits as attention() on ragged lengths, a dim whose 1/sqrt(d) is
    # inexact, unequal tiles, and bfloat16 inputs
    from tilepy.kernels import flash_attention

    rng = np.random.default_rng(11)
    for dtype, (bm, bn) in (("float32", (16, 32)), ("bfloat16", (32, 16))):
        q, k, v = (rng.standard_normal((2, 2, 45, 48)).astype(np.float32).astype(
            np.dtype(dtype)) for _ in range(3))
        with tilepy.backend("interp"):
            want, _ = attention(q, k, v, causal, None, bm, bn)
            got = flash_attention(2, 2, 45, 48, causal, bm, bn, dtype)(q, k, v)
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16)), dtype
