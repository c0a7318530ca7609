"""bf16/f16 matrix products and convolutions on tpu vs PyTorch CPU, forward and backward.

The GEMM and convolution kernels read bf16/f16 operands directly (widened to f32 exactly while
packing, or, for bf16 on a CPU with AVX512-BF16, multiplied in pairs by `vdpbf16ps`, whose bf16
products are exact in f32 too; f32 accumulation; one rounding of the f32 result). The reference is
therefore the f32 computation on the same (rounded) values, rounded once to the low-precision dtype:
results may differ from it only through the f32 summation order (and vdpbf16ps's flushing of
denormals, which these inputs do not reach), i.e. by at most one rounding step of the output dtype. Odd shapes, transposed / sliced / expanded (non-contiguous) operands, batched
broadcasts, channels_last, groups, 1x1 convolutions (which multiply the input in place) and
transposed convolutions."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

DEV = "tpu"
LOWP = [torch.bfloat16, torch.float16]


def make(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype)


def close_lowp(got, want32, dtype):
    """got (tpu, dtype) vs want32 (f32 reference): within one rounding step of dtype around the
    rounded reference (plus f32 accumulation noise)."""
    assert got.device.type == DEV and got.dtype == dtype and got.shape == want32.shape
    eps = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -11
    g = got.cpu().float()
    err = (g - want32).abs()
    bound = eps * want32.abs() + 1e-4 * (want32.abs().max() + 1)
    assert bool((err <= bound).all()), float((err - bound).max())


def run(fn, inputs, dtype, grads=True, seed=0):
    """fn on tpu with dtype operands vs fn in f32 on the same values (CPU); gradients too."""
    cpu = [t.float().clone().requires_grad_(grads) for t in inputs]
    dev = [t.to(DEV).requires_grad_(grads) for t in inputs]
    yc, yd = fn(*cpu), fn(*dev)
    close_lowp(yd, yc.detach(), dtype)
    if not grads:
        return
    gy = make(yc.shape, dtype, seed + 100)
    yc.backward(gy.float())
    yd.backward(gy.to(DEV))
    for c, d in zip(cpu, dev):
        # the device's gradients are rounded to dtype once, the f32 reference's not at all
        close_lowp(d.grad, c.grad, dtype)


@pytest.mark.parametrize("dtype", LOWP)
@pytest.mark.parametrize("m,k,n", [(1, 37, 5), (7, 1, 9), (33, 65, 17), (70, 129, 45), (5, 600, 3)])
def test_mm(dtype, m, k, n):
    run(lambda a, b: a @ b, [make((m, k), dtype, 1), make((k, n), dtype, 2)], dtype)


@pytest.mark.parametrize("dtype", LOWP)
def test_mm_non_contiguous(dtype):
    a = make((40, 90), dtype, 3)
    b = make((71, 50), dtype, 4)
    run(lambda x, y: x[::2, 5:80:3] @ y[:, 10:35].t(), [a, b], dtype)  # strided A, transposed B
    run(lambda x, y: x.t()[3:40] @ y[:40, :17], [a, b], dtype)  # column-major A
    v = make((1, 25), dtype, 5)
    run(lambda x, y: x.expand(6, 25) @ y[:25, ::3], [v, b], dtype, grads=False)  # zero row stride
    # its gradient sums 6 rounded rows (a second rounding): vs CPU autograd in the same dtype
    vc, bc = v.clone().requires_grad_(), b.clone().requires_grad_()
    vd, bd = v.to(DEV).requires_grad_(), b.to(DEV).requires_grad_()
    gy = make((6, 17), dtype, 6)
    (vc.expand(6, 25) @ bc[:25, ::3]).backward(gy)
    (vd.expand(6, 25) @ bd[:25, ::3]).backward(gy.to(DEV))
    eps = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -11
    for c, d in ((vc, vd), (bc, bd)):
        torch.testing.assert_close(d.grad.cpu().float(), c.grad.float(), rtol=2 * eps, atol=4 * eps)


@pytest.mark.parametrize("dtype", LOWP)
def test_bmm_and_broadcast_matmul(dtype):
    run(torch.bmm, [make((3, 17, 31), dtype, 6), make((3, 31, 9), dtype, 7)], dtype)
    run(lambda a, b: a.transpose(1, 2) @ b, [make((4, 23, 11), dtype, 8), make((4, 23, 6), dtype, 9)], dtype)
    run(torch.matmul, [make((2, 3, 13, 40), dtype, 10), make((40, 21), dtype, 11)], dtype)
    run(torch.matmul, [make((5, 29), dtype, 12), make((2, 29, 7), dtype, 13)], dtype)


@pytest.mark.parametrize("dtype", LOWP)
def test_linear_and_addmm(dtype):
    run(F.linear, [make((3, 5, 67), dtype, 14), make((19, 67), dtype, 15), make((19,), dtype, 16)], dtype)
    run(lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
        [make((11, 13), dtype, 17), make((11, 41), dtype, 18), make((41, 13), dtype, 19)], dtype)
    run(lambda c, a, b: torch.baddbmm(c, a, b, alpha=0.25),
        [make((2, 9, 8), dtype, 20), make((2, 9, 30), dtype, 21), make((2, 30, 8), dtype, 22)], dtype)


CONVS = [
    # x shape, w shape, kwargs
    ((2, 3, 9, 7), (5, 3, 3, 3), dict(padding=1)),
    ((1, 4, 8, 9), (6, 2, 3, 2), dict(stride=2, padding=1, groups=2)),
    ((2, 6, 5, 5), (4, 6, 1, 1), dict()),  # 1x1 stride 1: the input is its own im2col matrix
    ((2, 6, 7, 7), (6, 1, 3, 3), dict(padding=1, groups=6)),  # depthwise
    ((1, 3, 4, 4), (8, 3, 3, 3), dict(padding=1, dilation=1, stride=1)),  # small spatial (ResNet tail)
    ((2, 5, 12, 11), (7, 5, 5, 3), dict(stride=(2, 1), padding=(2, 0), dilation=(1, 2))),
]


@pytest.mark.parametrize("dtype", LOWP)
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("xs,ws,kw", CONVS)
def test_conv2d(dtype, channels_last, xs, ws, kw):
    x, w, b = make(xs, dtype, 23), make(ws, dtype, 24), make((ws[0],), dtype, 25)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    run(lambda x_, w_, b_: F.conv2d(x_, w_, b_, **kw), [x, w, b], dtype)


@pytest.mark.parametrize("dtype", LOWP)
def test_conv_non_contiguous_and_other_ranks(dtype):
    x = make((2, 4, 12, 10), dtype, 26)
    w = make((5, 4, 3, 3), dtype, 27)
    run(lambda x_, w_: F.conv2d(x_[:, :, 1::2, ::3], w_, padding=1), [x, w], dtype)  # strided view
    run(lambda x_, w_: F.conv1d(x_, w_, padding=2, stride=2),
        [make((3, 4, 19), dtype, 28), make((6, 4, 5), dtype, 29)], dtype)
    run(lambda x_, w_: F.conv3d(x_, w_, padding=1),
        [make((1, 2, 5, 6, 4), dtype, 30), make((3, 2, 3, 3, 3), dtype, 31)], dtype)


@pytest.mark.parametrize("dtype", LOWP)
def test_conv_transpose(dtype):
    run(lambda x_, w_, b_: F.conv_transpose2d(x_, w_, b_, stride=2, padding=1, output_padding=1),
        [make((2, 4, 5, 6), dtype, 32), make((4, 3, 3, 3), dtype, 33), make((3,), dtype, 34)], dtype)
    run(lambda x_, w_: F.conv_transpose1d(x_, w_, stride=3, groups=2),
        [make((1, 4, 7), dtype, 35), make((4, 2, 4), dtype, 36)], dtype)


def test_amp_linear_and_conv_match_cpu_autocast_inputs():
    """Under bf16 autocast the device computes what the kernels promise: bf16 operands, f32
    accumulation, one rounding (the CPU autocast reference uses the same rounded operands)."""
    lin = torch.nn.Linear(48, 24)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    x = make((6, 48), torch.float32, 37)
    img = make((2, 3, 10, 10), torch.float32, 38)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        y = lin.to(DEV)(x.to(DEV))
        z = conv.to(DEV)(img.to(DEV))
    assert y.dtype == torch.bfloat16 and z.dtype == torch.bfloat16
    lin_c, conv_c = lin.cpu(), conv.cpu()
    bf = lambda t: t.to(torch.bfloat16).float()  # noqa: E731
    want_y = F.linear(bf(x), bf(lin_c.weight), bf(lin_c.bias))
    want_z = F.conv2d(bf(img), bf(conv_c.weight), bf(conv_c.bias), padding=1)
    close_lowp(y, want_y.detach(), torch.bfloat16)
    close_lowp(z, want_z.detach(), torch.bfloat16)


_SAME_AS_WIDENED = """
    import torch
    g = torch.Generator().manual_seed(5)
    a = torch.randn(67, 301, generator=g).bfloat16()
    b = torch.randn(301, 45, generator=g).bfloat16()
    w = torch.randn(8, 3, 3, 3, generator=g).bfloat16()
    x = torch.randn(2, 3, 9, 9, generator=g).bfloat16()
    got = (a.to("tpu") @ b.to("tpu")).cpu()
    widened = (a.float().to("tpu") @ b.float().to("tpu")).cpu()  # f32 kernel, highest precision
    conv = torch.nn.functional.conv2d(x.to("tpu"), w.to("tpu")).cpu()
    conv_w = torch.nn.functional.conv2d(x.float().to("tpu"), w.float().to("tpu")).cpu()
    print(int(torch.equal(got, widened.bfloat16())), int(torch.equal(conv, conv_w.bfloat16())))
"""


def _run_env(code: str, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_TPU_GEMM")}
    env.update(env_vars)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300)


def test_gemm_bf16_env_off_is_widened_f32():
    """TORCH_TPU_GEMM_BF16=0 keeps the exact widening kernels: a bf16 product (and convolution) is
    bit for bit the f32 product of the widened operands, rounded once."""
    proc = _run_env(_SAME_AS_WIDENED, TORCH_TPU_GEMM_BF16="0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "1"], proc.stdout


def test_gemm_bf16_env_invalid_value_raises_at_import():
    proc = _run_env("import torch", TORCH_TPU_GEMM_BF16="yes")
    assert proc.returncode != 0
    assert "TORCH_TPU_GEMM_BF16" in proc.stderr and "expected 0 or 1" in proc.stderr


_DIRECT = """
    import hashlib
    import torch, torch.nn.functional as F
    import torch_tpu
    g = torch.Generator().manual_seed(5)
    r = lambda *s: torch.randn(*s, generator=g).bfloat16()
    d = lambda t: t.to("tpu")
    outs = []
    x, w, b = r(37, 130), r(65, 130), r(65)
    x3, wl, bl = r(3, 19, 130), r(200, 130), r(200)
    xk, wk = r(9, 900), r(33, 900)  # k over one GEMM block: C is written, then stored
    q, k, v = r(16, 33, 32), r(16, 32, 41), r(16, 41, 24)
    for fused in (False, True):
        torch_tpu.set_fused_eager(fused)
        outs.append(F.linear(d(x), d(w), d(b)).cpu())                       # bias + bf16 store
        outs.append(F.linear(d(x3), d(wl), d(bl)).cpu())                     # 3-D input, 200 columns
        outs.append(F.linear(d(x3).transpose(0, 1), d(w), d(b)).cpu())       # non-contiguous input
        outs.append(torch.addmm(d(b), d(x), d(w).t()).cpu())
        outs.append(torch.addmm(d(b)[:1].expand(65), d(x), d(w).t()).cpu())  # broadcast bias
        outs.append(torch.addmm(d(b), d(x)[:1], d(w).t()).cpu())            # one row (GEMV)
        outs.append(torch.mm(d(x), d(w).t()).cpu())                         # convert only
        outs.append(torch.mm(d(xk), d(wk).t()).cpu())
        outs.append(torch.mm(d(x).t(), d(x)).cpu())                          # transposed A
        outs.append(torch.bmm(d(q), d(k)).cpu())
        outs.append(torch.bmm(d(k).transpose(1, 2), d(q).transpose(1, 2)).cpu())
        outs.append(torch.bmm(d(q)[::2], d(k)[::2]).cpu())                  # strided batch
        outs.append(torch.matmul(d(q).view(4, 4, 33, 32), d(k).view(4, 4, 32, 41)).cpu())
        outs.append(torch.bmm(d(q), d(k)).transpose(1, 2).contiguous().cpu())
        outs.append((torch.bmm(d(q), d(k)) @ d(v)).cpu())
        torch_tpu.set_fused_eager(False)
    for t in outs:
        print(hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16], t.dtype, tuple(t.shape))
"""


def _direct_run(epilogue: str) -> list[str]:
    proc = _run_env(_DIRECT, TORCH_TPU_GEMM_EPILOGUE=epilogue)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("\n")


def test_bf16_products_fused_store_bit_identical_to_unfused():
    """bf16 products whose result is only rounded to bf16 (a bias row added first: autocast's linear layers,
    bmm) may be stored by the GEMM itself (drivers/host/gemm.h, tpu_host_gemm_epi_t.out_bf16): the same bits
    as the product followed by separate elementwise ops (TORCH_TPU_GEMM_EPILOGUE=0), in strict and fused
    eager; odd sizes, 3-D and non-contiguous inputs, broadcast bias, one row, long k, batched and strided."""
    on, off = _direct_run("1"), _direct_run("0")
    assert len(on) > 30 and on == off


@pytest.mark.parametrize("shape", [(1, 5), (37, 130), (2048, 128)])
def test_bf16_linear_bias_vs_cpu(shape):
    m, kdim = shape
    x, w, b = make((m, kdim), torch.bfloat16, 1), make((77, kdim), torch.bfloat16, 2), make((77,), torch.bfloat16, 3)
    got = F.linear(x.to(DEV), w.to(DEV), b.to(DEV))
    close_lowp(got, x.float() @ w.float().t() + b.float(), torch.bfloat16)
