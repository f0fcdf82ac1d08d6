"""Mixed dtypes in one op (interpreter): torch's type promotion for + - * / and cat, the
values of the op in the promoted dtype, gradients cast back to each input's dtype, and the
errors kept where torch refuses (matmul) or tilepy computes no integers."""

import itertools

import ml_dtypes
import numpy as np
import pytest

import tilepy
from tilepy.models import Tensor, cat, nn
from tilepy.models.errors import ModelError
from tilepy.models.promote import result_type

BF16 = ml_dtypes.bfloat16
F16, F32, F64, I64, I32, U8, B = (np.dtype(d) for d in (
    np.float16, np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_))
BF = np.dtype(BF16)
DTYPES = [F32, F64, BF, F16, I64, I32, U8, B]


@pytest.fixture(autouse=True)
def interp():
    with tilepy.backend("interp"):
        yield


def _t(shape, dtype):
    return np.zeros(shape, dtype)


@pytest.mark.parametrize("a, b, want", [
    (F32, BF, F32), (F16, BF, F32), (BF, F16, F32), (F32, F64, F64), (BF, F64, F64),
    (F16, F32, F32), (I64, BF, BF), (I64, F16, F16), (U8, F32, F32), (B, BF, BF),
    (I32, I64, I64), (U8, I32, I32), (B, I32, I32),
])
def test_the_promoted_dtype_of_two_tensors(a, b, want):
    assert result_type(_t(3, a), _t(3, b)) == want
    assert result_type(_t(3, b), _t(3, a)) == want


@pytest.mark.parametrize("dims, zero, want", [
    (BF, F32, BF),  # a 0-d tensor of the same category does not widen the others
    (F16, F64, F16), (F32, F16, F32),
    (I64, F64, F64),  # ... of a higher category, it decides
    (I32, BF, BF), (B, I64, I64), (F32, I64, F32),
])
def test_a_zero_dim_tensor_decides_only_from_a_higher_category(dims, zero, want):
    assert result_type(_t(3, dims), _t((), zero)) == want
    assert result_type(_t((), zero), _t((2, 3), dims)) == want


def test_the_rule_is_torchs_for_every_pair_when_torch_is_installed():
    torch = pytest.importorskip("torch")
    to_torch = {F32: torch.float32, F64: torch.float64, BF: torch.bfloat16,
                F16: torch.float16, I64: torch.int64, I32: torch.int32, U8: torch.uint8,
                B: torch.bool}
    back = {v: k for k, v in to_torch.items()}
    for a, b in itertools.product(DTYPES, DTYPES):
        for sa, sb in [(3, 3), ((), 3), (3, ()), ((), ())]:
            want = torch.result_type(torch.zeros(sa, dtype=to_torch[a]),
                                     torch.zeros(sb, dtype=to_torch[b]))
            assert result_type(_t(sa, a), _t(sb, b)) == back[want], (a, b, sa, sb)


def _bits(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("da, db, out", [(F32, BF, F32), (F16, BF, F32), (BF, F64, F64)])
def test_mixed_float_ops_compute_in_the_promoted_dtype_and_cast_gradients_back(op, da, db,
                                                                              out):
    """The op's value is the promoted-dtype op on the widened inputs (widening is exact);
    each input's gradient is the promoted-dtype gradient (the broadcast one summed first)
    rounded once into the input's dtype."""
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 2.0, (3, 4)).astype(da)
    b = rng.uniform(0.5, 2.0, (4,)).astype(db)  # broadcast over a's rows
    g = rng.standard_normal((3, 4)).astype(out)
    fn = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y,
          "mul": lambda x, y: x * y, "div": lambda x, y: x / y}[op]
    ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    z = fn(ta, tb)
    assert z.dtype == out
    wa = Tensor(a.astype(out), requires_grad=True)
    wb = Tensor(b.astype(out), requires_grad=True)
    w = fn(wa, wb)
    assert np.array_equal(_bits(z.data), _bits(w.data))
    z.backward(g)
    w.backward(g)
    assert ta.grad.dtype == da and tb.grad.dtype == db
    assert np.array_equal(_bits(ta.grad), _bits(wa.grad.astype(da)))
    assert np.array_equal(_bits(tb.grad), _bits(wb.grad.astype(db)))
    if da != out:  # the rounding back is real: some gradient differs from its wide value
        assert not np.array_equal(ta.grad.astype(out), wa.grad)


def test_cat_promotes_and_splits_the_gradient_back_into_each_dtype():
    a = Tensor(np.array([[1.0, 2.0]], np.float16), requires_grad=True)
    b = Tensor(np.array([[3.0, 4.0]], BF16), requires_grad=True)
    z = cat([a, b], dim=0)
    assert z.dtype == F32 and z.data.tolist() == [[1, 2], [3, 4]]
    z.backward(np.array([[0.1, 0.2], [0.3, 0.4]], np.float32))
    assert a.grad.dtype == F16 and b.grad.dtype == BF
    assert np.array_equal(_bits(a.grad), _bits(np.array([[0.1, 0.2]], np.float16)))
    assert np.array_equal(_bits(b.grad), _bits(np.array([[0.3, 0.4]], np.float32).astype(BF16)))


def test_integer_tensors_with_floats_become_the_float():
    ints = Tensor(np.array([1, 2, 3]))
    x = Tensor(np.array([0.5, 0.25, 2.0], BF16), requires_grad=True)
    z = ints * x
    assert z.dtype == BF and z.data.astype(np.float32).tolist() == [0.5, 0.5, 6.0]
    z.backward(np.ones(3, BF16))
    assert x.grad.dtype == BF and x.grad.astype(np.float32).tolist() == [1, 2, 3]
    assert (ints * 2.5).dtype == F32 and (ints * 2.5).data.tolist() == [2.5, 5.0, 7.5]
    assert (ints / 2).data.tolist() == [0.5, 1.0, 1.5]  # true division: float32
    assert (ints / ints).dtype == F32 and (6 / ints).data.tolist() == [6, 3, 2]
    assert (Tensor(np.array([1, 2])) + Tensor(np.float64(0.5))).dtype == F64
    assert (x + Tensor(np.float32(1.0))).dtype == BF  # a 0-d float does not widen it


def test_what_torch_refuses_or_tilepy_does_not_compute_stays_an_error():
    a, b = Tensor(np.ones((2, 3), np.float32)), Tensor(np.ones((3, 2), BF16))
    with pytest.raises(ModelError, match=r"matmul: operands have dtypes float32 and "
                                         r"bfloat16(.|\n)*torch's matmul does not promote"):
        a @ b
    q = Tensor(np.ones((1, 2, 4), np.float32))
    with pytest.raises(ModelError, match=r"scaled_dot_product_attention: expected q, k and v "
                                         r"of one dtype; got float32, bfloat16, float32"):
        nn.functional.scaled_dot_product_attention(q, q.bfloat16(), q)
    ints = Tensor(np.arange(3))
    with pytest.raises(ModelError, match=r"add: expected float32, float64, bfloat16 or "
                                         r"float16 tensors; got int64(.|\n)*x.float\(\)"):
        ints + ints
    with pytest.raises(ModelError, match=r"add: expected .* tensor; got int64 \(integer "
                                         r"arithmetic is not computed by tilepy.models\)"):
        ints + 1
    with pytest.raises(ModelError, match=r"neg: expected .* got int64"):
        _ = -ints


def test_the_same_values_as_torch_when_installed():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    a = rng.standard_normal((4, 5)).astype(np.float16)
    b = rng.standard_normal((5,)).astype(BF16)
    ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    (ta * tb - tb).sum().backward()
    xa = torch.tensor(a, requires_grad=True)
    xb = torch.tensor(b.astype(np.float32)).to(torch.bfloat16).requires_grad_()
    z = xa * xb - xb
    assert z.dtype == torch.float32
    np.testing.assert_array_equal((ta * tb - tb).data, z.detach().numpy())
    z.sum().backward()
    np.testing.assert_array_equal(ta.grad, xa.grad.numpy())
    # the bias-like gradient is a sum over rows: torch's order may differ in the last bit
    np.testing.assert_allclose(tb.grad.astype(np.float32), xb.grad.float().numpy(),
                               rtol=2 ** -7)
