"""Training attention (tilepy.kernels.attention_api): forward, logsumexp and gradients
against a float64 numpy reference within the bounds of tilepy.kernels.checks_lib, for
causal / not, GQA and variable lengths; the JIT gives the interpreter's bits."""

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


def _run(case):
    i = case.inputs
    o, lse = attention(i["q"], i["k"], i["v"], i["causal"], i["cu_seqlens"], TILE, TILE)
    dq, dk, dv = attention_backward(i["q"], i["k"], i["v"], o, lse, i["do"], i["causal"],
                                    i["cu_seqlens"], TILE)
    return {"o": o, "lse": lse, "dq": dq, "dk": dk, "dv": dv}


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}-causal{s[4]}-varlen{s[5]}")
def test_attention_forward_and_gradients_within_bound(shape):
    case = attention_train_case(np.random.default_rng(3), *shape)
    with tilepy.backend("interp"):
        outs = _run(case)
    for name, (err, ratio, ok) in case.check(outs).items():
        assert ok, f"{case.name} {name}: max error {err:.3g} is {ratio:.3g}x the bound"


def test_wrong_mask_is_caught():
    # the bounds are far below the effect of a masking mistake: attending without the
    # causal mask must fail the causal case
    case = attention_train_case(np.random.default_rng(4), *SHAPES[0])
    case.inputs["causal"] = False
    with tilepy.backend("interp"):
        outs = _run(case)
    assert not any(ok for *_, ok in case.check(outs).values())


def test_jit_forward_gives_the_interpreters_bits():
    case = attention_train_case(np.random.default_rng(5), *SHAPES[2])
    i = case.inputs
    outs = {}
    for backend in ("interp", "jit"):
        with tilepy.backend(backend):
            outs[backend] = attention(i["q"], i["k"], i["v"], i["causal"], i["cu_seqlens"],
                                      TILE, TILE)
    for want, got in zip(outs["interp"], outs["jit"]):
        assert np.array_equal(want, got)


@pytest.mark.exhaustive  # three more large kernels to compile (about a minute here)
def test_jit_gives_the_interpreters_bits():
    case = attention_train_case(np.random.default_rng(5), *SHAPES[2])
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


def test_gradients_without_dq_partials(monkeypatch):
    # past DQ_PARTS_BYTES the backward recomputes P in a dQ kernel instead of keeping dS K
    # per KV tile: the same bound
    import tilepy.kernels.attention_api as api

    monkeypatch.setattr(api, "DQ_PARTS_BYTES", 0)
    case = attention_train_case(np.random.default_rng(6), *SHAPES[2])
    with tilepy.backend("interp"):
        outs = _run(case)
    for name, (err, ratio, ok) in case.check(outs).items():
        assert ok, f"{case.name} {name}: max error {err:.3g} is {ratio:.3g}x the bound"
