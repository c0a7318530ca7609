"""pow(Tensor, Scalar exponent) vs PyTorch CPU. The exponent is part of the executable's key
(lower/eltwise.c): 0, 1, 2, 3, -0.5, -1 and -2 lower to the forms PyTorch's CPU kernel uses for
them (fill, copy, x*x, x*x*x, 1/sqrt (not f16), 1/x, 1/(x*x); bf16 rounds each step as the CPU does), so their results are the CPU's bits; other
exponents keep pow. Random inputs with special values, odd sizes, non-contiguous views, bf16/f16/f64,
integer tensors with float exponents, in-place, _foreach_pow, autograd (RMSNorm's pow(x, 1.0) backward),
and fused eager (same bits as strict eager). lerp (the host's LERP kernel: the CPU's bits) with Scalar,
0-dim, full-shape and broadcast weights, in place, _foreach_lerp_, fused eager."""
from __future__ import annotations

import math

import pytest
import torch

DEV = "tpu"
SPECIAL = [0, 1, 2, 3, -0.5, -1, -2, 1.0, 2.0, 3.0, -1.0, -2.0, 0.0]
GENERAL = [2.5, -1.5, 4, 1.0000001, 0.25, -3, 0.5]


def gen(seed):
    return torch.Generator().manual_seed(seed)


def sample(shape, dtype=torch.float32, seed=0):
    x = torch.randn(shape, generator=gen(seed)) * 3
    flat = x.view(-1)
    vals = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-30, -1e-30, 1e30, 1.0, -1.0]
    flat[: min(len(vals), flat.numel())] = torch.tensor(vals[: flat.numel()])
    return x.to(dtype)


@pytest.mark.parametrize("e", SPECIAL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_pow_special_exponents_bitwise(e, dtype):
    x = sample((37, 29), dtype, seed=1)
    t = x.to(DEV).pow(e).cpu()
    c = x.pow(e)
    assert t.dtype == c.dtype
    # x ** -0.5 is pow on the CPU for f16 (the general path here), and for bf16 its vector body rounds
    # 1/sqrt once while its scalar tail rounds the sqrt first (position-dependent bits): one rounding here
    exact = not (e == -0.5 and dtype in (torch.bfloat16, torch.float16))
    torch.testing.assert_close(t, c, equal_nan=True, **(dict(rtol=0, atol=0) if exact else {}))


@pytest.mark.parametrize("e", GENERAL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_pow_general_exponents(e, dtype):
    x = sample((5, 4097), dtype, seed=2).abs() + 0.5 if e != 4 else sample((5, 4097), dtype, seed=2)
    torch.testing.assert_close(x.to(DEV).pow(e).cpu(), x.pow(e), equal_nan=True)


@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5, 4097), (2, 3, 5, 7)])
@pytest.mark.parametrize("e", [1.0, 2, 3, -0.5, 2.5])
def test_pow_shapes(shape, e):
    x = sample(shape, seed=3)
    x = x.abs() if e == 2.5 else x
    tol = {} if e == 2.5 else dict(rtol=0, atol=0)
    torch.testing.assert_close(x.to(DEV).pow(e).cpu(), x.pow(e), equal_nan=True, **tol)


@pytest.mark.parametrize("view", ["t", "slice", "step", "expand"])
@pytest.mark.parametrize("e", [1.0, 2, -2, -0.5])
def test_pow_views(view, e):
    base = sample((37, 29), seed=4)
    pick = {"t": lambda a: a.t(), "slice": lambda a: a[3:30, 1:20], "step": lambda a: a[::2, ::3],
            "expand": lambda a: a[0].expand(37, 29)}[view]
    xd = pick(base.to(DEV))
    torch.testing.assert_close(xd.pow(e).cpu(), pick(base).pow(e), rtol=0, atol=0, equal_nan=True)


def test_pow_integer_tensors_and_inplace():
    i = torch.randint(-5, 6, (33, 7), generator=gen(5))
    for e in (2, 3, 0, 1):
        assert torch.equal(i.to(DEV).pow(e).cpu(), i.pow(e))
    for e in (2.0, 0.5, -1.0, 1.0):  # float exponent: float result
        t, c = i.to(DEV).pow(e).cpu(), i.pow(e)
        assert t.dtype == c.dtype
        torch.testing.assert_close(t, c, rtol=0, atol=0, equal_nan=True)
    x = sample((19, 23), seed=6)
    for e in (1.0, 2, -0.5, 2.5):
        xd = x.to(DEV)
        xd.pow_(e)
        torch.testing.assert_close(xd.cpu(), x.clone().pow_(e), equal_nan=True)


def test_foreach_pow_keeps_each_exponent():
    xs = [sample((13, 5), seed=7).abs() + 0.1, sample((6,), seed=8).abs() + 0.1]
    for e in (1.0, 2, 0.5, 2.5, [2, 0.5], [1.0, 3]):
        t = torch._foreach_pow([x.to(DEV) for x in xs], e)
        c = torch._foreach_pow(xs, e)
        for a, b in zip(t, c):
            torch.testing.assert_close(a.cpu(), b, equal_nan=True)


def test_rmsnorm_backward_pow_one():
    x = torch.randn(16, 32, 128, generator=gen(9))
    w = torch.randn(128, generator=gen(10))

    def rms(a, wt):
        return a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-5) * wt

    xs = [x.clone().requires_grad_(), x.to(DEV).requires_grad_()]
    ws = [w.clone().requires_grad_(), w.to(DEV).requires_grad_()]
    for a, wt in zip(xs, ws):
        rms(a, wt).square().sum().backward()
    torch.testing.assert_close(xs[1].grad.cpu(), xs[0].grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ws[1].grad.cpu(), ws[0].grad, rtol=1e-4, atol=1e-4)


def test_pow_fused_eager_same_bits():
    import torch_tpu
    x = sample((33, 65), seed=11)
    xd = x.to(DEV)
    for e in (1.0, 2, 3, -0.5, 2.5):
        strict = ((xd * 1.5).pow(e) + 1).cpu()
        with torch_tpu.fused_eager():
            fused = ((xd * 1.5).pow(e) + 1).cpu()
        torch.testing.assert_close(fused, strict, rtol=0, atol=0, equal_nan=True)


# lerp: f32 (and bf16/f16 through f32) with a scalar or full-shape weight is the host's LERP kernel, PyTorch's
# CPU formula with its single rounding (fma): the CPU's bits. f64 and broadcast weights keep the composite IR.
def exact(dtype):
    return dict(rtol=0, atol=0) if dtype != torch.float64 else {}


@pytest.mark.parametrize("w", [0.1, 0.5, 0.7, -0.3, 1.0, 1.7, 0.0, -0.5, 0.4999, math.inf, math.nan])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_lerp_scalar_weight(w, dtype):
    a = sample((41, 17), dtype, seed=12)
    b = torch.randn(41, 17, generator=gen(13)).to(dtype)
    torch.testing.assert_close(torch.lerp(a.to(DEV), b.to(DEV), w).cpu(), torch.lerp(a, b, w), equal_nan=True,
                               **exact(dtype))
    ad = a.to(DEV)[:, ::2]
    ad.lerp_(b.to(DEV)[:, ::2], w)
    torch.testing.assert_close(ad.cpu(), a[:, ::2].clone().lerp_(b[:, ::2], w), equal_nan=True, **exact(dtype))
    w0 = torch.tensor(w, dtype=dtype)  # a 0-dim weight tensor
    torch.testing.assert_close(torch.lerp(a.to(DEV), b.to(DEV), w0.to(DEV)).cpu(), torch.lerp(a, b, w0),
                               equal_nan=True, **exact(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lerp_tensor_weight_and_foreach(dtype):
    a = sample((23, 9), dtype, seed=14)
    b = torch.randn(23, 9, generator=gen(15)).to(dtype)
    w = (torch.rand(23, 9, generator=gen(16)) * 2 - 0.5).to(dtype)
    w[0, :3] = torch.tensor([math.nan, math.inf, -math.inf])
    torch.testing.assert_close(torch.lerp(a.to(DEV), b.to(DEV), w.to(DEV)).cpu(), torch.lerp(a, b, w),
                               equal_nan=True, rtol=0, atol=0)
    wt = w.t().contiguous().t()  # a transposed weight: rows gathered
    torch.testing.assert_close(torch.lerp(a.to(DEV).t(), b.to(DEV).t(), wt.to(DEV).t()).cpu(),
                               torch.lerp(a.t(), b.t(), wt.t()), equal_nan=True, rtol=0, atol=0)
    wb = w[1]  # broadcast weight row: the composite
    torch.testing.assert_close(torch.lerp(a.to(DEV), b.to(DEV), wb.to(DEV)).cpu(), torch.lerp(a, b, wb),
                               equal_nan=True)
    xs, ys = [a, a[:5].t(), a[0]], [b, b[:5].t(), b[0]]
    for wf in (0.1, 0.9):
        t = [x.to(DEV) for x in xs]
        torch._foreach_lerp_(t, [y.to(DEV) for y in ys], wf)
        c = [x.clone() for x in xs]
        torch._foreach_lerp_(c, ys, wf)
        for p, q in zip(t, c):
            torch.testing.assert_close(p.cpu(), q, equal_nan=True, rtol=0, atol=0)


def test_lerp_fused_eager_same_bits():
    import torch_tpu
    a = torch.randn(33, 65, generator=gen(17))
    b = torch.randn(33, 65, generator=gen(18))
    ad, bd = a.to(DEV), b.to(DEV)
    for w in (0.1, 0.8):
        strict = torch.lerp(ad * 2, bd + 1, w).cpu()
        with torch_tpu.fused_eager():
            fused = torch.lerp(ad * 2, bd + 1, w).cpu()
        assert torch.equal(fused, strict)
        assert torch.equal(strict, torch.lerp(a * 2, b + 1, w))


def test_general_exponents_share_one_executable():
    """Only the exponent's form is in the key (lower/eltwise.c pow_exponent_class): after one general
    exponent has compiled, every other general float exponent reuses that executable with its value bound
    at run time, and a special exponent still takes its own form (CPU bits)."""
    import torch_tpu
    x = sample((13, 21), seed=5).abs() + 0.5
    xd = x.to(DEV)
    torch.testing.assert_close(xd.pow(2.5).cpu(), x.pow(2.5), equal_nan=True)
    before = torch_tpu.metrics()
    for e in [1.7, -1.25, 0.3, 7.0, 1e-3, float("nan"), float("inf"), -0.75]:
        torch.testing.assert_close(xd.pow(e).cpu(), x.pow(e), equal_nan=True)
    after = torch_tpu.metrics()
    assert after["exec_cache_misses"] == before["exec_cache_misses"]
    assert after["compiles"] == before["compiles"]
    for e in [2.0, -0.5, 3.0, 1.0]:
        torch.testing.assert_close(xd.pow(e).cpu(), x.pow(e), equal_nan=True, rtol=0, atol=0)
