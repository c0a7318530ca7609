"""Row kernels (drivers/host/rows.c: custom ROWS_SOFTMAX(_BWD), ROWS_LAYER_NORM(_BWD); lower/nn.c)
vs PyTorch CPU on random inputs: softmax / log_softmax forward and backward over odd row lengths,
many / few rows, dim != -1, non-contiguous views, bf16 / f16 / f64, -inf masked rows (minGPT's
masked_fill + softmax; an all -inf row is NaN as on the CPU) and large magnitudes; layer norm
forward and backward with and without weight / bias, f32 / bf16 / f64, non-contiguous inputs; row / norm results
identical bits at 1, 2 and 3 pool threads."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

DEV = "tpu"
LENS = [1, 7, 33, 1000, 4097]


def _run_on(fn, devs, *inputs):
    res = []
    for dev in devs:
        xs = [x.detach().clone().to(dev).requires_grad_() for x in inputs]
        out = fn(*xs)
        g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out.dtype).to(dev)
        out.backward(g)
        res.append((out.detach().cpu(), [x.grad.cpu() for x in xs]))
    return res


def run_both(fn, *inputs):
    """(out, grads) on tpu and on cpu, with the same upstream gradient (made on the CPU)."""
    return _run_on(fn, (DEV, "cpu"), *inputs)


def check_vs_f64(fn, *inputs):
    """For long rows (thousands of elements summed in another order than the CPU's): tpu's outputs and gradients
    compared with the float64 CPU result, allowing the absolute error PyTorch CPU's float32 result itself has
    there (tpu at least as accurate as the CPU on this input); f32 vs f32 would compare two roundings."""
    (o_t, g_t), (o_c, g_c) = run_both(fn, *inputs)
    (o_r, g_r), = _run_on(fn, ("cpu",), *[x.double() for x in inputs])
    for a, c, r in zip([o_t, *g_t], [o_c, *g_c], [o_r, *g_r]):
        ref_err = (c.double() - r).abs().nan_to_num(0.0).max().item()
        torch.testing.assert_close(a.double(), r, equal_nan=True, rtol=1.3e-6, atol=max(ref_err, 1e-5))


def check(fn, *inputs, **kw):
    (o_t, g_t), (o_c, g_c) = run_both(fn, *inputs)
    torch.testing.assert_close(o_t, o_c, equal_nan=True, **kw)
    for a, b in zip(g_t, g_c):
        torch.testing.assert_close(a, b, equal_nan=True, **kw)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("n", LENS)
@pytest.mark.parametrize("rows", [1, 5, 300])
def test_softmax_rows(log, n, rows):
    if rows * n > 400_000:
        rows = 20
    fn = F.log_softmax if log else F.softmax
    x = torch.randn(rows, n, generator=torch.Generator().manual_seed(rows * 10007 + n)) * 3
    (check_vs_f64 if n >= 1000 else check)(lambda t: fn(t, dim=-1), x)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -2])
def test_softmax_dims_and_views(log, dim):
    fn = F.log_softmax if log else F.softmax
    x = torch.randn(6, 33, 7)
    check(lambda t: fn(t, dim=dim), x)
    check(lambda t: fn(t.transpose(0, 2)[:, ::2], dim=dim), x)  # non-contiguous, strided


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_softmax_dtypes(log, dtype):
    fn = F.log_softmax if log else F.softmax
    x = (torch.randn(9, 65) * 4).to(dtype)
    tol = {} if dtype == torch.float64 else {"atol": 2e-2, "rtol": 2e-2}
    check(lambda t: fn(t, dim=-1), x, **tol)
    # computed in f32 (the gradient too, converted back to the input dtype): f32's default tolerances
    check(lambda t: fn(t, dim=0, dtype=torch.float32), x, **(tol or {"atol": 1e-5, "rtol": 1.3e-6}))


@pytest.mark.parametrize("log", [False, True])
def test_softmax_masked_and_large(log):
    fn = F.log_softmax if log else F.softmax
    T = 37
    x = torch.randn(2, 3, T, T) * 1e3  # large magnitudes: most rows one-hot
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    xm = x.masked_fill(~mask, float("-inf"))
    out_t = fn(xm.to(DEV), dim=-1).cpu()
    torch.testing.assert_close(out_t, fn(xm, dim=-1))
    if not log:  # minGPT's pattern, with gradients through masked_fill
        check(lambda t: fn(t.masked_fill(~mask.to(t.device), float("-inf")), dim=-1), torch.randn(2, 3, T, T))
    full = torch.full((4, 9), float("-inf"))
    full[1, 3] = 2.0
    a, b = fn(full.to(DEV), dim=-1).cpu(), fn(full, dim=-1)
    assert torch.isnan(a[0]).all() and torch.isnan(b[0]).all()
    torch.testing.assert_close(a, b, equal_nan=True)


# n = 1 is left out here: x - mean is exactly 0 on the tpu, so d weight = sum g xh is exactly 0, while
# the CPU's rounding noise times rstd = 1/sqrt(eps) ~ 316 gives ~1e-4 (test_layer_norm_single below)
@pytest.mark.parametrize("n", LENS[1:])
@pytest.mark.parametrize("affine", [0, 1, 2, 3])
def test_layer_norm_rows(n, affine):
    rows = 3 if n > 1000 else 17
    x = torch.randn(rows, n) * 5 + 3
    args = [x]
    if affine & 1:
        args.append(torch.randn(n))
    if affine & 2:
        args.append(torch.randn(n))

    def fn(t, *wb):
        w = wb[0] if affine & 1 else None
        b = wb[-1] if affine & 2 else None
        return F.layer_norm(t, (n,), w, b, 1e-5)
    check(fn, *args, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_layer_norm_dtypes_and_views(dtype):
    x = (torch.randn(4, 10, 24) * 2).to(dtype)
    w, b = torch.randn(10, 24).to(dtype), torch.randn(10, 24).to(dtype)
    tol = {} if dtype == torch.float64 else {"atol": 5e-2, "rtol": 2e-2}
    check(lambda t, w_, b_: F.layer_norm(t, (10, 24), w_, b_), x, w, b, **tol)
    check(lambda t, w_: F.layer_norm(t.transpose(0, 1)[::2], (4, 24), w_), x, torch.randn(4, 24).to(dtype), **tol)


def test_layer_norm_single():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(17, 1, generator=gen) * 5 + 3
    w, b = torch.randn(1, generator=gen), torch.randn(1, generator=gen)
    (o_t, g_t), (o_c, g_c) = run_both(lambda t, w_, b_: F.layer_norm(t, (1,), w_, b_), x, w, b)
    torch.testing.assert_close(o_t, o_c)
    # d input is exactly 0 for a one-element row (the normalized value does not depend on x); both
    # backends return x's rounding error times rstd = 1/sqrt(eps): bound that noise, on both sides.
    noise = 4 * torch.finfo(torch.float32).eps * x.abs().max() / 1e-5 ** 0.5
    for g in (g_t[0], g_c[0]):
        assert g.abs().max() <= noise, (g.abs().max(), noise)
    torch.testing.assert_close(g_t[2], g_c[2])  # d bias
    assert g_t[1].abs().max() <= g_c[1].abs().max()  # d weight: exactly 0 here, rounding noise on the CPU


_THREADS_CODE = r"""
import hashlib, sys, torch, torch_tpu
import torch.nn.functional as F
g = torch.Generator().manual_seed(3)
att = torch.randn(8, 4, 64, 64, generator=g).masked_fill(~torch.tril(torch.ones(64, 64, dtype=torch.bool)), float("-inf"))
w, b = (torch.randn(128, generator=g).to("tpu").requires_grad_() for _ in range(2))
w64, b64 = (torch.randn(64, generator=g).to("tpu").requires_grad_() for _ in range(2))
cases = [  # (input, fn, parameters whose gradients are checked too)
    (att, lambda x: F.softmax(x, dim=-1), []),
    (torch.randn(2048, 96, generator=g), lambda x: F.log_softmax(x, dim=-1), []),
    (torch.randn(64, 515, 9, generator=g), lambda x: F.softmax(x, dim=1), []),
    (torch.randn(32, 64, 128, generator=g) * 3 + 1, lambda x: F.layer_norm(x, (128,), w, b), [w, b]),
    (torch.randn(16, 64, 16, 16, generator=g), lambda x: F.group_norm(x, 8, w64, b64), [w64, b64]),
    (torch.randn(16, 128, 4, 4, generator=g), lambda x: F.group_norm(x, 8, w, b), [w, b]),
    (torch.randn(8, 32, 24, 24, generator=g), lambda x: F.batch_norm(x, None, None, training=True), []),
]
h = hashlib.sha256()
for x, fn, ps in cases:
    xd = x.to("tpu").requires_grad_()
    y = fn(xd)
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(5)).to("tpu")
    grads = torch.autograd.grad(y, [xd, *ps], gy)
    for t in (y, *grads):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
print(h.hexdigest())
"""


def test_rows_bits_independent_of_threads():
    """Row / norm kernels split rows, channels and column blocks over the thread pool; every reduction stays within
    one row or channel, so 1, 2 and 3 threads (the last splitting the 2-core machine's work unevenly) give the
    same bits, forward and backward."""
    import os
    import subprocess
    import sys
    outs = []
    for n in ("1", "2", "3"):
        env = dict(os.environ, TORCH_TPU_NUM_THREADS=n)
        r = subprocess.run([sys.executable, "-c", _THREADS_CODE], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(r.stdout.strip().splitlines()[-1])
    assert outs[0] == outs[1] == outs[2], outs
