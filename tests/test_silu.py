"""SiLU forward and backward (custom SILU / SILU_BWD, drivers/host/rows_impl.h; lower/eltwise.c) vs PyTorch CPU
on random inputs: odd sizes, rank 0..4, non-contiguous views (transposed, strided, expanded gradient),
bf16 / f16 (through f32), f64 (composite IR), special values (NaN, +-inf, -0, exp's overflow and underflow
edges), autograd through F.silu and nn.SiLU, and values computed inside a fused graph (the same kernel:
bit-identical to strict eager)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

DEV = "tpu"


def gen(seed):
    return torch.Generator().manual_seed(seed)


def bwd(g, x):
    return torch.ops.aten.silu_backward(g, x)


def check(x, g=None, **tol):
    g = torch.randn(x.shape, generator=gen(7)).to(x.dtype) if g is None else g
    t, c = F.silu(x.to(DEV)).cpu(), F.silu(x)
    assert t.dtype == c.dtype and t.shape == c.shape
    torch.testing.assert_close(t, c, equal_nan=True, **tol)
    t, c = bwd(g.to(DEV), x.to(DEV)).cpu(), bwd(g, x)
    assert t.dtype == c.dtype and t.shape == c.shape
    torch.testing.assert_close(t, c, equal_nan=True, **tol)


@pytest.mark.parametrize("shape", [(), (1,), (7,), (33, 17), (3, 5, 4097), (2, 3, 5, 7), (4096 * 3 + 5,)])
def test_silu_shapes(shape):
    check(torch.randn(shape, generator=gen(0)) * 6)


def test_silu_specials():
    vals = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-30, -1e-30, 1e-45, -87.0, -88.8, -103.9, -104.0,
            -150.0, 87.5, 88.8, 104.0, -1e30, 1e30, 3.4e38, -3.4e38, 20.0, -20.0, 10.0]
    x = torch.tensor(vals)
    check(x, g=torch.ones_like(x))
    check(x, g=torch.full_like(x, -2.5))


@pytest.mark.parametrize("view", ["t", "slice", "step", "expand_g"])
def test_silu_views(view):
    base = torch.randn(37, 29, generator=gen(1)) * 5
    gbase = torch.randn(37, 29, generator=gen(2))
    pick = {"t": lambda a: a.t(), "slice": lambda a: a[3:30, 1:20], "step": lambda a: a[::2, ::3],
            "expand_g": lambda a: a}[view]
    gpick = (lambda a: a[0].expand(37, 29)) if view == "expand_g" else pick  # stride-0 rows
    x, g = pick(base), gpick(gbase)
    xd, gd = pick(base.to(DEV)), gpick(gbase.to(DEV))
    assert view == "expand_g" or not xd.is_contiguous()
    torch.testing.assert_close(F.silu(xd).cpu(), F.silu(x))
    torch.testing.assert_close(bwd(gd, xd).cpu(), bwd(g, x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_silu_dtypes(dtype):
    check((torch.randn(65, 33, generator=gen(3)) * 6).to(dtype))


def test_silu_inplace_and_module_autograd():
    x = torch.randn(16, 32, 344, generator=gen(4)) * 4
    xd = x.to(DEV)
    F.silu(xd, inplace=True)
    torch.testing.assert_close(xd.cpu(), F.silu(x))
    w = torch.randn(344, generator=gen(5))
    grads = []
    for dev in ("cpu", DEV):
        a = x.clone().to(dev).requires_grad_()
        (torch.nn.SiLU()(a) * w.to(dev)).sum().backward()
        grads.append(a.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])


def test_silu_fused_same_bits():
    import torch_tpu
    x = torch.randn(33, 65, generator=gen(6)) * 3
    w = torch.randn(65, 31, generator=gen(8))
    g = torch.randn(33, 31, generator=gen(9))
    xd, wd, gd = x.to(DEV), w.to(DEV), g.to(DEV)
    strict = (F.silu(xd @ wd).cpu(), bwd(gd * 2, xd @ wd).cpu())
    with torch_tpu.fused_eager():  # silu of a product in the same graph: the same kernel, the same bits
        fused = (F.silu(xd @ wd).cpu(), bwd(gd * 2, xd @ wd).cpu())
    torch.testing.assert_close(fused[0], F.silu(x @ w), rtol=1e-5, atol=1e-5)
    for a, b in zip(fused, strict):
        assert torch.equal(a, b)
