"""addcmul / addcdiv vs PyTorch CPU. f32 (and bf16/f16 through f32) run as the host's ADDC kernel
(drivers/host/rows_impl.h) in the CPU's order and roundings, fma(value t1, t2, self) and
self + (value t1) / t2, so the results are the CPU's bits; f64 keeps the composite in the same order
(addcdiv exact, addcmul within rounding: no fma in the IR). Odd sizes, views, broadcasts, in-place,
integer tensors, the _foreach_ forms AdamW uses (Scalar, ScalarList, Tensor scalars), fused eager."""
from __future__ import annotations

import math

import pytest
import torch

DEV = "tpu"
OPS = [torch.addcmul, torch.addcdiv]


def gen(seed):
    return torch.Generator().manual_seed(seed)


def rnd(shape, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=gen(seed)).to(dtype)


def tol(dtype, op):
    return {} if dtype == torch.float64 and op is torch.addcmul else dict(rtol=0, atol=0)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("value", [0.001, -0.0110701, 0.3, 1, -2])
def test_addc_values(op, dtype, value):
    s, a, b = rnd((37, 29), dtype, 1), rnd((37, 29), dtype, 2), rnd((37, 29), dtype, 3)
    s.view(-1)[:4] = torch.tensor([math.nan, math.inf, -math.inf, -0.0]).to(dtype)
    b.view(-1)[4:6] = 0
    t = op(s.to(DEV), a.to(DEV), b.to(DEV), value=value).cpu()
    torch.testing.assert_close(t, op(s, a, b, value=value), equal_nan=True, **tol(dtype, op))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5, 4097), (2, 3, 5, 7)])
def test_addc_shapes(op, shape):
    s, a, b = rnd(shape, seed=4), rnd(shape, seed=5), rnd(shape, seed=6)
    torch.testing.assert_close(op(s.to(DEV), a.to(DEV), b.to(DEV), value=0.7).cpu(), op(s, a, b, value=0.7),
                               rtol=0, atol=0)


@pytest.mark.parametrize("op", OPS)
def test_addc_views_broadcast_inplace(op):
    s, a, b = rnd((40, 30), seed=7), rnd((30, 40), seed=8), rnd((40, 60), seed=9)
    t = op(s.to(DEV), a.to(DEV).t(), b.to(DEV)[:, ::2], value=-0.25).cpu()  # transposed and strided operands
    torch.testing.assert_close(t, op(s, a.t(), b[:, ::2], value=-0.25), rtol=0, atol=0)
    row, col = rnd((30,), seed=10), rnd((40, 1), seed=11)  # broadcast t1 / t2 / self
    torch.testing.assert_close(op(s.to(DEV), row.to(DEV), col.to(DEV) + 3, value=2).cpu(),
                               op(s, row, col + 3, value=2), rtol=0, atol=0)
    torch.testing.assert_close(op(row.to(DEV), s.to(DEV), s.to(DEV) + 5, value=2).cpu(),
                               op(row, s, s + 5, value=2), rtol=0, atol=0)
    sd = s.to(DEV)
    getattr(sd, op.__name__ + "_")(a.t().to(DEV), b[:, ::2].to(DEV), value=0.5)
    torch.testing.assert_close(sd.cpu(), getattr(s.clone(), op.__name__ + "_")(a.t(), b[:, ::2], value=0.5),
                               rtol=0, atol=0)


def test_addc_integers_and_errors():
    s, a, b = (torch.randint(-9, 9, (13, 7), generator=gen(i)) for i in range(3))
    assert torch.equal(torch.addcmul(s.to(DEV), a.to(DEV), b.to(DEV), value=3).cpu(), torch.addcmul(s, a, b, value=3))
    with pytest.raises(RuntimeError, match="Integer division"):
        torch.addcdiv(s.to(DEV), a.to(DEV), b.to(DEV))


@pytest.mark.parametrize("op", ["addcmul", "addcdiv"])
def test_foreach_addc(op):
    shapes = [(64, 128), (128,), (344, 128), (3, 5)]
    sel = [rnd(sh, seed=20 + i) for i, sh in enumerate(shapes)]
    t1 = [rnd(sh, seed=30 + i) for i, sh in enumerate(shapes)]
    t2 = [rnd(sh, seed=40 + i).abs() + 0.1 for i, sh in enumerate(shapes)]
    fn = getattr(torch, f"_foreach_{op}_")
    for scal in (-0.011, [0.1, -0.2, 0.3, 1e-3], torch.tensor([0.5, -1.5, 2.0, 1e-4])):
        d = [x.to(DEV) for x in sel]
        fn(d, [x.to(DEV) for x in t1], [x.to(DEV) for x in t2], scal)
        c = [x.clone() for x in sel]
        fn(c, t1, t2, scal)
        for p, q in zip(d, c):
            torch.testing.assert_close(p.cpu(), q, rtol=0, atol=0)


def test_addc_fused_eager_same_bits():
    import torch_tpu
    s, a, b = rnd((33, 65), seed=50), rnd((33, 65), seed=51), rnd((33, 65), seed=52)
    sd, ad, bd = s.to(DEV), a.to(DEV), b.to(DEV)
    for op in OPS:
        strict = op(sd * 2, ad + 1, bd * bd + 1, value=0.3).cpu()
        with torch_tpu.fused_eager():
            fused = op(sd * 2, ad + 1, bd * bd + 1, value=0.3).cpu()
        assert torch.equal(fused, strict)
        assert torch.equal(strict, op(s * 2, a + 1, b * b + 1, value=0.3))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", [(32, 8), (64, 64, 3, 3), (5000, 3), (3, 4097), (9000,)])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_addc_broadcast_scalar_operand(op, shape, which):
    """A rank-0 tensor expanded over the whole shape (stride 0 everywhere: what a compiled AdamW's graph
    passes, e.g. a step size broadcast over a 3x3 conv weight) takes the flat path with the value repeated,
    and gives the CPU's bits; odd sizes cross the 4096-element chunks."""
    s, b, c = rnd(shape, seed=12), rnd(shape, seed=13) + 3, torch.tensor(0.37)
    args = [[s, c.expand(shape), b], [c.expand(shape), s, b], [s, b, c.expand(shape)]][which]
    dev = [c.to(DEV).expand(shape) if a.stride() == (0,) * len(shape) else a.to(DEV) for a in args]
    torch.testing.assert_close(op(*dev, value=0.3).cpu(), op(*args, value=0.3), rtol=0, atol=0)
