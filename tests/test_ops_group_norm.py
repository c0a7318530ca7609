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


# ---- the fused group-norm targets (GROUP_NORM_STATS / GROUP_NORM forward, GROUP_NORM_SUMS / GROUP_NORM_BWD
# backward, drivers/host/norm.h): odd sizes, masks, dtypes, NaN / inf, compiled graphs, the StableHLO oracle

ODD = [  # (shape, groups)
    ((1, 6), 3),              # HxW = 1, rank 2
    ((3, 10, 3, 5), 5),       # odd map, 2 channels per group
    ((1, 7, 4, 4), 7),        # N = 1, one channel per group
    ((1, 7, 4, 4), 1),        # one group
    ((2, 12, 16, 16), 4),
    ((5, 9, 1), 3),           # rank 3, HxW = 1
    ((2, 130, 3, 1), 2),      # groups of 65 channels (the channels_last kernels' 64-channel blocks)
]


@pytest.mark.parametrize("shape,groups", ODD)
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_group_norm_odd_sizes_vs_cpu(shape, groups, affine, layout):
    if layout == "channels_last" and len(shape) != 4:
        pytest.skip("channels_last needs a 4-D input")
    g = _gen(len(shape) * 100 + shape[1])
    C = shape[1]
    x = torch.randn(shape, generator=g) * 2 - 1
    w = torch.randn(C, generator=g) if affine in ("both", "weight") else None
    b = torch.randn(C, generator=g) if affine in ("both", "bias") else None
    gy = _layout(torch.randn(shape, generator=g), layout)
    outs = []
    for dev in ("cpu", DEV):
        xs, ws, bs = (None if t is None else t.detach().clone().to(dev).requires_grad_() for t in (_layout(x, layout), w, b))
        if dev == "cpu" and ws is None and bs is not None:  # PyTorch CPU's backward fails for a bias without a
            ws = torch.ones(C)                              # weight ("tensor does not have a device"): weight 1
        y = F.group_norm(xs, groups, ws, bs, eps=1e-5)
        y.backward(gy.to(dev))
        outs.append([y] + [t.grad for t in (xs, ws, bs) if t is not None and t.requires_grad])
    y_t, y_c = outs[1][0], outs[0][0]  # strides of size-1 dims are free (N = 1: the glue's allocation differs there)
    assert [st for st, n in zip(y_t.stride(), y_t.shape) if n > 1] == [st for st, n in zip(y_c.stride(), y_c.shape) if n > 1]
    for d, c in zip(outs[1], outs[0]):
        torch.testing.assert_close(d.cpu(), c, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("need", [(True, False, False), (False, True, True), (False, True, False), (True, True, False),
                                  (False, False, True)])
def test_group_norm_backward_output_masks(need):
    """Only the requested gradients: d x alone is one GROUP_NORM_BWD that makes its own sums; d weight / d bias
    come from GROUP_NORM_SUMS (d x then reads its sums)."""
    g = _gen(11)
    x, w, b = torch.randn(3, 8, 5, 3, generator=g), torch.randn(8, generator=g), torch.randn(8, generator=g)
    gy = torch.randn(3, 8, 5, 3, generator=g)
    res = []
    for dev in ("cpu", DEV):
        ts = [t.to(dev).requires_grad_(r) for t, r in zip((x, w, b), need)]
        y = F.group_norm(ts[0], 4, ts[1], ts[2])
        wanted = [t for t in ts if t.requires_grad]
        res.append(torch.autograd.grad(y, wanted, gy.to(dev)))
    for d, c in zip(res[1], res[0]):
        torch.testing.assert_close(d.cpu(), c, rtol=1e-4, atol=1e-4)


def test_group_norm_float64_tight():
    """f64 statistics and coefficients: PyTorch CPU's float64 results to 1e-12."""
    g = _gen(12)
    x = torch.randn(2, 6, 7, 3, generator=g, dtype=torch.float64) * 5 + 3
    w, b = torch.randn(6, generator=g, dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64)
    gy = torch.randn(2, 6, 7, 3, generator=g, dtype=torch.float64)
    res = []
    for dev in ("cpu", DEV):
        ts = [t.to(dev).requires_grad_() for t in (x, w, b)]
        y, mean, rstd = torch.ops.aten.native_group_norm(ts[0], ts[1], ts[2], 2, 6, 21, 3, 1e-5)
        res.append([y, mean, rstd, *torch.autograd.grad(y, ts, gy.to(dev))])
    for d, c in zip(res[1], res[0]):
        torch.testing.assert_close(d.cpu(), c, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_group_norm_half_inputs(dtype, layout):
    """bf16 / f16 inputs are read as they are (f32 statistics), y and d x in their dtype; compared with PyTorch CPU on
    the same rounded inputs (CPU computes in f32 too)."""
    g = _gen(13)
    x = (torch.randn(2, 8, 5, 6, generator=g) * 3 + 1).to(dtype)
    w, b = torch.randn(8, generator=g).to(dtype), torch.randn(8, generator=g).to(dtype)
    gy = _layout(torch.randn(2, 8, 5, 6, generator=g).to(dtype), layout)
    res = []
    for dev in ("cpu", DEV):
        ts = [_layout(x, layout).to(dev).requires_grad_(), w.to(dev).requires_grad_(), b.to(dev).requires_grad_()]
        y = F.group_norm(ts[0], 4, ts[1], ts[2])
        res.append([y, *torch.autograd.grad(y, ts, gy.to(dev))])
    for d, c in zip(res[1], res[0]):
        assert d.dtype == c.dtype
        torch.testing.assert_close(d.float().cpu(), c.float(), rtol=2e-2, atol=2e-2 if dtype == torch.bfloat16 else 5e-3)


def test_group_norm_noncontiguous_views():
    """A sliced (every other column), an expanded-batch and a permuted input: the kernels read any strides."""
    g = _gen(14)
    base = torch.randn(3, 6, 5, 10, generator=g)
    w, b = torch.randn(6, generator=g), torch.randn(6, generator=g)
    views = [lambda t: t[:, :, :, ::2], lambda t: t[:1].expand(3, 6, 5, 10), lambda t: t.permute(0, 1, 3, 2)]
    for view in views:
        xc = view(base)
        xd = view(base.to(DEV))
        assert xd.stride() == xc.stride()
        yc, yd = F.group_norm(xc, 3, w, b), F.group_norm(xd, 3, w.to(DEV), b.to(DEV))
        torch.testing.assert_close(yd.cpu(), yc, rtol=1e-4, atol=1e-4)
        gy = torch.randn(yc.shape, generator=g)
        xr = view(base.clone().requires_grad_())
        xq = view(base.to(DEV).requires_grad_())
        (gc,) = torch.autograd.grad(F.group_norm(xr, 3, w, b), xr, gy)
        (gd,) = torch.autograd.grad(F.group_norm(xq, 3, w.to(DEV), b.to(DEV)), xq, gy.to(DEV))
        torch.testing.assert_close(gd.cpu(), gc, rtol=1e-4, atol=1e-4)


def test_group_norm_nan_inf_propagation():
    """A NaN or inf makes its own group (and that group's gradients) NaN as on the CPU; other groups are untouched."""
    g = _gen(15)
    x = torch.randn(2, 6, 4, 4, generator=g)
    x[0, 1, 2, 3] = float("nan")
    x[1, 5, 0, 0] = float("-inf")
    w, b = torch.randn(6, generator=g), torch.randn(6, generator=g)
    gy = torch.randn(2, 6, 4, 4, generator=g)
    gy[1, 0, 1, 1] = float("nan")
    res = []
    for dev in ("cpu", DEV):
        ts = [t.to(dev).requires_grad_() for t in (x, w, b)]
        y = F.group_norm(ts[0], 3, ts[1], ts[2])
        res.append([y, *torch.autograd.grad(y, ts, gy.to(dev))])
    for d, c in zip(res[1], res[0]):
        torch.testing.assert_close(d.cpu(), c, rtol=1e-4, atol=1e-4, equal_nan=True)
    assert torch.isfinite(res[1][0][0, 2:].cpu()).all()  # group 1 of sample 0 is finite


def test_group_norm_new_batch_sizes_and_one():
    """Eager size templates (shape families) over the batch size, N = 1 included: each size matches the CPU."""
    g = _gen(16)
    w, b = torch.randn(12, generator=g), torch.randn(12, generator=g)
    for n in (4, 1, 5, 2, 7, 3, 6, 1, 9):
        x = torch.randn(n, 12, 3, 5, generator=g)
        gy = torch.randn(n, 12, 3, 5, generator=g)
        res = []
        for dev in ("cpu", DEV):
            ts = [t.to(dev).requires_grad_() for t in (x, w, b)]
            y = F.group_norm(ts[0], 4, ts[1], ts[2])
            res.append([y, *torch.autograd.grad(y, ts, gy.to(dev))])
        for d, c in zip(res[1], res[0]):
            torch.testing.assert_close(d.cpu(), c, rtol=1e-4, atol=1e-4)


def test_group_norm_compiled_matches_cpu():
    """torch.compile(backend="tpu"): AOTAutograd's graphs keep native_group_norm / native_group_norm_backward,
    which lower to the same targets; a conv + GroupNorm + SiLU block's forward and gradients match the CPU."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.GroupNorm(4, 8), torch.nn.SiLU())
    mod = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.GroupNorm(4, 8), torch.nn.SiLU()).to(DEV)
    mod.load_state_dict(ref.state_dict())
    f = torch.compile(mod, backend="tpu")
    x = torch.randn(3, 4, 7, 5, generator=_gen(17))
    yc = ref(x)
    yc.square().sum().backward()
    yd = f(x.to(DEV))
    yd.square().sum().backward()
    torch.testing.assert_close(yd.cpu(), yc, rtol=1e-4, atol=1e-4)
    for pd, pc in zip(mod.parameters(), ref.parameters()):
        torch.testing.assert_close(pd.grad.cpu(), pc.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_group_norm_stablehlo_oracle(dtype):
    """The four targets print as StableHLO that jax's XLA runs to the host kernels' results (forward with and
    without affine, d x alone, all gradients)."""
    pytest.importorskip("jax", reason="jax/jaxlib is the StableHLO oracle (installed by `make venv`)")
    from stablehlo_oracle import check_records, recorded
    g = _gen(18)
    x = (torch.randn(2, 6, 5, 3, generator=g) * 2 + 1).to(dtype).to(DEV)
    w, b = torch.randn(6, generator=g).to(dtype).to(DEV), torch.randn(6, generator=g).to(dtype).to(DEV)
    gy = torch.randn(2, 6, 5, 3, generator=g).to(dtype).to(DEV)
    with recorded() as recs:
        F.group_norm(x, 3)
        xr = x.clone().requires_grad_()
        torch.autograd.grad(F.group_norm(xr, 3, w, b), xr, gy)
        ts = [t.clone().requires_grad_() for t in (x, w, b)]
        torch.autograd.grad(F.group_norm(ts[0], 2, ts[1], ts[2]), ts, gy)
    names = [r["op"] for r in recs]
    assert any("native_group_norm_backward" in n for n in names), names
    check_records(recs)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_group_norm_f32_rstd_rounds_like_cpu(layout):
    """PyTorch CPU computes an f32 rstd as 1 / sqrt(var + eps) with var a float and eps a double: the sqrt
    and the divide in f64, rounded to f32 once. Our variance is summed in f64 (CPU's f32 sums differ in the
    last bits), so check the formula on our variance's f32 rounding: every rstd equals it bit for bit,
    which an all-f32 1 / sqrtf(var + eps) misses for about a quarter of the values."""
    g = _gen(11)
    n_old = n = 0
    for shape, groups in [((4, 32, 8, 8), 8), ((3, 12, 5, 7), 4), ((2, 64, 16, 16), 32)]:
        for scale in (1.0, 1e-3, 100.0):
            x = _layout(torch.randn(shape, generator=g) * scale + 0.3, layout)
            N, C = shape[:2]
            _, _, rstd = torch.ops.aten.native_group_norm(x.to(DEV), None, None, N, C, x[0, 0].numel(), groups, 1e-5)
            var = x.double().reshape(N, groups, -1).var(-1, unbiased=False).float()
            want = (1.0 / torch.sqrt(var.double() + 1e-5)).float()
            torch.testing.assert_close(rstd.cpu(), want, rtol=0, atol=0)
            n_old += (rstd.cpu() != 1.0 / torch.sqrt(var + torch.tensor(1e-5, dtype=torch.float32))).sum().item()
            n += want.numel()
    assert n_old > n // 10  # the two formulas really differ on these inputs
