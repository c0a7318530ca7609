"""Matrix products on the tpu device vs PyTorch CPU: mm, bmm, addmm(_), baddbmm, addbmm,
addmv/mv, dot/vdot, _addmm_activation, and the composites that reach them (matmul / @ with
1-D and broadcast batch operands, F.linear, outer, einsum) — values, dtypes, views, out=,
in-place, beta == 0 with NaN in self, errors (PyTorch's wording) and autograd."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

DEV = "tpu"
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int32, torch.int64, torch.uint8]


def make(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    lo = 0 if dtype == torch.uint8 else -5
    return torch.randint(lo, 6, shape, generator=g, dtype=torch.int64).to(dtype)


def tol(dtype, k=8):
    if dtype in (torch.bfloat16, torch.float16):
        return dict(rtol=2e-2, atol=2e-2 * max(1.0, k ** 0.5))
    if dtype == torch.float32:
        return dict(rtol=1e-4, atol=1e-4)
    return {}


def same(got, want, **kw):
    assert isinstance(got, torch.Tensor) and got.device.type == DEV
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **{**tol(want.dtype), **kw})


def check(fn, *xs, **kw):
    same(fn(*[x.to(DEV) for x in xs]), fn(*xs), **kw)


def check_grad(fn, *xs, **kw):
    cpu = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in xs]
    dev = [x.detach().to(DEV).requires_grad_(x.is_floating_point()) for x in xs]
    out_c = fn(*cpu)
    w = torch.randn(out_c.shape, generator=torch.Generator().manual_seed(7), dtype=out_c.dtype)
    (out_c * w).sum().backward()
    out_d = fn(*dev)
    same(out_d, out_c.detach(), **kw)
    (out_d * w.to(DEV)).sum().backward()
    for c, d in zip(cpu, dev):
        if c.requires_grad:
            same(d.grad, c.grad, **kw)


def check_error(fn, *xs):
    with pytest.raises(Exception) as want:
        fn(*xs)
    with pytest.raises(type(want.value)) as got:
        fn(*[x.to(DEV) for x in xs])
        torch.tpu.synchronize()
    # whitespace-insensitive: PyTorch's Python meta functions (which the device path runs) differ in spacing
    norm = lambda m: "".join(str(m).split("\n")[0].split())  # noqa: E731
    assert norm(want.value) in "".join(str(got.value).split()), (str(got.value), str(want.value))


MM_SHAPES = [(3, 4, 5), (1, 1, 1), (0, 3, 4), (3, 0, 4), (4, 3, 0), (5, 1, 7), (17, 33, 9), (64, 48, 80)]


@pytest.mark.parametrize("m,k,n", MM_SHAPES)
@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_mm(m, k, n, dtype):
    a, b = make((m, k), dtype), make((k, n), dtype, seed=1)
    check(torch.mm, a, b, **tol(dtype, k))
    check(lambda x, y: x @ y, a, b, **tol(dtype, k))


def test_mm_views_and_out():
    a, b = make((6, 5)), make((7, 6), seed=1)
    check(lambda x, y: x.t() @ y.t(), a, b)                        # both transposed
    check(lambda x, y: x[::2, 1:] @ y[1:5, ::2], a, b)             # sliced, strided
    check(lambda x, y: x.t() @ y.t().expand(6, 7)[:, :3], a, b)
    check(lambda x, y: torch.mm(x.t(), y.t(), out=torch.empty(5, 7, device=x.device)), a, b)
    check(lambda x, y: torch.mm(x.t(), y.t(), out=torch.empty(0, device=x.device)), a, b)
    o = torch.empty(7, 5).t()                                       # out is a transposed view
    check(lambda x, y: torch.mm(x.t(), y.t(), out=o.to(x.device)), a, b)
    col = make((5, 1))
    check(lambda x, y: x @ y, a, col)
    check(lambda x, y: x @ y.expand(5, 4), a, col)                  # stride-0 operand


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_bmm(dtype):
    for b_, m, k, n in [(2, 3, 4, 5), (1, 1, 1, 1), (0, 2, 3, 4), (3, 0, 2, 2), (4, 5, 0, 3), (3, 17, 9, 11)]:
        a, b = make((b_, m, k), dtype), make((b_, k, n), dtype, seed=1)
        check(torch.bmm, a, b, **tol(dtype, k))
    a, b = make((3, 4, 5), dtype), make((3, 6, 4), dtype, seed=1)
    check(lambda x, y: torch.bmm(x.transpose(1, 2), y.transpose(1, 2)), a, b, **tol(dtype))
    check(lambda x, y: torch.bmm(x[:, 0:1].expand(3, 4, 5).transpose(1, 2), y.transpose(1, 2)), a, b, **tol(dtype))
    check(lambda x, y: torch.bmm(x[0:1].expand(3, 4, 5).transpose(1, 2), y.transpose(1, 2)), a, b, **tol(dtype))
    check(lambda x, y: torch.bmm(x.transpose(0, 1).contiguous().transpose(0, 1).transpose(1, 2), y[:, ::2].transpose(1, 2)),
          a, b, **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int64])
def test_addmm(dtype):
    a, b = make((4, 6), dtype), make((6, 5), dtype, seed=1)
    for shape in [(4, 5), (5,), (1, 5), (4, 1), ()]:
        s = make(shape, dtype, seed=2)
        check(lambda s_, x, y: torch.addmm(s_, x, y), s, a, b, **tol(dtype))
        if dtype.is_floating_point:
            check(lambda s_, x, y: torch.addmm(s_, x, y, beta=0.5, alpha=-2.0), s, a, b, **tol(dtype))
        else:
            check(lambda s_, x, y: torch.addmm(s_, x, y, beta=2, alpha=-3), s, a, b)
    s = make((4, 5), dtype, seed=2)
    check(lambda s_, x, y: s_.clone().addmm_(x, y, beta=2, alpha=1), s, a, b, **tol(dtype))
    check(lambda s_, x, y: torch.addmm(s_, x, y, out=torch.empty(4, 5, dtype=dtype, device=x.device)), s, a, b, **tol(dtype))
    check(lambda s_, x, y: torch.addmm(s_.t(), y.t(), x.t()), s, a, b, **tol(dtype))
    check(lambda s_, x, y: torch.addmm(s_, x[:, :0], y[:0]), s, a, b)  # K == 0: beta * self


def test_beta_zero_ignores_nan():
    nan = torch.full((4, 5), float("nan"))
    a, b = make((4, 6)), make((6, 5), seed=1)
    check(lambda s, x, y: torch.addmm(s, x, y, beta=0), nan, a, b)
    check(lambda s, x, y: torch.addmm(s, x, y, beta=0.0, alpha=3), nan, a, b)
    check(lambda s, x, y: torch.addmm(s, x, y, beta=1), nan, a, b)   # beta != 0: NaN propagates
    check(lambda s, x, y: torch.baddbmm(s, x, y, beta=0), torch.full((2, 4, 5), float("nan")),
          make((2, 4, 6)), make((2, 6, 5)))
    check(lambda s, x, y: torch.addmv(s, x, y, beta=0), torch.full((4,), float("nan")), a, make((6,)))
    check(lambda s, x, y: torch.addbmm(s, x, y, beta=0), nan, make((3, 4, 2)), make((3, 2, 5)))


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_baddbmm_addbmm(dtype):
    x, y = make((3, 4, 6), dtype), make((3, 6, 5), dtype, seed=1)
    for shape in [(3, 4, 5), (5,), (4, 1), ()]:
        s = make(shape, dtype, seed=2)
        check(lambda s_, a, b: torch.baddbmm(s_, a, b), s, x, y, **tol(dtype))
        check(lambda s_, a, b: torch.baddbmm(s_, a, b, beta=2, alpha=3), s, x, y, **tol(dtype))
    s2 = make((4, 5), dtype, seed=3)
    check(lambda s_, a, b: torch.addbmm(s_, a, b), s2, x, y, **tol(dtype, 18))
    check(lambda s_, a, b: torch.addbmm(s_[0], a, b, beta=2, alpha=-1), s2, x, y, **tol(dtype, 18))
    check(lambda s_, a, b: s_.clone().addbmm_(a, b), s2, x, y, **tol(dtype, 18))
    check(lambda s_, a, b: torch.addbmm(s_, a, b, out=torch.empty(0, dtype=dtype, device=a.device)), s2, x, y,
          **tol(dtype, 18))
    check(lambda s_, a, b: s_.clone().baddbmm_(a, b, alpha=2), make((3, 4, 5), dtype), x, y, **tol(dtype))
    check(lambda s_, a: torch.addbmm(s_, a.transpose(1, 2), a), make((6, 6), dtype), x, **tol(dtype, 18))
    check(lambda s_, a, b: torch.addbmm(s_, a[:0], b[:0]), s2, x, y)   # no batches: beta * self


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int64])
def test_addmv_mv_dot(dtype):
    m, v, w = make((5, 7), dtype), make((7,), dtype, seed=1), make((5,), dtype, seed=2)
    check(torch.mv, m, v, **tol(dtype))
    check(lambda a, b: a.t() @ b, m, w, **tol(dtype))
    check(lambda a, b: torch.mv(a[:, ::2], b[::2]), m, v, **tol(dtype))
    check(lambda s, a, b: torch.addmv(s, a, b), w, m, v, **tol(dtype))
    check(lambda s, a, b: torch.addmv(s, a, b, beta=2, alpha=3), w, m, v, **tol(dtype))
    check(lambda s, a, b: torch.addmv(s[:1], a, b), w, m, v, **tol(dtype))
    check(lambda s, a, b: torch.addmv(s[0], a, b), w, m, v, **tol(dtype))
    check(lambda s, a, b: s.clone().addmv_(a, b), w, m, v, **tol(dtype))
    check(torch.dot, v, v.flip(0), **tol(dtype))
    check(torch.vdot, w, w, **tol(dtype))
    check(lambda a, b: a[:6:2] @ b[1::2], v, v, **tol(dtype))
    check(torch.dot, v[:0], v[:0])
    check(torch.mv, m[:0], v)
    check(torch.mv, m[:, :0], v[:0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_composites(dtype):
    t = lambda *s: make(s, dtype, seed=len(s) * 10 + s[-1])  # noqa: E731
    cases = [
        (t(5), t(5)), (t(3, 5), t(5)), (t(5), t(5, 4)), (t(2, 3, 5), t(5, 4)), (t(2, 3, 5), t(5)),
        (t(5), t(2, 5, 3)), (t(4, 1, 3, 5), t(2, 5, 6)), (t(2, 3, 5), t(2, 5, 6)), (t(1, 3, 5), t(4, 5, 2)),
        (t(3, 5), t(2, 5, 4)), (t(2, 2, 3, 5), t(2, 2, 5, 1)),
    ]
    for a, b in cases:
        check(torch.matmul, a, b, **tol(dtype))
    w, bias = t(6, 5), t(6)
    for x in (t(5), t(3, 5), t(2, 3, 5), t(2, 2, 3, 5)):
        check(lambda x_, w_, b_: F.linear(x_, w_, b_), x, w, bias, **tol(dtype))
        check(lambda x_, w_: F.linear(x_, w_), x, w, **tol(dtype))
    check(torch.outer, t(4), t(7))
    check(lambda a, b: torch.einsum("bij,bjk->bik", a, b), t(2, 3, 5), t(2, 5, 4), **tol(dtype))
    check(lambda a, b: torch.einsum("ij,kj->ik", a, b), t(3, 5), t(4, 5), **tol(dtype))
    check(lambda a, b: torch.einsum("i,i->", a, b), t(5), t(5), **tol(dtype))
    check(lambda a, b: torch.tensordot(a, b, dims=([1, 2], [0, 1])), t(2, 3, 5), t(3, 5, 4), **tol(dtype))


def test_addmm_activation():
    s, a, b = make((5,)), make((4, 6), seed=1), make((6, 5), seed=2)
    check(lambda s_, x, y: torch.ops.aten._addmm_activation(s_, x, y), s, a, b)
    check(lambda s_, x, y: torch.ops.aten._addmm_activation(s_, x, y, beta=0.5, use_gelu=True), s, a, b)


def test_errors():
    a, b, v = make((2, 3)), make((4, 5)), make((3,))
    check_error(torch.mm, a, b)
    check_error(torch.mm, v, a)
    check_error(torch.mm, a, v)
    check_error(torch.mm, a, make((3, 2), torch.float64))
    check_error(torch.bmm, make((2, 3, 4)), make((2, 5, 6)))
    check_error(torch.bmm, make((2, 3, 4)), make((3, 4, 6)))
    check_error(torch.bmm, a, make((3, 4, 6)))
    check_error(torch.bmm, make((2, 3, 4)), a)
    check_error(torch.addmm, make((3,)), a, b)
    check_error(torch.addmm, make((4,)), a, make((3, 5)))
    check_error(torch.addmm, make((5,)), v, b)
    check_error(torch.baddbmm, make((7,)), make((2, 3, 4)), make((2, 4, 6)))
    check_error(torch.addmv, make((2,)), a, make((4,)))
    check_error(torch.addmv, make((2,)), v, v)
    check_error(torch.mv, a, make((4,)))
    check_error(torch.dot, v, make((4,)))
    check_error(torch.dot, a, v)
    with pytest.raises(RuntimeError, match="dot : expected both vectors to have same dtype, but found"):
        torch.dot(v.to(DEV), v.double().to(DEV))  # (PyTorch's meta prints torch.float32, its CPU kernel Float)
    check_error(torch.addbmm, make((3, 6)), make((2, 3, 4)), make((3, 4, 6)))
    check_error(torch.addbmm, make((3, 6)), make((2, 3, 4)), make((2, 5, 6)))
    check_error(torch.mm, torch.ones(2, 3, dtype=torch.bool), torch.ones(3, 2, dtype=torch.bool))
    check_error(torch.dot, torch.ones(3, dtype=torch.bool), torch.ones(3, dtype=torch.bool))


@pytest.mark.parametrize("name,fn,shapes", [
    ("mm", torch.mm, [(4, 6), (6, 5)]),
    ("mm_t", lambda a, b: a.t() @ b.t(), [(6, 4), (5, 6)]),
    ("bmm", torch.bmm, [(3, 4, 6), (3, 6, 5)]),
    ("addmm", lambda s, a, b: torch.addmm(s, a, b, beta=0.5, alpha=2), [(5,), (4, 6), (6, 5)]),
    ("baddbmm", lambda s, a, b: torch.baddbmm(s, a, b, alpha=0.5), [(3, 1, 5), (3, 4, 6), (3, 6, 5)]),
    ("addbmm", torch.addbmm, [(4, 5), (3, 4, 6), (3, 6, 5)]),
    ("addmv", torch.addmv, [(4,), (4, 6), (6,)]),
    ("mv", torch.mv, [(4, 6), (6,)]),
    ("dot", torch.dot, [(6,), (6,)]),
    ("matmul_bcast", torch.matmul, [(2, 1, 3, 6), (4, 6, 5)]),
    ("matmul_1d", torch.matmul, [(6,), (2, 6, 5)]),
    ("linear3d", F.linear, [(2, 3, 6), (5, 6), (5,)]),
    ("einsum", lambda a, b: torch.einsum("bij,jk->bik", a, b), [(2, 3, 6), (6, 5)]),
])
def test_grad(name, fn, shapes):
    check_grad(fn, *[make(s, seed=i) for i, s in enumerate(shapes)])


def test_grad_bf16_linear():
    x, w, b = make((4, 8), torch.bfloat16), make((3, 8), torch.bfloat16, seed=1), make((3,), torch.bfloat16, seed=2)
    check_grad(F.linear, x, w, b)


def test_out_dtype_errors():
    a, b = make((2, 3)), make((3, 2))
    check_error(lambda x, y: torch.mm(x, y, out=torch.empty(2, 2, dtype=torch.float64, device=x.device)), a, b)
    check_error(lambda x, y: torch.addmm(torch.ones(2, 2, device=x.device), x, y,
                                         out=torch.empty(2, 2, dtype=torch.float64, device=x.device)), a, b)
    check_error(lambda x, y: torch.bmm(x[None], y[None], out=torch.empty(1, 2, 2, dtype=torch.float64, device=x.device)), a, b)
    check_error(lambda x, y: torch.mv(x, y[:, 0], out=torch.empty(2, dtype=torch.float64, device=x.device)), a, b)
