"""Normalization, pooling and upsampling ops on tpu vs PyTorch CPU (forward and backward)."""
import pytest
import torch
import torch.nn.functional as F

DEV = "tpu"
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def _tol(dtype):
    if dtype == torch.bfloat16:
        return dict(atol=2e-2, rtol=2e-2)
    if dtype == torch.float16:
        return dict(atol=2e-3, rtol=2e-3)
    if dtype == torch.float32:
        return dict(atol=2e-5, rtol=2e-5)
    return dict(atol=1e-10, rtol=1e-10)


def _rand(shape, dtype, seed=0, channels_last=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    return x


def _check(fn, inputs, dtype, grad=True, tol=None, seed=1):
    """Runs fn on CPU and tpu copies of inputs; compares outputs and input gradients."""
    tol = tol or _tol(dtype)
    cpu = [t.detach().clone().requires_grad_(grad and t.is_floating_point()) for t in inputs]
    dev = [t.detach().to(DEV).requires_grad_(grad and t.is_floating_point()) for t in inputs]
    # keep the memory format of the inputs on the device
    for c, d in zip(cpu, dev):
        if c.dim() == 4 and c.is_contiguous(memory_format=torch.channels_last):
            assert d.is_contiguous(memory_format=torch.channels_last)
    oc, od = fn(*cpu), fn(*dev)
    if not isinstance(oc, tuple):
        oc, od = (oc,), (od,)
    for a, b in zip(oc, od):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(b.cpu(), a, **tol)
    if grad:
        gs = [_rand(a.shape, a.dtype, seed=seed + k) for k, a in enumerate(oc) if a.is_floating_point()]
        fouts = [a for a in oc if a.is_floating_point()]
        douts = [b for b in od if b.is_floating_point()]
        torch.autograd.backward(fouts, gs)
        torch.autograd.backward(douts, [g.to(DEV) for g in gs])
        for c, d in zip(cpu, dev):
            if c.grad is not None:
                torch.testing.assert_close(d.grad.cpu(), c.grad, **tol)
    return oc, od


# ---------------------------------------------------------------- batch norm

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 5, 7), (3, 2, 2, 3, 4)])
def test_batch_norm_train_affine(dtype, shape):
    C = shape[1]
    x = _rand(shape, dtype)
    w, b = _rand((C,), dtype, 2), _rand((C,), dtype, 3)
    _check(lambda x, w, b: F.batch_norm(x, None, None, w, b, True, 0.1, 1e-5), [x, w, b], dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("channels_last", [False, True])
def test_batch_norm_module_running_stats(dtype, channels_last):
    torch.manual_seed(0)
    m_cpu = torch.nn.BatchNorm2d(3, dtype=dtype)
    m_dev = torch.nn.BatchNorm2d(3, dtype=dtype).to(DEV)
    m_dev.load_state_dict(m_cpu.state_dict())
    tol = _tol(dtype)
    for step in range(3):
        x = _rand((4, 3, 5, 6), dtype, seed=step, channels_last=channels_last)
        xc, xd = x.clone().requires_grad_(), x.to(DEV).requires_grad_()
        yc, yd = m_cpu(xc), m_dev(xd)
        torch.testing.assert_close(yd.cpu(), yc, **tol)
        g = _rand(yc.shape, dtype, seed=10 + step)
        yc.backward(g)
        yd.backward(g.to(DEV))
        torch.testing.assert_close(xd.grad.cpu(), xc.grad, **tol)
    torch.testing.assert_close(m_dev.running_mean.cpu(), m_cpu.running_mean, **tol)
    torch.testing.assert_close(m_dev.running_var.cpu(), m_cpu.running_var, **tol)
    assert int(m_dev.num_batches_tracked.cpu()) == int(m_cpu.num_batches_tracked)
    torch.testing.assert_close(m_dev.weight.grad.cpu(), m_cpu.weight.grad, **tol)
    torch.testing.assert_close(m_dev.bias.grad.cpu(), m_cpu.bias.grad, **tol)
    # eval mode uses the running statistics
    m_cpu.eval()
    m_dev.eval()
    x = _rand((2, 3, 4, 4), dtype, seed=7)
    _check(lambda x: (m_cpu if x.device.type == "cpu" else m_dev)(x), [x], dtype)


def test_batch_norm_momentum_none_cumulative():
    m_cpu = torch.nn.BatchNorm1d(4, momentum=None)
    m_dev = torch.nn.BatchNorm1d(4, momentum=None).to(DEV)
    for step in range(3):
        x = _rand((6, 4), torch.float32, seed=step)
        m_cpu(x)
        m_dev(x.to(DEV))
    torch.testing.assert_close(m_dev.running_mean.cpu(), m_cpu.running_mean)
    torch.testing.assert_close(m_dev.running_var.cpu(), m_cpu.running_var)


@pytest.mark.parametrize("dtype", FLOATS)
def test_batch_norm_eval_functional(dtype):
    x = _rand((2, 3, 4, 5), dtype)
    rm, rv = _rand((3,), dtype, 4), _rand((3,), dtype, 5).abs() + 0.5
    w, b = _rand((3,), dtype, 2), _rand((3,), dtype, 3)
    _check(lambda x, w, b: F.batch_norm(x, rm.to(x.device), rv.to(x.device), w, b, False, 0.1, 1e-5), [x, w, b], dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_batch_norm_half_input_f32_module(dtype, channels_last):
    """bf16 / f16 activations through an f32 BatchNorm2d (the autocast pattern: the channel kernels read the
    half input as it is and write y / d_input in its dtype): forward, input and parameter gradients, running
    stats, eval mode, odd channel counts and maps."""
    for C, shape in [(5, (3, 5, 7, 9)), (16, (4, 16, 4, 4)), (3, (2, 3, 1, 13))]:
        torch.manual_seed(C)
        m_cpu = torch.nn.BatchNorm2d(C)
        with torch.no_grad():
            m_cpu.weight.uniform_(0.5, 1.5)
            m_cpu.bias.uniform_(-0.5, 0.5)
        m_dev = torch.nn.BatchNorm2d(C).to(DEV)
        m_dev.load_state_dict(m_cpu.state_dict())
        tol = _tol(dtype)
        for step in range(2):
            x = _rand(shape, dtype, seed=step, channels_last=channels_last)
            xc, xd = x.clone().requires_grad_(), x.to(DEV).requires_grad_()
            yc, yd = m_cpu(xc), m_dev(xd)
            assert yd.dtype == yc.dtype == dtype
            torch.testing.assert_close(yd.cpu(), yc, **tol)
            g = _rand(yc.shape, dtype, seed=10 + step, channels_last=channels_last)
            yc.backward(g)
            yd.backward(g.to(DEV))
            torch.testing.assert_close(xd.grad.cpu(), xc.grad, **tol)
        torch.testing.assert_close(m_dev.running_mean.cpu(), m_cpu.running_mean, **tol)
        torch.testing.assert_close(m_dev.running_var.cpu(), m_cpu.running_var, **tol)
        torch.testing.assert_close(m_dev.weight.grad.cpu(), m_cpu.weight.grad, **tol)
        torch.testing.assert_close(m_dev.bias.grad.cpu(), m_cpu.bias.grad, **tol)
        m_cpu.eval()
        m_dev.eval()
        x = _rand(shape, dtype, seed=7, channels_last=channels_last)
        torch.testing.assert_close(m_dev(x.to(DEV)).cpu(), m_cpu(x), **tol)


def test_batch_norm_bf16_module():
    m_cpu = torch.nn.BatchNorm2d(3).to(torch.bfloat16)
    m_dev = torch.nn.BatchNorm2d(3).to(torch.bfloat16).to(DEV)
    x = _rand((2, 3, 5, 5), torch.bfloat16)
    torch.testing.assert_close(m_dev(x.to(DEV)).cpu(), m_cpu(x), **_tol(torch.bfloat16))
    torch.testing.assert_close(m_dev.running_mean.cpu(), m_cpu.running_mean, **_tol(torch.bfloat16))
    torch.testing.assert_close(m_dev.running_var.cpu(), m_cpu.running_var, **_tol(torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_instance_norm(dtype):
    x = _rand((2, 3, 5, 4), dtype)
    w, b = _rand((3,), dtype, 2), _rand((3,), dtype, 3)
    _check(lambda x, w, b: F.instance_norm(x, weight=w, bias=b), [x, w, b], dtype)
    _check(lambda x: F.instance_norm(x), [x], dtype)


# Longer rows (the host's vectorized channel kernels), channels_last and sliced inputs, eval-mode
# backward, and weight/bias present or not, for batch norm and group norm.
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced"])
@pytest.mark.parametrize("affine", [True, False])
def test_norms_layouts(layout, affine):
    x = _rand((3, 12, 11, 13), torch.float32, channels_last=layout == "channels_last")
    if layout == "sliced":
        x = _rand((3, 24, 11, 26), torch.float32)[:, ::2, :, 1::2]
    w, b = (_rand((12,), torch.float32, 2), _rand((12,), torch.float32, 3)) if affine else (None, None)
    ins = [x] + ([w, b] if affine else [])
    bn = lambda x, w=None, b=None: F.batch_norm(x, None, None, w, b, True, 0.1, 1e-5)
    _check(bn, ins, torch.float32)
    rm, rv = _rand((12,), torch.float32, 4), _rand((12,), torch.float32, 5).abs() + 0.5
    _check(lambda x, w=None, b=None: F.batch_norm(x, rm.to(x.device), rv.to(x.device), w, b, False, 0.1, 1e-5),
           ins, torch.float32)
    if layout != "channels_last":  # group_norm of a channels_last tpu tensor fails in PyTorch's composite (a .view)
        _check(lambda x, w=None, b=None: F.group_norm(x, 4, w, b, 1e-5), ins, torch.float32)


# ---------------------------------------------------------------- group norm / rms norm

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,groups", [((2, 6, 5, 3), 3), ((3, 4, 7), 2), ((2, 4), 4), ((1, 6, 2, 3, 2), 1)])
def test_group_norm(dtype, shape, groups):
    C = shape[1]
    x = _rand(shape, dtype)
    w, b = _rand((C,), dtype, 2), _rand((C,), dtype, 3)
    _check(lambda x, w, b: F.group_norm(x, groups, w, b, 1e-5), [x, w, b], dtype)
    _check(lambda x: F.group_norm(x, groups), [x], dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm(dtype):
    x = _rand((3, 5, 6), dtype)
    w = _rand((6,), dtype, 2)
    _check(lambda x, w: F.rms_norm(x, (6,), w, 1e-6), [x, w], dtype)
    _check(lambda x: F.rms_norm(x, (5, 6)), [x], dtype)


# ---------------------------------------------------------------- max pooling

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kw", [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), ceil_mode=True),
    dict(kernel_size=2, stride=1, dilation=2),
    dict(kernel_size=3, stride=2, padding=1, dilation=(1, 2), ceil_mode=True),
])
def test_max_pool2d(dtype, kw):
    x = _rand((2, 3, 7, 9), dtype)
    oc, od = _check(lambda x: F.max_pool2d(x, return_indices=True, **kw), [x], dtype)
    assert torch.equal(od[1].cpu(), oc[1])


@pytest.mark.parametrize("channels_last", [False, True])
def test_max_pool2d_layouts(channels_last):
    x = _rand((2, 4, 6, 5), torch.float32, channels_last=channels_last)
    _check(lambda x: F.max_pool2d(x, 3, 2, 1), [x], torch.float32)
    x3 = _rand((3, 6, 5), torch.float32)  # unbatched
    _check(lambda x: F.max_pool2d(x, 2, ceil_mode=True), [x3], torch.float32)
    xt = _rand((2, 3, 5, 6), torch.float32).transpose(2, 3)  # non-contiguous
    _check(lambda x: F.max_pool2d(x, 2), [xt], torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_max_pool1d_3d(dtype):
    x1 = _rand((2, 3, 11), dtype)
    oc, od = _check(lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True), [x1], dtype)
    assert torch.equal(od[1].cpu(), oc[1])
    _check(lambda x: F.max_pool1d(x, 2, ceil_mode=True), [x1], dtype)
    x3 = _rand((2, 2, 5, 6, 7), dtype)
    oc, od = _check(lambda x: F.max_pool3d(x, 3, 2, 1, return_indices=True), [x3], dtype)
    assert torch.equal(od[1].cpu(), oc[1])
    _check(lambda x: F.max_pool3d(x, (2, 3, 2), ceil_mode=True), [x3], dtype)


def test_max_pool2d_nan_and_ties():
    x = torch.zeros(1, 1, 4, 4)
    x[0, 0, 1, 1] = float("nan")
    oc = F.max_pool2d(x, 2)
    od = F.max_pool2d(x.to(DEV), 2)
    torch.testing.assert_close(od.cpu(), oc, equal_nan=True)
    y = torch.ones(1, 2, 4, 4)  # ties: first position
    oc, ic = F.max_pool2d(y, 2, return_indices=True)
    od, idd = F.max_pool2d(y.to(DEV), 2, return_indices=True)
    assert torch.equal(idd.cpu(), ic)


# ---------------------------------------------------------------- average pooling

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kw", [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=2, stride=1, divisor_override=3),
])
def test_avg_pool2d(dtype, kw):
    x = _rand((2, 3, 7, 8), dtype)
    _check(lambda x: F.avg_pool2d(x, **kw), [x], dtype)


def test_avg_pool_layouts_and_1d():
    x = _rand((2, 4, 6, 5), torch.float32, channels_last=True)
    _check(lambda x: F.avg_pool2d(x, 3, 2, 1), [x], torch.float32)
    _check(lambda x: F.avg_pool2d(x, 2), [_rand((3, 6, 5), torch.float32)], torch.float32)
    _check(lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True), [_rand((2, 3, 10), torch.float32)], torch.float32)


# ---------------------------------------------------------------- adaptive pooling

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("size,out", [((7, 9), (3, 4)), ((5, 5), 1), ((4, 6), (4, 6)), ((3, 5), (5, 7)), ((6, 8), (2, 4))])
def test_adaptive_avg_pool2d(dtype, size, out):
    x = _rand((2, 3) + size, dtype)
    _check(lambda x: F.adaptive_avg_pool2d(x, out), [x], dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("size,out", [((7, 9), (3, 4)), ((5, 5), 1), ((3, 5), (5, 7)), ((6, 8), (2, 4))])
def test_adaptive_max_pool2d(dtype, size, out):
    x = _rand((2, 3) + size, dtype)
    oc, od = _check(lambda x: F.adaptive_max_pool2d(x, out, return_indices=True), [x], dtype)
    assert torch.equal(od[1].cpu(), oc[1])


def test_adaptive_pool_layouts():
    x = _rand((2, 4, 7, 6), torch.float32, channels_last=True)
    _check(lambda x: F.adaptive_avg_pool2d(x, (3, 2)), [x], torch.float32)
    _check(lambda x: F.adaptive_max_pool2d(x, (3, 2)), [x], torch.float32)
    _check(lambda x: F.adaptive_avg_pool2d(x, (2, 3)), [_rand((3, 5, 7), torch.float32)], torch.float32)


# ---------------------------------------------------------------- upsampling

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kw", [
    dict(scale_factor=2),
    dict(scale_factor=(1.5, 2.5)),
    dict(size=(7, 5)),
    dict(size=(3, 2)),
    dict(scale_factor=0.5),
])
def test_upsample_nearest(dtype, kw):
    x = _rand((2, 3, 5, 4), dtype)
    _check(lambda x: F.interpolate(x, mode="nearest", **kw), [x], dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("kw", [
    dict(scale_factor=2),
    dict(scale_factor=(1.5, 2.5)),
    dict(size=(7, 5)),
    dict(size=(3, 2)),
    dict(size=(1, 1)),
])
def test_upsample_bilinear(dtype, align_corners, kw):
    x = _rand((2, 3, 5, 4), dtype)
    _check(lambda x: F.interpolate(x, mode="bilinear", align_corners=align_corners, **kw), [x], dtype)


def test_upsample_layouts():
    x = _rand((2, 4, 5, 6), torch.float32, channels_last=True)
    _check(lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), [x], torch.float32)
    _check(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), [x], torch.float32)
    _check(lambda x: F.interpolate(x, size=(9, 4), mode="bilinear", align_corners=True), [x], torch.float32)
    m = torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
    xt = _rand((2, 3, 4, 5), torch.float32).transpose(2, 3)
    _check(m, [xt], torch.float32)


def test_recompute_scale_factor():
    x = _rand((1, 2, 5, 7), torch.float32)
    _check(lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear", recompute_scale_factor=True), [x], torch.float32)
    _check(lambda x: F.interpolate(x, scale_factor=1.7, mode="nearest", recompute_scale_factor=True), [x], torch.float32)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(scale_factor=1.7), dict(size=7), dict(size=3)])
def test_upsample_1d(dtype, kw):
    x = _rand((2, 3, 5), dtype)
    _check(lambda x: F.interpolate(x, mode="nearest", **kw), [x], dtype)
    _check(lambda x: F.interpolate(x, mode="nearest-exact", **kw), [x], dtype)
    _check(lambda x: F.interpolate(x, mode="linear", **kw), [x], dtype)
    _check(lambda x: F.interpolate(x, mode="linear", align_corners=True, **kw), [x], dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(scale_factor=(1.5, 0.7)), dict(size=(7, 3))])
def test_upsample_nearest_exact2d(dtype, kw):
    x = _rand((2, 3, 5, 4), dtype)
    _check(lambda x: F.interpolate(x, mode="nearest-exact", **kw), [x], dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])  # CPU has no bf16 avg_pool3d
def test_pool3d_avg_and_adaptive(dtype):
    x = _rand((2, 2, 5, 6, 7), dtype)
    _check(lambda x: F.avg_pool3d(x, 2), [x], dtype)
    _check(lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), [x], dtype)
    _check(lambda x: F.avg_pool3d(x, (3, 2, 3), (2, 1, 2), (1, 0, 1), divisor_override=5), [x], dtype)
    _check(lambda x: F.adaptive_avg_pool3d(x, (2, 4, 3)), [x], dtype)
    oc, od = _check(lambda x: F.adaptive_max_pool3d(x, (3, 2, 4), return_indices=True), [x], dtype)
    assert torch.equal(od[1].cpu(), oc[1])


def test_empty_batch():
    x = torch.randn(0, 3, 6, 5)  # (max_pool2d: PyTorch's meta decomposition rejects an empty batch)
    _check(lambda x: F.avg_pool2d(x, 2), [x], torch.float32)
    _check(lambda x: F.adaptive_avg_pool2d(x, (2, 3)), [x], torch.float32)
    _check(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), [x], torch.float32)
    _check(lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), [x], torch.float32)


def test_small_unet_block_training_step():
    """conv + BatchNorm + ReLU + max pool + bilinear upsample + GroupNorm: a train step matches CPU."""
    if not torch_tpu_supports("aten::convolution_overrideable"):
        pytest.skip("needs aten::convolution_overrideable (not lowered yet)")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.gn = torch.nn.GroupNorm(2, 8)
            self.head = torch.nn.Conv2d(16, 2, 1)

        def forward(self, x):
            a = F.relu(self.bn(self.c1(x)))
            b = F.relu(self.gn(self.c2(F.max_pool2d(a, 2))))
            b = F.interpolate(b, scale_factor=2, mode="bilinear", align_corners=False)
            return self.head(torch.cat([a, b], 1))

    torch.manual_seed(0)
    m_cpu = Block().double()
    m_dev = Block().double()
    m_dev.load_state_dict(m_cpu.state_dict())
    m_dev = m_dev.to(DEV)
    x = _rand((2, 3, 8, 10), torch.float64)
    for m, xx in ((m_cpu, x), (m_dev, x.to(DEV))):
        m(xx).square().mean().backward()
    for (n, p_c), p_d in zip(m_cpu.named_parameters(), m_dev.parameters()):
        torch.testing.assert_close(p_d.grad.cpu(), p_c.grad, atol=1e-9, rtol=1e-7, msg=n)
    torch.testing.assert_close(m_dev.bn.running_var.cpu(), m_cpu.bn.running_var)


def torch_tpu_supports(name):
    import torch_tpu
    return torch_tpu._C._op_supported(name)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_aten_overloads(training):
    """_native_batch_norm_legit (+no_stats), _batch_norm_with_update, batch_norm_backward vs CPU."""
    aten = torch.ops.aten
    x = _rand((3, 4, 5, 2), torch.float64)
    w, b = _rand((4,), torch.float64, 1), _rand((4,), torch.float64, 2)
    rm, rv = _rand((4,), torch.float64, 3), _rand((4,), torch.float64, 4).abs() + 0.5

    def run(dev):
        t = [v.clone().to(dev) for v in (x, w, b, rm, rv)]
        outs = list(aten._native_batch_norm_legit(t[0], t[1], t[2], t[3], t[4], training, 0.2, 1e-5)) + [t[3], t[4]]
        if not training:  # eval-mode save_mean/save_rstd: the meta function's shape differs from CPU's (empty)
            outs = outs[:1] + outs[3:]
        if training:
            outs += list(aten._native_batch_norm_legit.no_stats(t[0], t[1], t[2], True, 0.2, 1e-5))
            rm2, rv2 = t[3].clone(), t[4].clone()
            y, sm, sv, reserve = aten._batch_norm_with_update(t[0], t[1], t[2], rm2, rv2, 0.3, 1e-5)
            outs += [y, sm, sv, rm2, rv2]
            g = torch.ones_like(y) * 0.5 + t[0]
            outs += list(aten.batch_norm_backward(g, t[0], t[1], rm2, rv2, sm, sv, True, 1e-5, [True, True, True], reserve))
        return [o.cpu() for o in outs]

    for a, b_ in zip(run("cpu"), run(DEV)):
        torch.testing.assert_close(b_, a, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(scale_factor=(1.5, 0.7, 2.2)), dict(size=(3, 5, 4))])
def test_upsample_3d(dtype, kw):
    x = _rand((2, 2, 3, 4, 5), dtype)
    _check(lambda x: F.interpolate(x, mode="nearest", **kw), [x], dtype)
    _check(lambda x: F.interpolate(x, mode="nearest-exact", **kw), [x], dtype)
    _check(lambda x: F.interpolate(x, mode="trilinear", **kw), [x], dtype)
    _check(lambda x: F.interpolate(x, mode="trilinear", align_corners=True, **kw), [x], dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(scale_factor=(1.5, 0.6)), dict(size=(7, 3)), dict(size=(1, 1))])
def test_upsample_bicubic(dtype, align_corners, kw):
    x = _rand((2, 3, 5, 4), dtype)
    _check(lambda x: F.interpolate(x, mode="bicubic", align_corners=align_corners, **kw), [x], dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_max_unpool(dtype):
    x = _rand((2, 3, 6, 7), dtype)
    out, idx = F.max_pool2d(x, 2, return_indices=True)
    _check(lambda v: F.max_unpool2d(v, idx.to(v.device), 2, output_size=(6, 7)), [out], dtype)
    x3 = _rand((2, 2, 4, 5, 6), dtype)
    out3, idx3 = F.max_pool3d(x3, 2, return_indices=True)
    _check(lambda v: F.max_unpool3d(v, idx3.to(v.device), 2, output_size=(4, 5, 6)), [out3], dtype)


def test_adaptive_max_pool_nan_indices():
    x = _rand((1, 2, 7, 5), torch.float32)
    x[0, 0, 1, 1] = float("nan")
    x[0, 0, 2, 2] = float("nan")
    x[0, 1, 3:, :] = float("-inf")
    oc, ic = F.adaptive_max_pool2d(x, (3, 2), return_indices=True)
    od, idd = F.adaptive_max_pool2d(x.to(DEV), (3, 2), return_indices=True)
    torch.testing.assert_close(od.cpu(), oc, equal_nan=True)
    assert torch.equal(idd.cpu(), ic)
    oc, ic = F.max_pool2d(x, 3, 1, 1, return_indices=True)
    od, idd = F.max_pool2d(x.to(DEV), 3, 1, 1, return_indices=True)
    torch.testing.assert_close(od.cpu(), oc, equal_nan=True)
    assert torch.equal(idd.cpu(), ic)
