"""Small matrix products (the host GEMM's small path: one k block, A read in place, row strips cut to the rows
there are; csrc/tpurt/tests/test_gemm.c run_small checks its bits against the packed path) vs PyTorch CPU, in the
layouts a training step's forward and backward use: x @ W^T (F.linear, bias and activation epilogues, strict
and fused eager), dX = dY @ W, dW = dY^T @ X with k = batch * seq, attention's batched 16 x 8 x 16 products
with transposed operands; odd sizes around the 8/16/32-column chunks and 1..14-row strips, non-contiguous
(sliced, transposed, expanded) operands, k past one k block (512), and autograd through a linear layer."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

DEV = "tpu"
pytestmark = pytest.mark.skipif(not torch.tpu.is_available(), reason="no tpu device")


def make(shape, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * scale


def close(got, want, k):
    assert got.device.type == DEV and got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=2e-6 * k ** 0.5)


# (m, n, k): minGPT's step ([256 x n] with k = 32..128, dW with k = batch * seq = 256), Llama's, odd sizes
SHAPES = [(256, 32, 96), (96, 32, 256), (32, 128, 256), (40, 32, 256), (128, 16, 32), (16, 8, 16), (8, 16, 16),
          (17, 33, 31), (15, 9, 7), (3, 47, 5), (29, 40, 513), (14, 48, 1), (2, 2, 2)]


def layout(t, kind):
    """t (rows, cols) as: contiguous, transposed storage (column-major), every other column of a wider
    matrix (column stride 2), or its first row broadcast (row stride 0)."""
    if kind == "c":
        return t
    if kind == "t":
        return t.t().contiguous().t()
    if kind == "s":
        wide = torch.zeros(t.shape[0], 2 * t.shape[1], device=t.device)
        wide[:, ::2] = t
        return wide[:, ::2]
    return t[:1].expand_as(t)


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("la,lb", [("c", "c"), ("t", "c"), ("c", "t"), ("t", "t"), ("s", "c"), ("c", "s"), ("z", "t")])
def test_mm_layouts(m, n, k, la, lb):
    a, b = layout(make((m, k), 1), la), layout(make((k, n), 2), lb)
    da, db = layout(make((m, k), 1).to(DEV), la), layout(make((k, n), 2).to(DEV), lb)  # the views made on the device
    assert da.stride() == a.stride() and db.stride() == b.stride()
    close(da @ db, a @ b, k)
    close(torch.addmm(make((m, n), 3).to(DEV), da, db, beta=0.5, alpha=-1.5),
          torch.addmm(make((m, n), 3), a, b, beta=0.5, alpha=-1.5), k)


@pytest.mark.parametrize("batch,m,n,k", [(64, 16, 8, 16), (64, 8, 16, 16), (64, 16, 16, 8), (7, 15, 9, 33), (3, 29, 33, 70)])
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_bmm_transposed(batch, m, n, k, ta, tb):
    """attention's q @ k^T, p @ v and their gradients: (batch, m, k) @ (batch, k, n) with either operand
    stored transposed per matrix."""
    a = make((batch, k, m), 4).transpose(1, 2) if ta else make((batch, m, k), 4)
    b = make((batch, n, k), 5).transpose(1, 2) if tb else make((batch, k, n), 5)
    close(torch.bmm(a.to(DEV), b.to(DEV)), torch.bmm(a, b), k)


@pytest.mark.parametrize("act", ["gelu", "none"])
@pytest.mark.parametrize("shape,n", [((16, 16, 32), 96), ((256, 32), 40), ((5, 7, 33), 17), ((130, 128), 32)])
@pytest.mark.parametrize("fused", [False, True])
def test_linear_bias_epilogue(act, shape, n, fused):
    """F.linear with a bias (and GELU): the epilogue runs on the small path's blocks."""
    x, w, bias = make(shape, 6), make((n, shape[-1]), 7, 0.3), make((n,), 8)
    f = F.gelu if act == "gelu" else (lambda t: t)
    want = f(F.linear(x, w, bias))
    torch_tpu.set_fused_eager(fused)
    try:
        got = f(F.linear(x.to(DEV), w.to(DEV), bias.to(DEV))).cpu().to(DEV)  # flush
    finally:
        torch_tpu.set_fused_eager(False)
    close(got, want, shape[-1])


@pytest.mark.parametrize("shape,n", [((16, 16, 32), 96), ((16, 16, 128), 32), ((3, 5, 40), 9)])
def test_linear_backward(shape, n):
    """dX = dY @ W and dW = dY^T @ X (k = batch * seq) of a linear layer vs CPU autograd."""
    x, w, bias = make(shape, 9), make((n, shape[-1]), 10, 0.3), make((n,), 11)
    gy = make(shape[:-1] + (n,), 12)
    leaves_c = [t.clone().requires_grad_() for t in (x, w, bias)]
    leaves_d = [t.to(DEV).requires_grad_() for t in (x, w, bias)]
    F.linear(*leaves_c).backward(gy)
    F.linear(*leaves_d).backward(gy.to(DEV))
    k = shape[0] * shape[1]
    for c, d in zip(leaves_c, leaves_d):
        close(d.grad, c.grad, k)
