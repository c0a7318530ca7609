"""F.group_norm under torch.autocast("tpu") on bf16 / f16 inputs (csrc/glue/amp_group_norm.cpp): CUDA's fp32
policy (computes and returns float32) through torch_tpu::group_norm_f32, which reads the low-precision input
as it is and saves it for backward instead of an f32 copy. Checked bit for bit against the old path
(group_norm on x.float() on tpu: what CUDA's cast-up policy ran) in strict eager, fused eager and compiled
mode, against PyTorch CPU's f32 group_norm on the widened input, with odd shapes, layouts, no affine,
double backward; the saved tensors and the memory kept for backward; the StableHLO printer (jax's XLA)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

DEV = "tpu"
LOWP = [torch.bfloat16, torch.float16]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "channels_last":
        return x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    if layout == "transposed":  # last two dims swapped in memory
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "sliced":  # every other element of the last dim: not dense
        return torch.cat([x, x], -1)[..., ::2]
    return x


def _inputs(shape, groups, affine, dtype, layout, seed):
    g = _gen(seed)
    C = shape[1]
    x = _layout((torch.randn(shape, generator=g) * 3 + 1).to(dtype), layout)
    w = torch.randn(C, generator=g) if affine in ("both", "weight") else None
    b = torch.randn(C, generator=g) if affine in ("both", "bias") else None
    gy = torch.randn(shape, generator=g)
    return x, w, b, gy


def _run(x, groups, w, b, gy, amp: bool, dtype):
    """(y, dx, dw, db) on tpu: amp=True under autocast (the new path), else group_norm on x.float() (the old)."""
    xd = x.to(DEV).requires_grad_()
    wd = w.to(DEV).requires_grad_() if w is not None else None
    bd = b.to(DEV).requires_grad_() if b is not None else None
    if amp:
        with torch.autocast(DEV, dtype=dtype):
            y = F.group_norm(xd, groups, wd, bd, eps=1e-5)
    else:
        y = F.group_norm(xd.float(), groups, wd, bd, eps=1e-5)
    y.backward(gy.to(DEV))
    return [y, xd.grad] + [t.grad for t in (wd, bd) if t is not None]


CASES = [  # shape, groups, layout
    ((3, 6, 11), 3, "contiguous"), ((3, 6, 11), 2, "transposed"), ((2, 6, 5, 7), 3, "contiguous"),
    ((2, 6, 5, 7), 6, "channels_last"), ((2, 6, 5, 7), 1, "transposed"), ((2, 6, 5, 7), 2, "sliced"),
    ((2, 12, 3, 4, 5), 4, "channels_last"), ((2, 10, 3, 4, 5), 5, "contiguous"), ((1, 7, 1, 2), 7, "contiguous"),
    ((5, 4, 17, 3), 2, "channels_last"), ((4, 32, 9, 9), 8, "contiguous"),
]


@pytest.mark.parametrize("dtype", LOWP, ids=["bf16", "f16"])
@pytest.mark.parametrize("affine", ["both", "none", "weight", "bias"])
@pytest.mark.parametrize("shape,groups,layout", CASES)
def test_bits_as_old_path_and_close_to_cpu(shape, groups, layout, affine, dtype):
    x, w, b, gy = _inputs(shape, groups, affine, dtype, layout, seed=sum(shape) + groups)
    new = _run(x, groups, w, b, gy, True, dtype)
    old = _run(x, groups, w, b, gy, False, dtype)
    assert new[0].dtype == torch.float32 and new[1].dtype == dtype
    assert new[0].shape == x.shape and new[1].shape == x.shape
    for n, o in zip(new, old):
        assert n.dtype == o.dtype and n.shape == o.shape
        assert torch.equal(n.cpu(), o.cpu())
    assert new[0].stride() == old[0].stride()
    # PyTorch CPU's f32 group norm on the widened input (CPU's f32 sums differ from ours in the last bits);
    # CPU's backward with a bias and no weight fails ("tensor does not have a device"): a weight of ones there
    xc = x.float().requires_grad_()
    wc = w.clone().requires_grad_() if w is not None else torch.ones(shape[1]) if b is not None else None
    bc = b.clone().requires_grad_() if b is not None else None
    yc = F.group_norm(xc, groups, wc, bc, eps=1e-5)
    yc.backward(gy)
    torch.testing.assert_close(new[0].cpu(), yc, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(new[1].cpu(), xc.grad.to(dtype), rtol=2e-2, atol=2e-2)
    for d, c in zip(new[2:], [t.grad for t in (wc if w is not None else None, bc) if t is not None]):
        torch.testing.assert_close(d.cpu(), c, rtol=1e-4, atol=1e-4)


def test_low_precision_weight_and_bias():
    """bf16 weight / bias are cast to f32 by autocast as before (their gradients come back in bf16)."""
    x, w, b, gy = _inputs((2, 6, 5, 7), 3, "both", torch.bfloat16, "contiguous", seed=3)
    w, b = w.to(torch.bfloat16), b.to(torch.bfloat16)
    new = _run(x, 3, w, b, gy, True, torch.bfloat16)
    old = _run(x, 3, w.float(), b.float(), gy, False, torch.bfloat16)  # the cast's gradient: below
    assert new[2].dtype == torch.bfloat16 and new[3].dtype == torch.bfloat16
    for n, o in zip(new[:2], old[:2]):
        assert torch.equal(n.cpu(), o.cpu())
    for n, o in zip(new[2:], old[2:]):
        assert torch.equal(n.cpu(), o.to(torch.bfloat16).cpu())


def _saved_by_group_norm(x, w, b, dtype):
    saved = []

    def pack(t):
        saved.append((t.dtype, tuple(t.shape)))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast(DEV, dtype=dtype):
        y = F.group_norm(x, 3, w, b)
    return y, saved


@pytest.mark.parametrize("dtype", LOWP, ids=["bf16", "f16"])
def test_saved_tensors_are_low_precision(dtype):
    x = torch.randn(2, 6, 8, 8, generator=_gen(4)).to(dtype).to(DEV).requires_grad_()
    w = torch.randn(6, device=DEV, requires_grad=True)
    b = torch.randn(6, device=DEV, requires_grad=True)
    y, saved = _saved_by_group_norm(x, w, b, dtype)
    assert y.dtype == torch.float32
    assert (dtype, tuple(x.shape)) in saved, saved
    assert all(not (dt == torch.float32 and shape == tuple(x.shape)) for dt, shape in saved), saved


@pytest.mark.parametrize("dtype", LOWP, ids=["bf16", "f16"])
def test_memory_kept_for_backward(dtype):
    """Device memory held after the forward: the f32 output (and [N, G] statistics), no f32 input copy
    (the old path kept one: 4 bytes an element more)."""
    n = 2 * 32 * 32 * 32
    x = torch.randn(2, 32, 32, 32, generator=_gen(5)).to(dtype).to(DEV).requires_grad_()
    w = torch.randn(32, device=DEV, requires_grad=True)
    b = torch.randn(32, device=DEV, requires_grad=True)
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    with torch.autocast(DEV, dtype=dtype):
        y = F.group_norm(x, 8, w, b)
    torch.tpu.synchronize()
    kept = torch.tpu.memory_allocated() - base
    assert 4 * n <= kept < 4 * n + 64 * 1024, kept
    y.backward(torch.ones_like(y))
    assert x.grad.dtype == dtype
    del y
    old = F.group_norm(x.detach().requires_grad_().float(), 8, w, b)
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() - base - x.grad.numel() * x.grad.element_size() >= 8 * n  # y + f32 copy
    del old


def test_policy_unchanged_elsewhere():
    """f32 / f64 tpu inputs, CPU inputs under CPU autocast and autocast disabled behave as before."""
    g = _gen(6)
    x = torch.randn(2, 6, 5, generator=g)
    w, b = torch.randn(6, generator=g), torch.randn(6, generator=g)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        y32 = F.group_norm(x.to(DEV), 3, w.to(DEV), b.to(DEV))
        y64 = F.group_norm(x.double().to(DEV), 3, w.double().to(DEV), b.double().to(DEV))
    assert y32.dtype == torch.float32 and y64.dtype == torch.float64
    assert torch.equal(y32.cpu(), F.group_norm(x.to(DEV), 3, w.to(DEV), b.to(DEV)).cpu())
    torch.testing.assert_close(y64.cpu(), F.group_norm(x.double(), 3, w.double(), b.double()))
    yd = F.group_norm(x.to(torch.bfloat16).to(DEV), 3)  # no autocast: bf16 in, bf16 out
    assert yd.dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert F.group_norm(x.to(torch.bfloat16), 3).dtype == torch.bfloat16  # CPU's own policy


def test_errors_as_pytorch():
    x = torch.randn(2, 6, 5).to(torch.bfloat16)
    for args in [(4,), (0,), (3, torch.randn(5)), (3, None, torch.randn(7))]:  # torch.group_norm: no Python checks
        with pytest.raises(RuntimeError) as cpu_err:
            torch.group_norm(x.float(), *args)
        dargs = [a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args]
        with pytest.raises(RuntimeError) as tpu_err, torch.autocast(DEV, dtype=torch.bfloat16):
            torch.group_norm(x.to(DEV), *dargs)
        # (for a wrong bias, PyTorch's message prints the weight's shape: ours the bias's)
        assert str(tpu_err.value).split(" but got")[0] == str(cpu_err.value).split(" but got")[0]


@pytest.mark.parametrize("dtype", LOWP, ids=["bf16", "f16"])
def test_double_backward(dtype):
    """create_graph=True (a gradient penalty): the gradients of the gradients equal the old path's."""
    x, w, b, gy = _inputs((2, 6, 5, 3), 3, "both", dtype, "contiguous", seed=7)
    res = []
    for amp in (True, False):
        xd, wd, bd = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_(), b.to(DEV).requires_grad_()
        if amp:
            with torch.autocast(DEV, dtype=dtype):
                y = F.group_norm(xd, 3, wd, bd)
        else:
            y = F.group_norm(xd.float(), 3, wd, bd)
        gx, gw = torch.autograd.grad(y, (xd, wd), gy.to(DEV), create_graph=True)
        (gx.float().square().sum() + gw.square().sum()).backward()
        res.append([gx, gw, xd.grad, wd.grad])
    for n, o in zip(*res):
        assert n.dtype == o.dtype
        torch.testing.assert_close(n.cpu(), o.cpu(), rtol=1e-5, atol=1e-5)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.gn = torch.nn.GroupNorm(4, 8)
        self.conv2 = torch.nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        with torch.autocast(DEV, dtype=torch.bfloat16):
            return self.conv2(F.silu(self.gn(self.conv1(x)))).float().square().mean()


def _block_grads(mod, f, x):
    mod.zero_grad(set_to_none=True)
    loss = f(x)
    loss.backward()
    return [loss] + [p.grad for p in mod.parameters()]


def test_compiled_and_fused_eager_bits_as_strict_eager():
    torch.manual_seed(0)
    mod = _Block().to(DEV)
    x = torch.randn(3, 4, 7, 5, generator=_gen(8)).to(DEV)
    eager = _block_grads(mod, mod, x)
    with torch_tpu.fused_eager():
        fused = _block_grads(mod, mod, x)
    compiled = _block_grads(mod, torch.compile(mod, backend="tpu"), x)
    for e, f, c in zip(eager, fused, compiled):
        assert torch.equal(e.cpu(), f.cpu())
        assert torch.equal(e.cpu(), c.cpu())


def test_aot_graphs_use_the_op():
    """AOTAutograd's forward graph calls torch_tpu.group_norm_f32 on the bf16 tensor (no f32 copy of it) and
    its backward torch_tpu.group_norm_f32_backward; dynamic batch sizes trace through the Meta kernels."""
    from functorch.compile import aot_module, make_boxed_func

    graphs = []

    def keep(gm, _inputs):
        graphs.append(gm)
        return make_boxed_func(gm)

    torch.manual_seed(0)
    mod = _Block().to(DEV)
    f = aot_module(mod, fw_compiler=keep, bw_compiler=keep)
    f(torch.randn(3, 4, 7, 5, device=DEV)).backward()
    fw, bw = (str(g.code) for g in graphs[:2])
    assert "torch_tpu.group_norm_f32.default" in fw and "native_group_norm" not in fw, fw
    assert "torch_tpu.group_norm_f32_backward.default" in bw, bw
    torch._dynamo.reset()  # an earlier test compiled _Block.forward for static sizes
    dyn = torch.compile(_Block().to(DEV), backend="tpu", dynamic=True)
    torch_tpu.reset_metrics()
    for n in (2, 5, 7):
        dyn(torch.randn(n, 4, 6, 3, device=DEV)).backward()
        frames = torch_tpu.metrics()["compile_frames"] if n == 2 else frames
    m = torch_tpu.metrics()  # Dynamo compiled the frame at the first batch size only
    assert m["compile_recompiles"] == 0 and m["compile_frames"] == frames, torch_tpu.recompile_reasons()


def test_stablehlo_oracle():
    """The lowerings (convert + group-norm targets, d input rounded to bf16) print as StableHLO that jax's XLA
    runs to the host's results."""
    pytest.importorskip("jax", reason="jax/jaxlib is the StableHLO oracle (installed by `make venv`)")
    from stablehlo_oracle import check_records, recorded
    x, w, b, gy = _inputs((2, 6, 5, 3), 3, "both", torch.bfloat16, "contiguous", seed=9)
    with recorded() as recs:
        _run(x, 3, w, b, gy, True, torch.bfloat16)
        _run(_layout(x, "channels_last"), 2, None, None, gy, True, torch.bfloat16)
    names = [r["op"] for r in recs]
    assert any("group_norm_f32_backward" in n for n in names), names
    check_records(recs)


def test_forward_ad_takes_the_old_path():
    """GroupNormF32 has no jvp: dual inputs (forward_ad, torch.func.jvp) keep CUDA's cast-up path, whose
    native_group_norm has a forward derivative; primal and tangent equal group_norm on x.float()."""
    import torch.autograd.forward_ad as fwAD

    x, w, b, _ = _inputs((2, 6, 5), 3, "both", torch.bfloat16, "contiguous", seed=21)
    t = torch.randn(x.shape, generator=_gen(22)).to(torch.bfloat16)
    xd, td, wd, bd = (v.to(DEV) for v in (x, t, w, b))
    with fwAD.dual_level():
        with torch.autocast(DEV, dtype=torch.bfloat16):
            y, dy = fwAD.unpack_dual(F.group_norm(fwAD.make_dual(xd, td), 3, wd, bd))
        y0, dy0 = fwAD.unpack_dual(F.group_norm(fwAD.make_dual(xd.float(), td.float()), 3, wd, bd))
    assert y.dtype == torch.float32 and torch.equal(y.cpu(), y0.cpu()) and torch.equal(dy.cpu(), dy0.cpu())

    def amp_gn(v):
        with torch.autocast(DEV, dtype=torch.bfloat16):
            return F.group_norm(v, 3, wd, bd)

    y1, dy1 = torch.func.jvp(amp_gn, (xd,), (td,))  # functorch's jvp: compared with its own old path
    y2, dy2 = torch.func.jvp(lambda v: F.group_norm(v.float(), 3, wd, bd), (xd,), (td,))
    assert torch.equal(y1.cpu(), y2.cpu()) and torch.equal(dy1.cpu(), dy2.cpu())


def test_cpu_tensor_under_tpu_autocast():
    """tpu autocast does not touch CPU tensors: CPU group_norm on bf16 stays bf16 (no autocast on CPU)."""
    x = torch.randn(2, 6, 5, generator=_gen(23)).to(torch.bfloat16)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        y = F.group_norm(x, 3)
    assert y.dtype == torch.bfloat16 and torch.equal(y, F.group_norm(x, 3))
