"""Elementwise ops on tpu vs PyTorch CPU: random inputs, odd sizes, 0-dim and empty
tensors, broadcasting, non-contiguous views, in-place and out=, dtypes, backward."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
SHAPES = [(), (0,), (7,), (3, 5), (2, 3, 4), (4, 1, 3)]


def rand(shape, dtype, lo=-3.0, hi=3.0, gen=None):
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    lo_i = 0 if dtype == torch.uint8 else -20
    return torch.randint(lo_i, 20, shape, generator=gen).to(dtype)


def check(fn, *cpu_args, rtol=None, atol=None, **kw):
    """fn on cpu vs tpu, comparing every output (NaNs equal)."""
    dev_args = [a.to("tpu") if isinstance(a, torch.Tensor) else a for a in cpu_args]
    want = fn(*cpu_args, **kw)
    got = fn(*dev_args, **kw)
    if isinstance(want, torch.Tensor):
        want, got = (want,), (got,)
    for w, g in zip(want, got):
        assert g.device.type == "tpu"
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g.cpu(), w, rtol=rtol, atol=atol, equal_nan=True)
    return got


UNARY_FLOAT = [torch.neg, torch.abs, torch.sign, torch.exp, torch.expm1, torch.log1p, torch.sqrt,
               torch.rsqrt, torch.sin, torch.cos, torch.tan, torch.tanh, torch.sigmoid, torch.floor,
               torch.ceil, torch.round, torch.trunc, torch.frac, torch.erf, torch.atan, torch.sinh,
               torch.cosh, torch.asinh, torch.reciprocal, torch.log, torch.log2, torch.log10, torch.exp2,
               torch.relu, F.gelu, F.silu, F.softplus, F.mish, F.hardswish, F.hardsigmoid, F.elu,
               F.leaky_relu, F.hardtanh, torch.isnan, torch.isinf, torch.isfinite, torch.signbit]


@pytest.mark.parametrize("fn", UNARY_FLOAT, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_unary_float(fn, dtype):
    g = torch.Generator().manual_seed(0)
    for shape in SHAPES:
        x = rand(shape, dtype, gen=g)
        if x.numel() > 2:
            x.view(-1)[0] = float("nan") if fn not in (torch.round,) else 0.5
            # PyTorch CPU's vectorized gelu gives nan at +inf; we give the limit, inf
            x.view(-1)[1] = float("inf") if fn is not F.gelu else 40.0
        check(fn, x)


@pytest.mark.parametrize("fn", [torch.asin, torch.acos, torch.atanh, torch.erfinv], ids=lambda f: f.__name__)
def test_unary_domain(fn):
    x = rand((33,), torch.float32, -0.99, 0.99)
    check(fn, x)
    check(torch.acosh, rand((33,), torch.float32, 1.0, 9.0))
    check(torch.lgamma, rand((33,), torch.float64, 0.1, 9.0))
    check(torch.digamma, rand((33,), torch.float64, 0.1, 9.0))


@pytest.mark.parametrize("fn", [torch.neg, torch.abs, torch.sign, torch.bitwise_not, torch.square],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_unary_int(fn, dtype):
    if dtype == torch.uint8 and fn in (torch.neg,):
        pytest.skip("neg on uint8 wraps identically but is deprecated")
    check(fn, rand((4, 6), dtype))


def test_unary_int_to_float():
    x = rand((5, 3), torch.int32)
    for fn in (torch.exp, torch.sqrt, torch.sin, torch.sigmoid):
        check(fn, x.abs())


BINARY = [torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.minimum, torch.atan2,
          torch.remainder, torch.fmod, torch.pow, torch.eq, torch.ne, torch.lt, torch.le, torch.gt,
          torch.ge, torch.logical_and, torch.logical_or, torch.logical_xor, torch.xlogy, torch.floor_divide]


@pytest.mark.parametrize("fn", BINARY, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.int32],
                         ids=str)
def test_binary_broadcast(fn, dtype):
    if fn in (torch.atan2, torch.xlogy) and not dtype.is_floating_point:
        pytest.skip("float-only")
    g = torch.Generator().manual_seed(1)
    pairs = [((3, 5), (5,)), ((4, 1, 3), (2, 1)), ((), (6,)), ((0, 3), (3,)), ((2, 3), ())]
    for sa, sb in pairs:
        a, b = rand(sa, dtype, gen=g), rand(sb, dtype, gen=g)
        if fn in (torch.remainder, torch.fmod, torch.div, torch.floor_divide) and not dtype.is_floating_point:
            b = torch.where(b == 0, torch.ones_like(b), b)
        if fn is torch.pow and not dtype.is_floating_point:
            b = b.abs() % 4
        if fn is torch.pow and dtype.is_floating_point:
            a = a.abs()
        check(fn, a, b)


def test_binary_type_promotion_and_scalars():
    g = torch.Generator().manual_seed(2)
    f32, i32 = rand((4, 3), torch.float32, gen=g), rand((4, 3), torch.int32, gen=g)
    bf, u8 = rand((4, 3), torch.bfloat16, gen=g), rand((3,), torch.uint8, gen=g)
    i8 = rand((3,), torch.int8, gen=g)
    check(torch.add, f32, i32)
    check(torch.add, bf, f32)
    check(torch.mul, bf, i32)
    check(torch.add, u8, i8)                                # -> int16
    check(lambda a: a * 2.5, i32)                           # int tensor * float scalar -> float32
    check(lambda a: a + 3, bf)                              # stays bf16
    check(lambda a: a * torch.tensor(2.0, dtype=torch.float64), f32)  # 0-dim cpu tensor: stays f32
    check(lambda a: a / 3, i32)                             # true division
    check(lambda a: torch.div(a, 3, rounding_mode="floor"), i32)
    check(lambda a: torch.div(a, -2.5, rounding_mode="trunc"), f32)
    check(lambda a, b: torch.add(a, b, alpha=2), f32, i32)
    check(lambda a, b: torch.sub(a, b, alpha=0.5), f32, f32)
    check(lambda a: torch.rsub(a, 1.5), f32)
    b1, b2 = rand((5,), torch.bool, gen=g), rand((5,), torch.bool, gen=g)
    check(torch.add, b1, b2)
    check(torch.mul, b1, b2)
    check(torch.bitwise_xor, b1, b2)
    check(torch.bitwise_and, i32, i32.flip(0))
    check(torch.bitwise_left_shift, i32.abs() % 7, torch.tensor(3, dtype=torch.int32).expand(3))


def test_noncontiguous_and_views():
    g = torch.Generator().manual_seed(3)
    base = rand((6, 8), torch.float32, gen=g)
    other = rand((8, 6), torch.float32, gen=g)
    check(lambda a, b: a.t() + b, base, other)             # transposed input
    check(lambda a: a[::2, 1::3] * 2, base)                 # strided slice
    check(lambda a, b: torch.mul(a[:, :5], b.t()[:, :5]), base, other)
    check(lambda a: a.flip(0)[1:] - 1, base)
    check(lambda a: a.expand(3, 6, 8).exp(), base)          # expanded (stride 0)

    def inplace_on_view(a):
        a = a.clone()
        a[1:4, ::2].mul_(3).add_(1)
        a.t()[0].neg_()
        return a
    check(inplace_on_view, base)


def test_out_and_inplace_variants():
    g = torch.Generator().manual_seed(4)
    a, b = rand((3, 4), torch.float32, gen=g), rand((4,), torch.float32, gen=g)

    def out_variant(x, y):
        out = torch.empty(3, 4, device=x.device)
        torch.add(x, y, out=out)
        res = torch.empty(0, device=x.device)             # resized like PyTorch
        torch.mul(x, y, out=res)
        return out, res
    check(out_variant, a, b)

    def out_dtype(x, y):
        out = torch.empty(3, 4, dtype=torch.float64, device=x.device)
        return torch.add(x, y, out=out)
    check(out_dtype, a, b)

    def inplace(x, y):
        x = x.clone()
        x.add_(y).mul_(2).sub_(y, alpha=3).div_(4).clamp_(-1, 1).pow_(2)
        return x
    check(inplace, a, b)


def test_where_clamp_lerp_addc_masked_fill():
    g = torch.Generator().manual_seed(5)
    a, b = rand((4, 5), torch.float32, gen=g), rand((5,), torch.float32, gen=g)
    m = rand((4, 5), torch.bool, gen=g)
    check(torch.where, m, a, b)
    check(lambda c, x: torch.where(c, x, 0.0), m, a)
    check(lambda x: torch.clamp(x, -0.5, 0.7), a)
    check(lambda x: torch.clamp(x, min=0.2), a)
    check(lambda x, lo: torch.clamp(x, min=lo), a, b)
    check(lambda x: x.clamp(max=1), rand((6,), torch.int64, gen=g))
    check(torch.lerp, a, b.expand(4, 5), 0.3)
    check(torch.lerp, a, b.expand(4, 5), 0.8)
    check(torch.lerp, a, torch.zeros(4, 5), rand((4, 5), torch.float32, 0, 1, gen=g))
    check(lambda x, y: torch.addcmul(x, y, y, value=0.5), a, b)
    check(lambda x, y: torch.addcdiv(x, y, y.abs() + 1, value=-2), a, b)
    check(lambda x, mm: x.masked_fill(mm, 7.5), a, m)
    check(lambda x, mm: x.masked_fill(mm, torch.tensor(-1.0)), a, m)
    check(lambda x: torch.nan_to_num(x / 0), a)
    check(lambda x: torch.nan_to_num(x / 0, nan=1.0, posinf=2.0, neginf=-2.0), a)


def test_fill_zero_copy():
    g = torch.Generator().manual_seed(6)
    check(lambda x: x.clone().fill_(3.25), rand((3, 7), torch.float32, gen=g))
    check(lambda x: x.clone().zero_(), rand((3, 7), torch.bfloat16, gen=g))
    check(lambda x: x.clone().fill_(torch.tensor(2)), rand((5,), torch.int16, gen=g))
    for src_dt in FLOATS + INTS + [torch.bool]:
        x = rand((4, 3), src_dt, gen=g)
        for dst_dt in (torch.float32, torch.int32, torch.bfloat16, torch.bool, torch.float64):
            check(lambda t: t.to(dst_dt), x)
            check(lambda t: t.t().to(dst_dt).contiguous(), x)
    check(lambda x: torch.zeros(3, 4, device=x.device).copy_(x[0]), rand((2, 4), torch.float32, gen=g))


@pytest.mark.parametrize("fn", [torch.tanh, torch.sigmoid, torch.exp, F.gelu, F.silu, F.softplus, F.elu,
                                F.leaky_relu, F.hardtanh, F.mish, F.hardswish, F.logsigmoid, torch.relu,
                                lambda t: F.gelu(t, approximate="tanh"), lambda t: t.abs().sqrt(),
                                lambda t: t.clamp(-0.5, 0.5), lambda t: torch.lerp(t, t * 2, 0.3),
                                lambda t: t.pow(3), lambda t: torch.atan2(t, t.flip(0) + 4)],
                         ids=lambda f: getattr(f, "__name__", "lambda"))
def test_backward_matches_cpu(fn):
    g = torch.Generator().manual_seed(7)
    x = rand((5, 6), torch.float64, gen=g)
    a = x.clone().requires_grad_()
    b = x.clone().to("tpu").requires_grad_()
    gy = torch.randn(5, 6, generator=g, dtype=torch.float64)
    fn(a).backward(gy)
    fn(b).backward(gy.to("tpu"))
    torch.testing.assert_close(b.grad.cpu(), a.grad)


def test_binary_backward_with_broadcast():
    g = torch.Generator().manual_seed(8)
    x, y = rand((4, 3), torch.float32, gen=g), rand((3,), torch.float32, 0.5, 2, gen=g)
    grads = []
    for dev in ("cpu", "tpu"):
        a, b = x.clone().to(dev).requires_grad_(), y.clone().to(dev).requires_grad_()
        ((a * b + a / b - torch.maximum(a, b)).sum()).backward()
        grads.append((a.grad.cpu(), b.grad.cpu()))
    torch.testing.assert_close(grads[1], grads[0])


def test_logaddexp_and_equal():
    g = torch.Generator().manual_seed(9)
    a, b = rand((4, 5), torch.float32, -30, 30, gen=g), rand((5,), torch.float32, -30, 30, gen=g)
    a[0, 0], b[0] = float("inf"), float("inf")
    a[1, 1], b[1] = -float("inf"), -float("inf")
    check(torch.logaddexp, a, b)
    check(torch.logaddexp2, a, b)
    x = rand((3, 4), torch.float32, gen=g)
    xt = x.to("tpu")
    assert torch.equal(xt, x.clone().to("tpu")) and not torch.equal(xt, (x + 1).to("tpu"))
    assert not torch.equal(xt, xt[:2])
    nan = torch.tensor(float("nan")).to("tpu")
    assert torch.equal(nan, nan) == torch.equal(torch.tensor(float("nan")), torch.tensor(float("nan")))


SMALL_SPECIAL = [lambda a, b: torch.copysign(a, b), torch.hypot, lambda a, b: torch.heaviside(a, b),
                 lambda a, b: torch.sinc(a), lambda a, b: F.softshrink(a, 0.7), lambda a, b: torch.special.entr(a)]


@pytest.mark.parametrize("fn", SMALL_SPECIAL, ids=["copysign", "hypot", "heaviside", "sinc", "softshrink", "entr"])
def test_small_special_functions(fn):
    g = torch.Generator().manual_seed(10)
    a, b = rand((4, 6), torch.float32, -2, 2, gen=g), rand((4, 6), torch.float32, -2, 2, gen=g)
    a[0, :3] = torch.tensor([0.0, -0.0, float("nan")])
    b[0, 3:] = torch.tensor([0.0, -0.0, float("inf")])
    check(fn, a, b)
    x = a.clone().requires_grad_()
    if fn is not SMALL_SPECIAL[2]:  # heaviside has no derivative in PyTorch
        xt = a.clone().to("tpu").requires_grad_()
        fn(x, b).sum().backward()
        fn(xt, b.to("tpu")).sum().backward()
        torch.testing.assert_close(xt.grad.cpu(), x.grad, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.bool])
def test_add_sub_alpha_one_and_others(dtype):
    """add/sub's alpha is keyed only by whether it is 1 (lower/eltwise.c alpha_class): alpha = 1 drops the
    b * alpha pass (same bits), other values share one executable that reads alpha at run time. One value
    after another in the same process, so an executable for one class must never serve the other; NaN/inf
    and -0 in b (b * 1 keeps them), broadcast, in-place, out=."""
    g = torch.Generator().manual_seed(7)
    a, b = rand((5, 9), dtype, gen=g), rand((9,), dtype, gen=g)
    if dtype.is_floating_point:
        b[1], b[2], b[3] = float("nan"), float("-inf"), -0.0
    alphas = [True, False, True] if dtype == torch.bool else [1, 2, 1, -3, 1] if not dtype.is_floating_point \
        else [1, 0.5, 1, -3, 1.0, 2.5, 1]
    for al in alphas:
        # alpha = 1: the CPU's bits exactly; other alphas: the CPU fuses a + alpha * b (one rounding, then one to
        # bf16/f16), we round the product too: a last-place difference, relatively large where a + alpha b cancels
        tol = {"rtol": 0, "atol": 0} if al == 1 or not dtype.is_floating_point else \
            {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
        ops = [torch.add] if dtype == torch.bool else [torch.add, torch.sub]
        for op in ops:
            want = op(a, b, alpha=al)
            got = op(a.to("tpu"), b.to("tpu"), alpha=al).cpu()
            torch.testing.assert_close(got, want, equal_nan=True, **tol)
        if dtype != torch.bool:
            x = a.clone().to("tpu")
            x.add_(b.to("tpu"), alpha=al)
            torch.testing.assert_close(x.cpu(), a.add(b, alpha=al), equal_nan=True, **tol)
            out = torch.empty_like(a).to("tpu")
            torch.sub(a.to("tpu"), b.to("tpu"), alpha=al, out=out)
            torch.testing.assert_close(out.cpu(), a.sub(b, alpha=al), equal_nan=True, **tol)


def test_add_alpha_other_than_one_share_one_executable():
    import torch_tpu
    a, b = torch.randn(6, 11), torch.randn(6, 11)
    ad, bd = a.to("tpu"), b.to("tpu")
    torch.testing.assert_close(torch.add(ad, bd, alpha=2.0).cpu(), torch.add(a, b, alpha=2.0))
    before = torch_tpu.metrics()
    for al in [0.5, -1.25, 3.0, 0.0]:
        torch.testing.assert_close(torch.add(ad, bd, alpha=al).cpu(), torch.add(a, b, alpha=al))
    after = torch_tpu.metrics()
    assert after["exec_cache_misses"] == before["exec_cache_misses"]
    assert after["compiles"] == before["compiles"]
