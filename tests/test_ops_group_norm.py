"""F.group_norm on tpu vs PyTorch CPU in every memory layout: native_group_norm is registered for
PrivateUse1 by name (its CompositeExplicitAutograd kernel, math_group_norm, views the input as
[1, N*G, -1], which throws for channels_last tensors, and runs batch_norm + mul + add with full-size
temporaries). Forward and backward, odd sizes, f32/bf16, with and without affine, 3/4/5-D inputs,
channels_last and transposed views."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

DEV = "tpu"


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "channels_last":
        fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        return x.contiguous(memory_format=fmt)
    if layout == "transposed":  # a non-contiguous view: last two dims swapped in memory
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    return x


SHAPES = {3: (3, 6, 11), 4: (2, 6, 5, 7), 5: (2, 6, 3, 4, 5)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("ndim,layout", [(3, "contiguous"), (3, "transposed"), (4, "contiguous"),
                                         (4, "channels_last"), (4, "transposed"), (5, "channels_last")])
def test_group_norm_layouts_fwd_bwd(ndim, layout, affine, dtype):
    g = _gen(ndim)
    x = _layout((torch.randn(SHAPES[ndim], generator=g) * 3 + 1).to(dtype), layout)
    w = torch.randn(6, generator=g).to(dtype) if affine else None
    b = torch.randn(6, generator=g).to(dtype) if affine else None
    gy = _layout(torch.randn(SHAPES[ndim], generator=g).to(dtype), layout)

    xc = x.clone().requires_grad_()
    xd = x.to(DEV).requires_grad_()
    wc = w.clone().requires_grad_() if affine else None
    wd = w.to(DEV).requires_grad_() if affine else None
    bc = b.clone().requires_grad_() if affine else None
    bd = b.to(DEV).requires_grad_() if affine else None
    assert xd.stride() == x.stride()

    yc = F.group_norm(xc, 3, wc, bc, eps=1e-5)
    yd = F.group_norm(xd, 3, wd, bd, eps=1e-5)
    assert yd.shape == yc.shape and yd.dtype == yc.dtype
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(yd.cpu(), yc, **tol)
    yc.backward(gy)
    yd.backward(gy.to(DEV))
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, **tol)
    if affine:
        torch.testing.assert_close(wd.grad.cpu(), wc.grad, **tol)
        torch.testing.assert_close(bd.grad.cpu(), bc.grad, **tol)


@pytest.mark.parametrize("shape,groups", [((2, 4, 2, 2), 2), ((3, 8, 4, 4), 4), ((2, 6, 5, 7), 3), ((4, 32, 9, 9), 8),
                                          ((16, 16, 4, 4), 8)])
def test_group_norm_run_lengths_offset_and_inf(shape, groups):
    """Group sizes below and above the channel kernels' 16-element one-pass statistics (sums about the
    group's first element, in double), a mean far from zero and a group whose first element is an
    outlier; an inf input makes its group NaN (as PyTorch CPU) and leaves the others alone."""
    g = _gen(shape[1])
    x = torch.randn(shape, generator=g) * 2 + 500.0
    x[0, 0].view(-1)[0] = 560.0
    w, b = torch.randn(shape[1], generator=g), torch.randn(shape[1], generator=g)
    gy = torch.randn(shape, generator=g)
    xc, wc, bc = (t.clone().requires_grad_() for t in (x, w, b))
    xd, wd, bd = (t.to(DEV).requires_grad_() for t in (x, w, b))
    yc, yd = F.group_norm(xc, groups, wc, bc), F.group_norm(xd, groups, wd, bd)
    torch.testing.assert_close(yd.cpu(), yc, atol=1e-4, rtol=1e-4)
    yc.backward(gy)
    yd.backward(gy.to(DEV))
    for a, c in ((xd, xc), (wd, wc), (bd, bc)):
        torch.testing.assert_close(a.grad.cpu(), c.grad, atol=1e-3, rtol=1e-4)
    xi = x.clone()
    xi[-1, -1].view(-1)[-1] = float("inf")
    yi = F.group_norm(xi.to(DEV), groups, w.to(DEV), b.to(DEV)).cpu()
    ref = F.group_norm(xi, groups, w, b)
    torch.testing.assert_close(yi, ref, atol=1e-4, rtol=1e-4, equal_nan=True)


def test_group_norm_channels_last_module_and_autocast():
    """nn.GroupNorm on a channels_last conv output, in a bf16 autocast region (the UNet pattern)."""
    torch.manual_seed(0)
    conv, gn = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.GroupNorm(4, 8)
    x = torch.randn(2, 3, 9, 10, generator=_gen(7)).contiguous(memory_format=torch.channels_last)
    ref = gn(conv(x))
    convd, gnd = torch.nn.Conv2d(3, 8, 3, padding=1).to(DEV), torch.nn.GroupNorm(4, 8).to(DEV)
    convd.load_state_dict(conv.state_dict())
    gnd.load_state_dict(gn.state_dict())
    convd = convd.to(memory_format=torch.channels_last)
    torch.testing.assert_close(gnd(convd(x.to(DEV))).cpu(), ref, rtol=1e-4, atol=1e-4)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        y = gnd(convd(x.to(DEV)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        yc = gn(conv(x))
    torch.testing.assert_close(y.float().cpu(), yc.float(), rtol=5e-2, atol=5e-2)


def test_group_norm_forward_is_one_op():
    x = torch.randn(2, 6, 5, 7, device=DEV).contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(6, device=DEV), torch.randn(6, device=DEV)
    torch.tpu.synchronize()
    before = torch_tpu.metrics()["ops_run"]
    torch.ops.aten.native_group_norm(x, w, b, 2, 6, 35, 3, 1e-5)
    assert torch_tpu.metrics()["ops_run"] - before == 1


def test_group_norm_bad_groups():
    x = torch.randn(2, 6, 4, device=DEV)
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(x, 4)
