"""Convolutions on tpu vs PyTorch CPU: conv1d/2d/3d and conv_transpose1d/2d/3d, forward and
backward (input, weight, bias), stride/padding ('same'/'valid')/dilation/groups, channels_last,
f32/f64/bf16/f16. They reach libtpurt as aten::convolution_overrideable and
aten::convolution_backward_overrideable."""
import copy

import pytest
import torch
import torch.nn.functional as F

DEV = "tpu"
pytestmark = pytest.mark.filterwarnings("ignore:Using padding=.same. with even kernel lengths")


def _tol(dtype):
    if dtype == torch.bfloat16:
        return dict(atol=3e-2, rtol=3e-2)
    if dtype == torch.float16:
        return dict(atol=5e-3, rtol=5e-3)
    if dtype == torch.float64:
        return dict(atol=1e-10, rtol=1e-10)
    return dict(atol=2e-5, rtol=2e-5)


def _run(fn, inputs, dtype=torch.float32, grads=True, memory_format=None, seed=0, same_strides=True):
    """fn(*tensors) on CPU and on tpu; compares the output, its layout and the gradients.
    bf16/f16 references run in f32 on the same (rounded) values."""
    torch.manual_seed(seed)
    ref_dtype = torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype
    cpu, dev = [], []
    for t in inputs:
        if t is None:
            cpu.append(None)
            dev.append(None)
            continue
        t = t.to(dtype)
        if memory_format is not None and t.dim() in (4, 5):
            t = t.contiguous(memory_format=memory_format)
        c = t.to(ref_dtype).clone().requires_grad_(grads)
        d = t.to(DEV).requires_grad_(grads)
        cpu.append(c)
        dev.append(d)
    yc = fn(*cpu)
    yd = fn(*dev)
    assert yd.device.type == DEV and yd.dtype == dtype and yd.shape == yc.shape
    if dtype == ref_dtype and same_strides:
        assert yd.stride() == yc.stride(), (yd.stride(), yc.stride())
    torch.testing.assert_close(yd.cpu().to(ref_dtype), yc.to(dtype).to(ref_dtype), **_tol(dtype))
    if not grads:
        return
    g = torch.randn(yc.shape).to(dtype)
    yc.backward(g.to(ref_dtype))
    yd.backward(g.to(DEV))
    for c, d in zip(cpu, dev):
        if c is None:
            continue
        assert d.grad is not None and d.grad.shape == c.grad.shape and d.grad.dtype == dtype
        tol = _tol(dtype)
        if dtype in (torch.bfloat16, torch.float16):  # gradients sum many rounded products
            tol = dict(atol=tol["atol"] * 4, rtol=tol["rtol"] * 4)
        torch.testing.assert_close(d.grad.cpu().to(ref_dtype), c.grad.to(dtype).to(ref_dtype), **tol)


CONV2D = [
    # (N, C, H, W), (O, C/g, kh, kw), kwargs
    ((2, 3, 7, 6), (4, 3, 3, 3), dict()),
    ((1, 4, 9, 8), (6, 2, 3, 2), dict(stride=2, padding=1, groups=2)),
    ((2, 3, 8, 7), (5, 3, 2, 3), dict(stride=(2, 1), padding=(0, 2), dilation=(2, 1))),
    ((2, 4, 7, 7), (4, 1, 3, 3), dict(padding=1, groups=4)),  # depthwise
    ((2, 4, 7, 7), (8, 1, 3, 3), dict(stride=2, padding=1, groups=4)),  # depthwise multiplier 2
    ((1, 2, 11, 9), (3, 2, 2, 2), dict(stride=3)),  # stride > kernel
    ((2, 3, 5, 5), (4, 3, 1, 1), dict()),  # 1x1
    ((1, 2, 6, 7), (3, 2, 4, 3), dict(padding="same")),  # even kernel: asymmetric 'same'
    ((1, 2, 6, 7), (3, 2, 3, 3), dict(padding="same", dilation=2)),
    ((2, 2, 6, 7), (3, 2, 3, 2), dict(padding="valid")),
    ((1, 3, 5, 5), (2, 3, 5, 5), dict(padding=2)),  # kernel covers the input
]


@pytest.mark.parametrize("xs,ws,kw", CONV2D)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d(xs, ws, kw, bias):
    b = torch.randn(ws[0]) if bias else None
    _run(lambda x, w, b: F.conv2d(x, w, b, **kw), [torch.randn(xs), torch.randn(ws), b])


@pytest.mark.parametrize("xs,ws,kw", CONV2D[:6])
def test_conv2d_channels_last(xs, ws, kw):
    _run(lambda x, w, b: F.conv2d(x, w, b, **kw), [torch.randn(xs), torch.randn(ws), torch.randn(ws[0])],
         memory_format=torch.channels_last)


def test_conv2d_mixed_layouts_and_views():
    torch.manual_seed(1)
    x = torch.randn(2, 3, 9, 10)
    w = torch.randn(4, 3, 3, 3).contiguous(memory_format=torch.channels_last)
    # channels_last weight only, and a non-contiguous (sliced) input
    for xx in (x, x[:, :, ::2, 1:]):
        yc = F.conv2d(xx, w, padding=1)
        yd = F.conv2d(xx.to(DEV), w.to(DEV), padding=1)
        assert yd.stride() == yc.stride()
        torch.testing.assert_close(yd.cpu(), yc, **_tol(torch.float32))
    xt = x.transpose(2, 3)  # transposed spatial view
    torch.testing.assert_close(F.conv2d(xt.to(DEV), w.to(DEV)).cpu(), F.conv2d(xt, w), **_tol(torch.float32))


@pytest.mark.parametrize("xs,ws,kw", [
    ((2, 3, 11), (4, 3, 3), dict()),
    ((1, 4, 16), (6, 2, 5), dict(stride=3, padding=2, dilation=2, groups=2)),
    ((2, 4, 9), (4, 1, 3), dict(padding="same", groups=4)),
    ((2, 2, 10), (3, 2, 4), dict(padding="same")),
    ((1, 2, 7), (3, 2, 2), dict(stride=4)),
])
def test_conv1d(xs, ws, kw):
    _run(lambda x, w, b: F.conv1d(x, w, b, **kw), [torch.randn(xs), torch.randn(ws), torch.randn(ws[0])])


@pytest.mark.parametrize("xs,ws,kw,cl", [
    ((1, 2, 5, 6, 4), (3, 2, 3, 3, 2), dict(), False),
    ((2, 4, 5, 5, 5), (4, 2, 2, 3, 3), dict(stride=(2, 1, 2), padding=1, groups=2), False),
    ((1, 2, 6, 5, 5), (2, 2, 3, 3, 3), dict(padding="same", dilation=(1, 2, 1)), False),
    ((1, 3, 4, 5, 6), (2, 3, 2, 2, 2), dict(stride=2), True),
])
def test_conv3d(xs, ws, kw, cl):
    # CPU picks the layout per backend (its slow 3-D kernel answers contiguous, oneDNN
    # channels_last_3d); tpu follows the input like CUDA: channels_last_3d in, channels_last_3d out.
    _run(lambda x, w, b: F.conv3d(x, w, b, **kw), [torch.randn(xs), torch.randn(ws), torch.randn(ws[0])],
         memory_format=torch.channels_last_3d if cl else None, same_strides=not cl)
    if cl:
        x = torch.randn(xs).contiguous(memory_format=torch.channels_last_3d).to(DEV)
        y = F.conv3d(x, torch.randn(ws).to(DEV), **kw)
        assert y.is_contiguous(memory_format=torch.channels_last_3d)


@pytest.mark.parametrize("fn,xs,ws,kw", [
    (F.conv_transpose1d, (2, 4, 7), (4, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    (F.conv_transpose1d, (1, 4, 6), (4, 2, 4), dict(stride=3, groups=2, dilation=2)),
    (F.conv_transpose2d, (2, 3, 5, 4), (3, 2, 3, 3), dict()),
    (F.conv_transpose2d, (1, 4, 5, 6), (4, 3, 3, 2), dict(stride=2, padding=(1, 0), output_padding=(1, 1), groups=2)),
    (F.conv_transpose2d, (2, 2, 4, 4), (2, 3, 2, 2), dict(stride=2)),  # UNet upsampling
    (F.conv_transpose2d, (1, 2, 5, 5), (2, 2, 3, 3), dict(stride=2, padding=1, dilation=2, output_padding=1)),
    (F.conv_transpose3d, (1, 2, 3, 4, 3), (2, 2, 2, 3, 2), dict(stride=(2, 1, 2), padding=(0, 1, 0))),
])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose(fn, xs, ws, kw, bias):
    out_ch = ws[1] * kw.get("groups", 1)
    b = torch.randn(out_ch) if bias else None
    _run(lambda x, w, b: fn(x, w, b, **kw), [torch.randn(xs), torch.randn(ws), b])


def test_conv_transpose2d_channels_last():
    _run(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
         [torch.randn(2, 4, 5, 6), torch.randn(4, 3, 3, 3), torch.randn(3)], memory_format=torch.channels_last)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_conv_dtypes(dtype):
    _run(lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2),
         [torch.randn(2, 4, 7, 6), torch.randn(6, 2, 3, 3), torch.randn(6)], dtype=dtype)
    _run(lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, output_padding=1),
         [torch.randn(2, 4, 7), torch.randn(4, 3, 3), torch.randn(3)], dtype=dtype)


def test_conv_bf16_channels_last():
    _run(lambda x, w, b: F.conv2d(x, w, b, padding=1), [torch.randn(2, 8, 6, 6), torch.randn(4, 8, 3, 3), None],
         dtype=torch.bfloat16, memory_format=torch.channels_last)


# Stride-1 shapes as in the ResNet/UNet examples (maps of 16x16 and up): the host's direct padded-grid
# forward kernel (several 8-channel output blocks, a partial last block, samples sharing a 48-position strip),
# and backward-input run as a forward conv with the flipped weight.
DIRECT = [
    ((2, 16, 17, 18), (19, 16, 3, 3), dict(padding=1)),
    ((3, 20, 20, 19), (8, 10, 3, 3), dict(padding=1, groups=2)),
    ((1, 9, 20, 21), (17, 9, 3, 2), dict(padding=(2, 1), dilation=(2, 1))),
    ((2, 18, 8, 8), (6, 18, 1, 1), dict(padding=1)),
]


@pytest.mark.parametrize("xs,ws,kw", DIRECT)
@pytest.mark.parametrize("memory_format", [None, torch.channels_last])
def test_conv2d_stride1_direct(xs, ws, kw, memory_format):
    _run(lambda x, w, b: F.conv2d(x, w, b, **kw), [torch.randn(xs), torch.randn(ws), torch.randn(ws[0])],
         memory_format=memory_format)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_conv2d_stride1_direct_dtypes(dtype):
    _run(lambda x, w, b: F.conv2d(x, w, b, padding=1), [torch.randn(3, 16, 17, 16), torch.randn(12, 16, 3, 3), None],
         dtype=dtype)


def test_conv2d_stride1_direct_views():
    torch.manual_seed(2)
    x = torch.randn(4, 24, 26, 40)
    w = torch.randn(10, 12, 3, 3)
    for xx in (x[:, ::2], x[:, :12, 1:, ::2], x[:, :12].transpose(2, 3)):  # sliced channels, strided rows, transposed
        xc = xx.clone().requires_grad_()
        xd = xx.to(DEV).requires_grad_()
        yc, yd = F.conv2d(xc, w, padding=1), F.conv2d(xd, w.to(DEV), padding=1)
        torch.testing.assert_close(yd.cpu(), yc, **_tol(torch.float32))
        g = torch.randn(yc.shape)
        yc.backward(g)
        yd.backward(g.to(DEV))
        torch.testing.assert_close(xd.grad.cpu(), xc.grad, **_tol(torch.float32))


# Shapes the host driver's gathered-operand kernels take (backward-weight at any stride; forward at
# stride > 1 or on small maps): channel counts that fill and overrun 16-lane groups, odd maps.
GATHERED = [
    ((5, 19, 9, 7), (37, 19, 3, 3), dict(stride=2, padding=1)),
    ((3, 16, 4, 5), (20, 16, 3, 3), dict(padding=1)),
    ((2, 33, 2, 3), (50, 33, 3, 3), dict(padding=1)),
    ((2, 12, 11, 10), (17, 12, 3, 2), dict(stride=3, padding=(1, 2), dilation=(2, 1))),
    ((4, 3, 13, 12), (16, 3, 3, 3), dict(stride=(1, 2), padding=1)),
    ((2, 20, 9, 9), (24, 10, 3, 3), dict(stride=2, padding=1, groups=2)),
]


@pytest.mark.parametrize("xs,ws,kw", GATHERED)
@pytest.mark.parametrize("memory_format", [None, torch.channels_last])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_conv2d_gathered(xs, ws, kw, memory_format, dtype):
    _run(lambda x, w, b: F.conv2d(x, w, b, **kw), [torch.randn(xs), torch.randn(ws), torch.randn(ws[0])],
         dtype=dtype, memory_format=memory_format, same_strides=dtype == torch.float32)


def test_conv2d_gathered_views():
    torch.manual_seed(3)
    x = torch.randn(3, 40, 11, 18)
    w = torch.randn(21, 20, 3, 3)
    for xx in (x[:, ::2], x[:, 5:25, 1:, ::2], x[:, :20].transpose(2, 3)):
        xc = xx.clone().requires_grad_()
        wc = w.clone().requires_grad_()
        xd = xx.to(DEV).requires_grad_()
        wd = w.to(DEV).requires_grad_()
        yc, yd = F.conv2d(xc, wc, stride=2, padding=1), F.conv2d(xd, wd, stride=2, padding=1)
        torch.testing.assert_close(yd.cpu(), yc, **_tol(torch.float32))
        g = torch.randn(yc.shape)
        yc.backward(g)
        yd.backward(g.to(DEV))
        torch.testing.assert_close(xd.grad.cpu(), xc.grad, **_tol(torch.float32))
        torch.testing.assert_close(wd.grad.cpu(), wc.grad, **_tol(torch.float32))


def test_unbatched_and_empty_batch():
    _run(lambda x, w, b: F.conv2d(x, w, b, padding=1), [torch.randn(3, 6, 5), torch.randn(4, 3, 3, 3), torch.randn(4)])
    _run(lambda x, w, b: F.conv1d(x, w, b), [torch.randn(3, 6), torch.randn(4, 3, 3), torch.randn(4)])
    x = torch.randn(0, 3, 6, 6)
    w = torch.randn(4, 3, 3, 3)
    xd, wd = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_()
    y = F.conv2d(xd, wd)
    assert y.shape == (0, 4, 4, 4)
    y.sum().backward()
    assert xd.grad.shape == x.shape and wd.grad.abs().sum().item() == 0


def test_partial_gradients():
    """output_mask: only the gradients autograd needs are computed."""
    torch.manual_seed(3)
    x, w, b = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(4)
    for need in [(True, False, False), (False, True, False), (False, False, True), (False, True, True)]:
        cpu = [t.clone().requires_grad_(r) for t, r in zip((x, w, b), need)]
        dev = [t.to(DEV).requires_grad_(r) for t, r in zip((x, w, b), need)]
        F.conv2d(*cpu, stride=2).square().sum().backward()
        F.conv2d(*dev, stride=2).square().sum().backward()
        for c, d in zip(cpu, dev):
            if c.requires_grad:
                torch.testing.assert_close(d.grad.cpu(), c.grad, atol=1e-4, rtol=1e-4)
            else:
                assert d.grad is None


def test_modules():
    torch.manual_seed(4)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv2d(8, 8, 3, stride=2, groups=2, bias=False),
                            torch.nn.ConvTranspose2d(8, 4, 2, stride=2))
    md = copy.deepcopy(m).to(DEV)
    x = torch.randn(2, 3, 9, 9)
    m(x).sum().backward()
    md(x.to(DEV)).sum().backward()
    for pc, pd in zip(m.parameters(), md.parameters()):
        torch.testing.assert_close(pd.grad.cpu(), pc.grad, atol=1e-4, rtol=1e-4)


def test_errors_match_cpu():
    x, w = torch.randn(1, 3, 5, 5), torch.randn(4, 2, 3, 3)
    with pytest.raises(RuntimeError) as ec:
        F.conv2d(x, w)
    with pytest.raises(RuntimeError) as ed:
        F.conv2d(x.to(DEV), w.to(DEV))
    assert str(ed.value).split("\n")[0] == str(ec.value).split("\n")[0]
    with pytest.raises(RuntimeError, match="Kernel size can't be greater than actual input size"):
        F.conv2d(torch.randn(1, 2, 2, 2, device=DEV), torch.randn(3, 2, 3, 3, device=DEV))


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
def test_conv2d_padding_modes(mode):
    torch.manual_seed(5)
    m = torch.nn.Conv2d(2, 3, 3, padding=1, padding_mode=mode)
    md = copy.deepcopy(m).to(DEV)
    x = torch.randn(2, 2, 5, 6)
    y, yd = m(x), md(x.to(DEV))
    torch.testing.assert_close(yd.cpu(), y, atol=1e-5, rtol=1e-5)
    y.square().sum().backward()
    yd.square().sum().backward()
    torch.testing.assert_close(md.weight.grad.cpu(), m.weight.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(md.bias.grad.cpu(), m.bias.grad, atol=1e-4, rtol=1e-4)


def test_double_backward():
    """create_graph through a convolution (gradient penalties): PyTorch composes it from
    convolutions, which come back to the same lowerings."""
    res = {}
    for dev in ("cpu", DEV):
        torch.manual_seed(6)
        x = torch.randn(1, 2, 5, 5).to(dev).requires_grad_()
        w = torch.randn(3, 2, 3, 3).to(dev).requires_grad_()
        y = F.conv2d(x, w, padding=1, stride=2)
        (gx,) = torch.autograd.grad(y.square().sum(), x, create_graph=True)
        gx.square().sum().backward()
        res[dev] = (gx.detach().cpu(), w.grad.cpu(), x.grad.cpu())
    for a, b in zip(res[DEV], res["cpu"]):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-4)
