"""F.scaled_dot_product_attention on the tpu device vs PyTorch CPU: the fused flash-style
kernel (overrideable backend: causal, bool/float masks, scale, GQA via enable_gqa,
non-contiguous layouts, fully masked rows, f32/bf16/f16) and the math path (dropout,
f64, a mask that needs a gradient, forced math) — forward and backward."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

DEV = "tpu"


def run(dev, q, k, v, dtype=torch.float32, **kw):
    q, k, v = [t.detach().to(dev, dtype).requires_grad_() for t in (q, k, v)]
    kw = {a: (b.to(dev) if isinstance(b, torch.Tensor) else b) for a, b in kw.items()}
    o = F.scaled_dot_product_attention(q, k, v, **kw)
    g = torch.linspace(-1, 1, o.numel()).reshape(o.shape).to(dev, o.dtype)
    o.backward(g)
    return o, [o.detach().cpu(), q.grad.cpu(), k.grad.cpu(), v.grad.cpu()]


def compare(B, Hq, Hk, T, S, E, Ev, dtype=torch.float32, fused=True, **kw):
    torch.manual_seed(0)
    q, k, v = torch.randn(B, Hq, T, E), torch.randn(B, Hk, S, E), torch.randn(B, Hk, S, Ev)
    if Hq != Hk:
        kw["enable_gqa"] = True
    o_t, t = run(DEV, q, k, v, dtype, **kw)
    _, c = run("cpu", q, k, v, dtype, **kw)
    assert o_t.device.type == DEV
    if fused:
        assert "FusedAttentionOverrideable" in type(o_t.grad_fn).__name__, o_t.grad_fn
    tol = {} if dtype != torch.float32 else {"atol": 2e-5, "rtol": 2e-4}
    if dtype == torch.bfloat16:
        tol = {"atol": 4e-2, "rtol": 4e-2}
    elif dtype == torch.float16:
        tol = {"atol": 5e-3, "rtol": 5e-3}
    for name, a, b in zip(("out", "dq", "dk", "dv"), t, c):
        assert a.dtype == b.dtype, name
        torch.testing.assert_close(a, b, equal_nan=True, msg=lambda m: f"{name}: {m}", **tol)


SHAPES = [(2, 4, 4, 8, 8, 16, 16), (1, 3, 3, 70, 130, 8, 12), (2, 2, 2, 1, 1, 4, 4)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_fused(shape, causal):
    compare(*shape, is_causal=causal)


# the host kernel stacks up to 4 query heads of one kv head per task (drivers/host/attention.c): groups of
# 6 and 8 heads run in chunks (4 + 2, 4 + 4), with query blocks past 64 rows and key blocks past 128
@pytest.mark.parametrize("shape", [(1, 4, 2, 9, 9, 8, 8), (2, 4, 1, 5, 11, 4, 6), (2, 6, 1, 7, 7, 8, 8),
                                   (1, 8, 1, 70, 130, 8, 4), (2, 16, 2, 32, 32, 16, 16)])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_gqa(shape, causal):
    compare(*shape, is_causal=causal)


def test_sdpa_scale():
    compare(2, 2, 2, 6, 7, 8, 8, scale=0.3)
    compare(1, 4, 2, 6, 6, 8, 8, scale=1.7, is_causal=True)


@pytest.mark.parametrize("mask_shape", [(7, 9), (2, 1, 7, 9), (2, 3, 7, 9), (1, 9)])
def test_sdpa_masks(mask_shape):
    g = torch.Generator().manual_seed(3)
    compare(2, 3, 3, 7, 9, 8, 8, attn_mask=torch.rand(mask_shape, generator=g) > 0.3)
    compare(2, 3, 3, 7, 9, 8, 8, attn_mask=torch.randn(mask_shape, generator=g))


def test_sdpa_fully_masked_rows():
    m = torch.ones(6, 6, dtype=torch.bool)
    m[2] = False  # PyTorch's math path gives zeros (and zero gradients) for such rows
    compare(1, 2, 2, 6, 6, 4, 4, attn_mask=m)
    fm = torch.zeros(6, 6)
    fm[4] = float("-inf")
    compare(1, 2, 2, 6, 6, 4, 4, attn_mask=fm)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sdpa_low_precision(dtype):
    compare(2, 4, 4, 17, 17, 16, 16, dtype=dtype, is_causal=True)
    compare(1, 4, 2, 9, 5, 8, 8, dtype=dtype)


def test_sdpa_transposed_layout():
    # (B, T, H, E) projections viewed as (B, H, T, E), as models do
    torch.manual_seed(1)
    x = torch.randn(2, 10, 3, 8)
    outs = []
    for dev in (DEV, "cpu"):
        q = x.to(dev).requires_grad_()
        qt = q.transpose(1, 2)
        assert not qt.is_contiguous()
        o = F.scaled_dot_product_attention(qt, qt * 0.5, qt, is_causal=True)
        o.square().sum().backward()
        outs.append((o.detach().cpu(), q.grad.cpu()))
    torch.testing.assert_close(outs[0][0], outs[1][0], atol=2e-5, rtol=2e-4)
    torch.testing.assert_close(outs[0][1], outs[1][1], atol=2e-5, rtol=2e-4)


def test_sdpa_math_paths():
    compare(1, 2, 2, 5, 5, 4, 4, dtype=torch.float64, fused=False, is_causal=True)
    with sdpa_kernel([SDPBackend.MATH]):
        compare(1, 2, 2, 5, 5, 4, 4, fused=False, is_causal=True)
    # a mask that requires grad goes to the math path and gets its gradient
    torch.manual_seed(0)
    q = torch.randn(1, 2, 4, 4)
    res = []
    for dev in (DEV, "cpu"):
        m = torch.linspace(-1, 1, 16).reshape(4, 4).to(dev).requires_grad_()
        qd = q.to(dev).requires_grad_()
        F.scaled_dot_product_attention(qd, qd, qd, attn_mask=m).sum().backward()
        res.append((m.grad.cpu(), qd.grad.cpu()))
    torch.testing.assert_close(res[0][0], res[1][0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(res[0][1], res[1][1], atol=1e-5, rtol=1e-4)


def test_sdpa_dropout():
    # math path with native dropout: zero-prob rows statistics, gradient flows, p=1 gives zeros
    torch.manual_seed(0)
    q = torch.randn(2, 2, 8, 4, device=DEV, requires_grad=True)
    o = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert o.shape == q.shape and torch.isfinite(o.cpu()).all()
    o.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad.cpu()).all()
    z = F.scaled_dot_product_attention(q, q, q, dropout_p=1.0)
    torch.testing.assert_close(z.cpu(), torch.zeros(2, 2, 8, 4))


def test_sdpa_errors():
    q = torch.randn(1, 4, 3, 8, device=DEV)
    k = torch.randn(1, 2, 3, 8, device=DEV)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, k, k)  # heads differ without enable_gqa
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(5, 5, device=DEV))


def test_sdpa_module_like():
    # nn.MultiheadAttention-free GPT block pattern: qkv projection, causal SDPA, output proj
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 48)
    x = torch.randn(2, 6, 16)
    res = []
    for dev in (DEV, "cpu"):
        m = lin.to(dev)
        m.zero_grad()
        q, k, v = m(x.to(dev)).view(2, 6, 3, 2, 8).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        y.transpose(1, 2).reshape(2, 6, 16).square().mean().backward()
        res.append((y.detach().cpu(), m.weight.grad.cpu()))
    torch.testing.assert_close(res[0][0], res[1][0], atol=2e-5, rtol=2e-4)
    torch.testing.assert_close(res[0][1], res[1][1], atol=2e-5, rtol=2e-4)


@pytest.mark.parametrize("shape", [(2, 3, 5, 7, 4), (1, 2, 9, 3, 6)])  # B, H, T, S, E
def test_sdpa_forward_does_not_synchronize(shape):
    # The fused forward returns max_q / max_k as ints; they come from the meta function's shapes,
    # not from reading a device result back (which would wait for the queue every call).
    import torch_tpu

    B, H, T, S, E = shape
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, n, E).to(DEV) for n in (T, S, S))
    for causal in (False, True):
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # warm the meta cache
        before = torch_tpu.metrics()["host_waits"]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        r = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v, is_causal=causal)
        assert torch_tpu.metrics()["host_waits"] == before
        assert r[4] == T and r[5] == S  # max_q, max_k
        ref = F.scaled_dot_product_attention(q.cpu(), k.cpu(), v.cpu(), is_causal=causal)
        torch.testing.assert_close(out.cpu(), ref, atol=2e-5, rtol=2e-4)
        torch.testing.assert_close(r[0].cpu(), ref, atol=2e-5, rtol=2e-4)
