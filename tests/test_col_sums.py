"""Column sums (custom COL_SUMS, drivers/host/rows_impl.h; lower/reduce.c and lower/nn.c) vs PyTorch CPU on
random inputs: f32 sums over the leading dims of a tensor (bias gradients: odd sizes, rank 2..4, keepdim,
non-contiguous views, out=), the shapes that keep the generic reduce (trailing / middle dims, all dims,
bf16 / f16 / f64 / int, dtype=), linear-layer bias gradients, and layer norm's weight and bias gradients
(masks, no affine, bf16, views)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

DEV = "tpu"


def gen(seed):
    return torch.Generator().manual_seed(seed)


def close(t, c, **kw):
    torch.testing.assert_close(t.cpu(), c, **kw)


def close_sum(t, x, dims, keepdim=False):
    """t against the float64 sum (the kernel adds f32 terms in double and rounds once): within 1e-6 of the
    summed magnitudes (PyTorch CPU's own f32 sum of 2048 terms can be 30x further off)."""
    ref = x.double().sum(dims, keepdim=keepdim)
    mag = x.double().abs().sum(dims, keepdim=keepdim)
    assert t.shape == ref.shape and t.dtype == x.dtype
    err = (t.cpu().double() - ref).abs()
    assert (err <= 1e-6 * mag + 1e-30).all(), err.max()


@pytest.mark.parametrize("shape,dims", [((7, 5), (0,)), ((2048, 384), (0,)), ((33, 1), (0,)), ((1, 9), (0,)),
                                        ((3, 5, 41), (0, 1)), ((3, 5, 41), (0,)), ((2, 3, 4, 37), (0, 1, 2)),
                                        ((300, 31), (0,)), ((5, 0, 3), (0, 1))])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_leading(shape, dims, keepdim):
    x = torch.randn(shape, generator=gen(0)) * 4
    close_sum(x.to(DEV).sum(dims, keepdim=keepdim), x, dims, keepdim)
    close(x.to(DEV).sum(dims, keepdim=keepdim), x.sum(dims, keepdim=keepdim), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("view", ["t", "slice", "step", "expand"])
def test_sum_leading_views(view):
    base = torch.randn(65, 47, generator=gen(1))
    pick = {"t": lambda a: a.t(), "slice": lambda a: a[2:60, 3:40], "step": lambda a: a[::3, ::2],
            "expand": lambda a: a[:1].expand(40, 47)}[view]
    close_sum(pick(base.to(DEV)).sum(0), pick(base), (0,))


def test_sum_out_and_other_dims():
    x = torch.randn(6, 7, 9, generator=gen(2))
    xd = x.to(DEV)
    o = torch.empty(9, device=DEV)
    torch.sum(xd, (0, 1), out=o)
    close(o, x.sum((0, 1)))
    for dims in [(2,), (1,), (0, 2), (0, 1, 2), (-1, 0)]:
        close_sum(xd.sum(dims), x, dims)
    close_sum(xd.sum(), x, tuple(range(3)))
    for dt in (torch.bfloat16, torch.float16, torch.float64, torch.int64):
        xx = (x * 3).to(dt)
        close(xx.to(DEV).sum(0), xx.sum(0), rtol=2e-2 if dt in (torch.bfloat16, torch.float16) else 1e-6, atol=1e-2)
    close(x.to(torch.bfloat16).to(DEV).sum(0, dtype=torch.float32), x.to(torch.bfloat16).sum(0, dtype=torch.float32))


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(2048, 128), (37, 3, 29), (4, 5)])
def test_sum_leading_low_precision(dt, shape):
    """bf16 / f16 sums over the leading dims (autocast's bias gradients) take the column kernel on the values
    widened to f32: the double sum rounded to f32, then once to the dtype (exactly), and CPU's result within
    the dtype's rounding; fused eager gives the same bits."""
    x = torch.randn(shape, generator=gen(5)).to(dt)
    got = x.to(DEV).sum(0).cpu()
    assert torch.equal(got, x.double().sum(0).float().to(dt))
    close(got, x.sum(0), rtol=2e-2, atol=2e-2)
    import torch_tpu
    with torch_tpu.fused_eager():
        fused = (x.to(DEV) * 1).sum(0)
    assert torch.equal(fused.cpu(), got)


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("view", ["t", "slice", "step", "neg_rows", "expand", "rank3_keepdim", "wide"])
def test_sum_leading_low_precision_views(dt, view):
    """The bf16 / f16 column kernel (drivers/host/colsum.c) reads its dtype directly: strided, sliced, stepped,
    broadcast rows, odd widths (vector tails), more columns than one block; exact against the double sum of
    the widened values rounded to f32 then the dtype; fused eager gives the same bits."""
    base = torch.randn(70, 4100 if view == "wide" else 47, generator=gen(10)) * 3
    pick = {"t": lambda a: a[:, :31].t(), "slice": lambda a: a[3:61, 2:41], "step": lambda a: a[::3, ::2],
            "neg_rows": lambda a: a[:9], "expand": lambda a: a[:1].expand(33, a.shape[1]),
            "rank3_keepdim": lambda a: a[:69].view(3, 23, -1), "wide": lambda a: a[5:]}[view]
    x = pick(base.to(dt))
    dims = (0, 1) if view == "rank3_keepdim" else (0,)
    keep = view == "rank3_keepdim"
    xd = pick(base.to(dt).to(DEV))
    if view == "neg_rows":  # reversed rows (a flip copy on CPU), then a strided slice of it
        x, xd = x.flip(0)[::2], xd.flip(0)[::2]
    got = xd.sum(dims, keepdim=keep).cpu()
    assert torch.equal(got, x.double().sum(dims, keepdim=keep).float().to(dt))
    close(got, x.sum(dims, keepdim=keep), rtol=2e-2, atol=2e-2 * (x.shape[0] ** 0.5))
    import torch_tpu
    with torch_tpu.fused_eager():
        fused = (pick(base.to(dt).to(DEV)) * 1).sum(dims, keepdim=keep)
    if view != "neg_rows":
        assert torch.equal(fused.cpu(), got)


def test_sum_leading_low_precision_special_values():
    x = torch.randn(37, 21, generator=gen(11))
    x[2, 0] = float("nan"); x[3, 1] = float("inf"); x[4, 2] = float("-inf"); x[5, 2] = float("inf")
    x[:, 3] = 3e38  # overflows bf16 as the CPU's sum does
    x[:, 4] = 1e-40  # bf16 denormals are summed, not flushed
    xb = x.to(torch.bfloat16)
    got = xb.to(DEV).sum(0).cpu()
    close(got, xb.sum(0), equal_nan=True, rtol=2e-2, atol=1e-2)
    assert got[4] != 0


def test_sum_special_values():
    x = torch.randn(9, 6, generator=gen(3))
    x[2, 0] = float("nan"); x[3, 1] = float("inf"); x[4, 2] = float("-inf"); x[5, 2] = float("inf")
    x[:, 3] = 3e38  # overflows f32 as the CPU's sum does
    close(x.to(DEV).sum(0), x.sum(0), equal_nan=True)


def test_linear_bias_grad():
    torch.manual_seed(0)
    lin = torch.nn.Linear(23, 37)
    x = torch.randn(4, 19, 23)
    ld = torch.nn.Linear(23, 37).to(DEV)
    ld.load_state_dict(lin.state_dict())
    lin(x).square().sum().backward()
    ld(x.to(DEV)).square().sum().backward()
    close(ld.bias.grad, lin.bias.grad, rtol=1e-5, atol=1e-4)
    close(ld.weight.grad, lin.weight.grad, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("mask", [(True, True, True), (False, True, True), (False, True, False), (False, False, True)])
@pytest.mark.parametrize("shape,norm", [((2048, 128), 128), ((3, 7, 33), 33), ((5, 4, 6), 24), ((9, 17), 17)])
def test_layer_norm_param_grads(mask, shape, norm):
    nshape = [norm] if norm == shape[-1] else list(shape[-2:])
    x = torch.randn(shape, generator=gen(4)) * 2 + 0.5
    w = torch.randn(nshape, generator=gen(5)); b = torch.randn(nshape, generator=gen(6))
    g = torch.randn(shape, generator=gen(7))
    res = []
    for dev in (DEV, "cpu"):
        xd, wd, bd, gd = (t.to(dev) for t in (x, w, b, g))
        _, mean, rstd = torch.ops.aten.native_layer_norm(xd, nshape, wd, bd, 1e-5)
        res.append(torch.ops.aten.native_layer_norm_backward(gd, xd, nshape, mean, rstd, wd, bd, list(mask)))
    for t, c in zip(*res):
        assert (t is None) == (c is None)
        if t is not None:
            close(t, c, rtol=1e-5, atol=1e-4)


def test_layer_norm_grads_views_and_bf16():
    x = torch.randn(40, 24, generator=gen(8))
    for dev_x, cpu_x in ((x.to(DEV).t(), x.t()), (x.to(DEV)[::2], x[::2])):
        res = []
        for xx in (dev_x, cpu_x):
            xr = xx.detach().requires_grad_()
            ln = torch.nn.LayerNorm(xr.shape[-1]).to(xr.device)
            with torch.no_grad():
                ln.weight.copy_(torch.linspace(-1, 2, xr.shape[-1]))
                ln.bias.copy_(torch.linspace(0.5, -0.5, xr.shape[-1]))
            ln(xr).mul(torch.arange(xr.numel(), dtype=torch.float32, device=xr.device).view(xr.shape).sin()).sum().backward()
            res.append((xr.grad.cpu(), ln.weight.grad.cpu(), ln.bias.grad.cpu()))
        for t, c in zip(*res):
            torch.testing.assert_close(t, c, rtol=1e-5, atol=1e-4)
    # bf16: against the f32 computation on the same bf16 values (x, the bf16 upstream gradient), rounded once;
    # PyTorch CPU's bf16 kernel lands up to ~0.06 away on these sums, so it is not the reference here
    xb = (torch.randn(30, 16, generator=gen(9))).to(torch.bfloat16)
    gb = torch.linspace(-2, 2, 30 * 16).view(30, 16).to(torch.bfloat16)
    w = torch.ones(16)
    _, mean, rstd = torch.ops.aten.native_layer_norm(xb.float(), [16], w, w * 0, 1e-5)
    ref = torch.ops.aten.native_layer_norm_backward(gb.float(), xb.float(), [16], mean, rstd, w, w * 0, [False, True, True])
    xr = xb.to(DEV).requires_grad_()
    ln = torch.nn.LayerNorm(16).to(DEV).to(torch.bfloat16)
    ln(xr).backward(gb.to(DEV))
    for t, c in zip((ln.weight.grad, ln.bias.grad), ref[1:]):
        assert t.dtype == torch.bfloat16
        torch.testing.assert_close(t.cpu().float(), c.to(torch.bfloat16).float(), rtol=2 ** -7, atol=1e-3)
