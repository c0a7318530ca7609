"""Reductions on the tpu device vs PyTorch CPU: sum/nansum/prod/mean, amax/amin/aminmax,
max/min (full, dim + indices), argmax/argmin, var/std(_mean), norm/linalg.vector_norm,
all/any, count_nonzero, logsumexp, cumsum/cumprod — values, dtypes, out=, in-place,
errors (PyTorch's wording) and autograd."""
from __future__ import annotations

import math

import pytest
import torch

DEV = "tpu"
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
SHAPES = [(), (0,), (7,), (3, 5), (2, 3, 4), (0, 3), (3, 0, 2)]


def make(shape, dtype=torch.float32, seed=0, noncontig=False):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        x = torch.rand(shape, generator=g) > 0.5
    elif dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    else:
        lo = 0 if dtype == torch.uint8 else -4
        x = torch.randint(lo, 5, shape, generator=g, dtype=torch.int64).to(dtype)
    if noncontig and x.dim() >= 2:
        x = x.transpose(0, -1).contiguous().transpose(0, -1)
        assert not x.is_contiguous() or x.numel() <= 1 or 1 in x.shape
    return x


def tol(dtype):
    if dtype in (torch.bfloat16, torch.float16):
        return dict(rtol=2e-2, atol=2e-2)
    if dtype == torch.float32:
        return dict(rtol=1e-5, atol=1e-5)
    return {}


def same(got, want, **kw):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w, **kw)
        return
    assert isinstance(got, torch.Tensor) and got.device.type == DEV
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    kw = {**tol(want.dtype), **kw}
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **kw)


def check(fn, *xs, **kw):
    """fn on CPU inputs vs fn on their tpu copies."""
    same(fn(*[x.to(DEV) for x in xs]), fn(*xs), **kw)


def check_grad(fn, *xs, **kw):
    """Gradients of sum(fn(x) * w) w.r.t. every input, CPU vs tpu."""
    cpu = [x.detach().clone().requires_grad_(True) for x in xs]
    dev = [x.detach().to(DEV).requires_grad_(True) for x in xs]
    out_c = fn(*cpu)
    w = torch.randn(out_c.shape, generator=torch.Generator().manual_seed(7), dtype=out_c.dtype)
    (out_c * w).sum().backward()
    out_d = fn(*dev)
    same(out_d, out_c.detach(), **kw)
    (out_d * w.to(DEV)).sum().backward()
    for c, d in zip(cpu, dev):
        same(d.grad, c.grad, **kw)


def check_error(fn, *xs):
    with pytest.raises(Exception) as want:
        fn(*xs)
    with pytest.raises(type(want.value)) as got:
        r = fn(*[x.to(DEV) for x in xs])
        torch.tpu.synchronize()
        del r
    assert str(want.value).split("\n")[0] in str(got.value), (str(got.value), str(want.value))


# ---------------------------------------------------------------- sum / mean / prod / nansum

@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_sum_all(shape, dtype):
    x = make(shape, dtype)
    check(lambda t: t.sum(), x)
    if dtype != torch.bool:
        check(lambda t: t.prod(), make(shape, dtype) if not dtype.is_floating_point else x * 0.5 + 1)


@pytest.mark.parametrize("dims", [0, -1, (0, 2), (-1, 0), (1,), (), None])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_dims(dims, keepdim):
    for noncontig in (False, True):
        x = make((3, 4, 5), noncontig=noncontig)
        if dims is None:
            check(lambda t: torch.sum(t, dim=None, keepdim=keepdim), x)
            check(lambda t: torch.mean(t, dim=None, keepdim=keepdim), x)
        else:
            check(lambda t: t.sum(dims, keepdim=keepdim), x)
            check(lambda t: t.mean(dims, keepdim=keepdim), x)
            if dims != ():  # nansum(x, ()): PyTorch's meta (reduces nothing) and CPU kernel (reduces all) disagree
                check(lambda t: t.nansum(dims, keepdim=keepdim), x)
    check(lambda t: t.sum(1, keepdim=keepdim), make((3, 4, 5), torch.int32))
    check(lambda t: t.prod(1, keepdim=keepdim), make((3, 4, 5), torch.int8))
    check(lambda t: t.prod(-1, keepdim=keepdim), make((3, 4, 5)) * 0.3 + 1)


@pytest.mark.parametrize("dtype", FLOATS)
def test_mean_dtypes(dtype):
    x = make((6, 33), dtype)
    check(lambda t: t.mean(), x)
    check(lambda t: t.mean(0), x)
    check(lambda t: t.mean(1, keepdim=True), x)
    check(lambda t: t.mean(0), make((0, 3), dtype))  # empty -> nan
    check(lambda t: t.sum(1), make((5, 0), dtype))   # empty -> 0
    check(lambda t: t.prod(1), make((5, 0), dtype))  # empty -> 1


def test_sum_dtype_arg_and_out():
    x = make((4, 6))
    check(lambda t: t.sum(1, dtype=torch.float64), x)
    check(lambda t: t.sum(dtype=torch.float16), x)
    check(lambda t: t.sum(0, dtype=torch.float32), make((4, 6), torch.int32))
    check(lambda t: t.mean(1, dtype=torch.float64), x)
    check(lambda t: t.mean(dtype=torch.float32), make((4, 6), torch.int32))
    check(lambda t: t.prod(1, dtype=torch.float64), x)
    check(lambda t: t.prod(dtype=torch.int32), make((4, 6), torch.int8))
    check(lambda t: torch.sum(t, 0, out=torch.empty(6, device=t.device, dtype=torch.float64)), x)
    check(lambda t: torch.sum(t, (0, 1), out=torch.empty(0, device=t.device)), x)
    check(lambda t: torch.mean(t, 1, keepdim=True, out=torch.empty(4, 1, device=t.device)), x)
    check(lambda t: torch.prod(t, 1, out=torch.empty(4, device=t.device)), x)


def test_nansum():
    x = make((5, 7))
    x[1, 2] = float("nan")
    x[3, :] = float("nan")
    check(lambda t: t.nansum(), x)
    check(lambda t: t.nansum(1), x)
    check(lambda t: torch.nanmean(t, 1), x)
    check(lambda t: t.sum(1), x)
    check(lambda t: t.nansum(0), make((5, 7), torch.int32))


def test_reduce_errors():
    x = make((3, 4))
    check_error(lambda t: t.sum((0, 0)), x)
    check_error(lambda t: t.sum((0, -2)), x)
    check_error(lambda t: t.sum(2), x)
    check_error(lambda t: t.mean(), make((3,), torch.int32))
    check_error(lambda t: t.mean(dtype=torch.int64), x)
    check_error(lambda t: t.var(), make((3,), torch.int64))
    check_error(lambda t: t.cumsum(2), x)


# ---------------------------------------------------------------- amax / amin / max / min / argmax

@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_max_min_all(dtype):
    for shape in [(), (7,), (3, 5), (2, 3, 4)]:
        x = make(shape, dtype)
        check(lambda t: t.max(), x)
        check(lambda t: t.min(), x)
        check(lambda t: t.amax(), x)
        check(lambda t: t.amin(), x)
        check(lambda t: torch.max(t, out=torch.empty(0, dtype=t.dtype, device=t.device)), x)
        if dtype != torch.bool:
            check(lambda t: t.argmax(), x)
            check(lambda t: t.argmin(), x)
            check(lambda t: torch.aminmax(t), x)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8])
def test_max_min_dim(dim, keepdim, dtype):
    x = make((4, 6, 3), dtype, noncontig=True)
    check(lambda t: tuple(t.max(dim, keepdim=keepdim)), x)
    check(lambda t: tuple(t.min(dim, keepdim=keepdim)), x)
    check(lambda t: t.amax(dim, keepdim=keepdim), x)
    check(lambda t: t.amin((dim, 2) if dim not in (2, -1) else dim, keepdim=keepdim), x)
    check(lambda t: t.argmax(dim, keepdim=keepdim), x)
    check(lambda t: t.argmin(dim, keepdim=keepdim), x)
    check(lambda t: tuple(torch.aminmax(t, dim=dim, keepdim=keepdim)), x)


def test_max_ties_nan_scalar():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [5.0, float("nan"), 1.0, float("nan")]])
    for fn in (lambda t: tuple(t.max(1)), lambda t: tuple(t.min(1)), lambda t: t.argmax(1), lambda t: t.argmin(1),
               lambda t: t.amax(1), lambda t: t.amin(0), lambda t: t.max(), lambda t: t.min(), lambda t: t.argmax(),
               lambda t: t.argmin(), lambda t: tuple(torch.aminmax(t, dim=1))):
        check(fn, x)
    s = torch.tensor(2.5)
    for fn in (lambda t: tuple(t.max(0)), lambda t: tuple(t.min(-1, keepdim=True)), lambda t: t.argmax(0),
               lambda t: t.argmax(), lambda t: t.amax(), lambda t: t.amax(0)):
        check(fn, s)
    check(lambda t: t.argmax(None, keepdim=True), make((3, 4)))
    check(lambda t: t.max(0)[0], make((0, 3)).t().contiguous().t().t())  # [3, 0] over dim 0 -> empty result


def test_max_empty_errors():
    e = make((0, 3))
    check_error(lambda t: t.max(), e)
    check_error(lambda t: t.min(), e)
    check_error(lambda t: t.amax(), e)
    check_error(lambda t: t.amax(0), e)
    check_error(lambda t: t.max(0), e)
    check_error(lambda t: t.argmax(), e)
    check_error(lambda t: t.argmin(0), e)
    check_error(lambda t: torch.aminmax(t), e)
    check(lambda t: t.amax(1), e)
    check(lambda t: t.argmax(1), e)


# ---------------------------------------------------------------- var / std

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dims", [None, 0, (0, 2), -1])
@pytest.mark.parametrize("correction", [None, 0, 1, 2, 0.5])
def test_var_std(dtype, dims, correction):
    x = make((5, 4, 3), dtype) * 3 + 10
    kw = {} if correction is None else {"correction": correction}
    for keepdim in (False, True):
        check(lambda t: t.var(dims, keepdim=keepdim, **kw), x)
        check(lambda t: t.std(dims, keepdim=keepdim, **kw), x)
    check(lambda t: tuple(torch.var_mean(t, dims, **kw)), x)
    check(lambda t: tuple(torch.std_mean(t, dims, keepdim=True, **kw)), x)


@pytest.mark.filterwarnings("ignore:.*degrees of freedom")
def test_var_edge_cases():
    check(lambda t: t.var(), torch.tensor([3.0]))            # N - 1 == 0 -> nan
    check(lambda t: t.var(0), make((0, 3)))
    check(lambda t: t.std(unbiased=False), make((6, 2)))
    check(lambda t: t.var(1, unbiased=True), make((6, 2)))
    check(lambda t: t.var(correction=10), make((6, 2)))      # negative dof -> inf
    check(lambda t: torch.var(t, 1, out=torch.empty(6, device=t.device)), make((6, 2)))
    check(lambda t: t.var(), torch.tensor(1.5))
    big = torch.full((1000,), 1e4) + make((1000,), seed=3)    # two-pass keeps precision
    check(lambda t: t.var(), big, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- norms

ORDS = [2, 1, 0, 3, 0.5, -1, float("inf"), float("-inf"), 2.5]


@pytest.mark.parametrize("ord", ORDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_vector_norm(ord, dtype):
    x = make((4, 5), dtype)
    x[0, 1] = 0
    check(lambda t: torch.linalg.vector_norm(t, ord), x)
    check(lambda t: torch.linalg.vector_norm(t, ord, dim=1), x)
    check(lambda t: torch.linalg.vector_norm(t, ord, dim=(0, 1), keepdim=True), x)
    check(lambda t: torch.linalg.vector_norm(t, ord, dim=-2, dtype=torch.float64), x)
    if dtype == torch.float32:
        check_error(lambda t: torch.linalg.vector_norm(t, ord, dim=1, dtype=torch.bfloat16), x)
    if ord >= 0 and ord != float("inf"):
        check(lambda t: torch.linalg.vector_norm(t, ord), make((0, 3), dtype))
    check(lambda t: torch.norm(t, ord if not math.isinf(ord) or True else 2, dim=1), x)


def test_norm_variants_and_errors():
    x = make((3, 4, 5))
    check(lambda t: t.norm(), x)
    check(lambda t: torch.norm(t, dim=(1, 2)), x)
    check(lambda t: torch.norm(t, p=1, dim=-1, keepdim=True), x)
    check(lambda t: torch.norm(t, p="fro"), x)
    check(lambda t: torch.norm(t, dim=1, dtype=torch.float64), x)
    check(lambda t: torch.linalg.norm(t.view(12, 5)), x)
    check(lambda t: torch.linalg.vector_norm(t, out=torch.empty((), device=t.device)), x)
    check_error(lambda t: torch.linalg.vector_norm(t), make((3,), torch.int64))
    check_error(lambda t: torch.linalg.vector_norm(t, float("inf")), make((0, 3)))
    check_error(lambda t: torch.linalg.vector_norm(t, -1), make((0, 3)))
    check_error(lambda t: torch.linalg.vector_norm(t, -1, dim=0), make((0, 3)))
    check(lambda t: torch.linalg.vector_norm(t, float("inf"), dim=1), make((0, 3)))


def test_clip_grad_norm():
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    dev = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).to(DEV)
    dev.load_state_dict(cpu.state_dict())
    x = make((8, 6))
    for norm_type in (2.0, 1.0, float("inf")):
        for m, inp in ((cpu, x), (dev, x.to(DEV))):
            m.zero_grad()
            m(inp).pow(2).sum().backward()
        n_c = torch.nn.utils.clip_grad_norm_(cpu.parameters(), 0.5, norm_type)
        n_d = torch.nn.utils.clip_grad_norm_(dev.parameters(), 0.5, norm_type)
        same(n_d, n_c)
        for pc, pd in zip(cpu.parameters(), dev.parameters()):
            same(pd.grad, pc.grad)


# ---------------------------------------------------------------- all / any / count_nonzero

@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.float32, torch.bfloat16])
def test_all_any(dtype):
    for shape in [(), (0,), (5,), (3, 4), (2, 0, 3)]:
        x = make(shape, dtype)
        check(lambda t: t.all(), x)
        check(lambda t: t.any(), x)
        if x.dim():
            check(lambda t: t.all(-1), x)
            check(lambda t: t.any(0, keepdim=True), x)
        check(lambda t: torch.count_nonzero(t), x)
        if x.dim() >= 2:
            check(lambda t: torch.count_nonzero(t, dim=(0, 1)), x)
            check(lambda t: t.all((0, 1)), x)
            check(lambda t: t.any((1,)), x)
            check(lambda t: t.all(()), x)
    y = torch.tensor([[0.0, float("nan")], [0.5, 1.0]])
    check(lambda t: t.all(1), y)
    check(lambda t: t.any(1), y)
    check(lambda t: torch.all(t, out=torch.empty((), dtype=torch.bool, device=t.device)), y)


# ---------------------------------------------------------------- logsumexp

def test_logsumexp():
    x = make((4, 6)) * 10
    x[1, :] = float("-inf")
    x[2, 3] = float("inf")
    check(lambda t: t.logsumexp(1), x)
    check(lambda t: t.logsumexp((0, 1), keepdim=True), x)
    check(lambda t: t.logsumexp(0), make((3, 5), torch.bfloat16))
    check(lambda t: t.logsumexp(0), make((3, 5), torch.int32))
    check(lambda t: t.logsumexp(0), make((0, 5)))
    check_grad(lambda t: t.logsumexp(1), make((4, 6)))


# ---------------------------------------------------------------- cumsum / cumprod

@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_cumsum_cumprod(dtype):
    for shape, dim in [((), 0), ((7,), 0), ((3, 5), 1), ((3, 5), -2), ((2, 3, 4), 1), ((0, 3), 1)]:
        x = make(shape, dtype, noncontig=True)
        check(lambda t: t.cumsum(dim), x)
        if dtype.is_floating_point:
            check(lambda t: t.cumprod(dim), x * 0.2 + 1)
        else:
            check(lambda t: t.cumprod(dim), x)
    x = make((3, 5), dtype)
    check(lambda t: t.cumsum(1, dtype=torch.float64), x)
    if dtype.is_floating_point or dtype == torch.int64:
        check(lambda t: t.clone().cumsum_(0), x)
        check(lambda t: t.clone().cumprod_(1), x)
    check(lambda t: torch.cumsum(t, 0, out=torch.empty(0, dtype=torch.int64, device=t.device)), make((4,), torch.int64))


# ---------------------------------------------------------------- autograd

@pytest.mark.parametrize("name,fn", [
    ("sum", lambda t: t.sum()),
    ("sum_dim", lambda t: t.sum((0, 2), keepdim=True)),
    ("mean", lambda t: t.mean(1)),
    ("prod", lambda t: t.prod(1)),
    ("amax", lambda t: t.amax(1)),
    ("amin", lambda t: t.amin((0, 1))),
    ("max_dim", lambda t: t.max(2)[0]),
    ("min_dim", lambda t: t.min(0, keepdim=True)[0]),
    ("max_all", lambda t: t.max()),
    ("var", lambda t: t.var(1)),
    ("std", lambda t: t.std((0, 1), correction=0)),
    ("var_mean", lambda t: sum(torch.var_mean(t, 2))),
    ("norm2", lambda t: t.norm(dim=1)),
    ("norm1", lambda t: torch.linalg.vector_norm(t, 1, dim=2)),
    ("norm3", lambda t: torch.linalg.vector_norm(t, 3)),
    ("norm_inf", lambda t: torch.linalg.vector_norm(t, float("inf"), dim=0)),
    ("cumsum", lambda t: t.cumsum(1)),
    ("cumprod", lambda t: t.cumprod(2)),
    ("logsumexp", lambda t: t.logsumexp(0)),
])
def test_grad(name, fn):
    check_grad(fn, make((3, 4, 5), torch.float32, seed=11) + 0.1, rtol=1e-4, atol=1e-5)


def test_grad_bf16():
    x = make((4, 8), torch.bfloat16)
    check_grad(lambda t: t.sum(1), x)
    check_grad(lambda t: t.mean(), x)
    check_grad(lambda t: t.var(0), x)


# ---------------------------------------------------------------- cummax / cummin / trace / renorm

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8])
def test_cummax_cummin(dtype):
    for shape, dim in [((), 0), ((9,), 0), ((4, 7), 1), ((4, 7), 0), ((2, 3, 5), -1), ((0, 3), 1)]:
        x = make(shape, dtype, noncontig=True)
        check(lambda t: tuple(torch.cummax(t, dim)), x)
        check(lambda t: tuple(torch.cummin(t, dim)), x)
    if dtype.is_floating_point:
        x = torch.tensor([[1.0, 3.0, 3.0, float("nan"), 5.0, float("nan"), 0.0],
                          [2.0, 1.0, 2.0, 2.0, -1.0, -1.0, 4.0]]).to(dtype)
        check(lambda t: tuple(torch.cummax(t, 1)), x)
        check(lambda t: tuple(torch.cummin(t, 1)), x)
    check_grad(lambda t: torch.cummax(t, 1)[0], make((3, 6), seed=4))


def test_trace():
    for dtype in (torch.float32, torch.float64, torch.int32, torch.bfloat16):
        for shape in [(4, 4), (3, 5), (6, 2), (0, 3), (1, 1)]:
            x = make(shape, dtype)
            check(torch.trace, x)
            check(lambda t: torch.trace(t.t()), x)
    with pytest.raises(RuntimeError, match="expected a matrix, but got tensor with dim 1"):
        torch.trace(make((3,)).to(DEV))
    check_grad(torch.trace, make((4, 5)))


@pytest.mark.parametrize("p", [1, 2, 3.5, float("inf")])
def test_renorm(p):
    x = make((4, 5, 3)) * 2
    for dim in (0, 1, -1):
        check(lambda t: torch.renorm(t, p, dim, 1.5), x)
    check(lambda t: t.clone().renorm_(p, 0, 0.5), x)
    check(lambda t: torch.renorm(t, p, 1, 1.5), x.to(torch.bfloat16))
    check_grad(lambda t: torch.renorm(t, p, 0, 1.5), x)


def test_out_dtype_errors():
    a = make((2, 3))
    check_error(lambda t: torch.amax(t, 0, out=torch.empty(3, dtype=torch.float64, device=t.device)), a)
    check_error(lambda t: torch.max(t, 0, out=(torch.empty(3, dtype=torch.float64, device=t.device),
                                               torch.empty(3, dtype=torch.long, device=t.device))), a)
    check_error(lambda t: torch.argmax(t, 0, out=torch.empty(3, dtype=torch.int32, device=t.device)), a)
    check_error(lambda t: torch.all(t, 0, out=torch.empty(3, dtype=torch.float32, device=t.device)), a)
    check_error(lambda t: torch.linalg.vector_norm(t, out=torch.empty((), dtype=torch.float64, device=t.device)), a)
    check(lambda t: torch.cumsum(t, 0, out=torch.empty(2, 3, dtype=torch.float64, device=t.device)), a)
    check(lambda t: torch.var(t, 0, out=torch.empty(3, dtype=torch.float64, device=t.device)), a)
    check(lambda t: torch.prod(t, 0, out=torch.empty(3, dtype=torch.float64, device=t.device)), a)
