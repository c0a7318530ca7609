"""The host's strided copy (drivers/host/kernels.c tpu_host_k_copy: contiguous/permuted/sliced views,
cat's per-input copies, dtype conversions) vs PyTorch CPU, bit-exact. Rows start from any outer index
(the pool splits rows into chunks; each chunk's offsets come from one division and then advance as an
odometer), short unit-stride rows take an inline loop. Ranks 1-5, odd sizes, sliced/stepped/permuted
strides, f32/bf16/f64/i64/bool, and RoPE's cat of a negated half with a slice."""
from __future__ import annotations

import itertools

import pytest
import torch

DEV = "tpu"


def gen(seed):
    return torch.Generator().manual_seed(seed)


def rand(shape, dtype, seed):
    x = torch.randn(shape, generator=gen(seed)) * 100
    if dtype == torch.bool:
        return x > 0
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.bool])
@pytest.mark.parametrize("shape", [(7,), (5, 9), (3, 4, 5), (2, 3, 4, 5), (2, 3, 1, 4, 3), (33, 2, 17)])
def test_permuted_contiguous(dtype, shape):
    x = rand(shape, dtype, seed=len(shape))
    xd = x.to(DEV)
    for perm in itertools.islice(itertools.permutations(range(len(shape))), 12):
        assert torch.equal(xd.permute(perm).contiguous().cpu(), x.permute(perm).contiguous())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_sliced_and_stepped(dtype):
    x = rand((9, 10, 11, 12), dtype, seed=3)
    xd = x.to(DEV)
    views = [lambda a: a[1:8, ::2, 3:, ::3], lambda a: a[:, :, :, 5:9], lambda a: a[::4, 2:3, ::5, :],
             lambda a: a.transpose(0, 3)[2:, 1:, :, ::2], lambda a: a[..., 0]]
    for v in views:
        assert torch.equal(v(xd).contiguous().cpu(), v(x).contiguous())
        out = torch.empty_like(v(x)).t() if v(x).dim() == 2 else None
        if out is not None:
            od = out.to(DEV)
            od.copy_(v(xd).t())
            assert torch.equal(od.cpu(), out.copy_(v(x).t()))


def test_many_rows_split_over_chunks():
    # short rows (8 floats) and enough of them that the pool cuts the range into several chunks
    x = rand((64, 40, 33, 16), torch.float32, seed=4)
    xd = x.to(DEV)
    for v in (lambda a: a[..., 8:], lambda a: a.transpose(1, 2)[..., :8], lambda a: a[:, ::3, 1::2, 3:11]):
        assert torch.equal(v(xd).contiguous().cpu(), v(x).contiguous())
    y = rand((1000, 3, 7), torch.float32, seed=5)
    assert torch.equal(y.to(DEV).permute(2, 0, 1).contiguous().cpu(), y.permute(2, 0, 1).contiguous())


@pytest.mark.parametrize("src,dst", [(torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32),
                                     (torch.float32, torch.int64), (torch.int64, torch.float64)])
def test_converting_copies(src, dst):
    x = rand((6, 7, 8, 9), src, seed=6)
    xd = x.to(DEV)
    for v in (lambda a: a.permute(3, 1, 0, 2), lambda a: a[1::2, :, 2:7, ::2]):
        assert torch.equal(v(xd).to(dst).cpu(), v(x).to(dst))


def test_rope_cat():
    q = torch.randn(16, 32, 8, 16, generator=gen(7)).transpose(1, 2)  # (B, H, T, hd) view
    qd = q.to(DEV)
    for dim in (-1, 3):
        t = torch.cat([-qd[..., 8:], qd[..., :8]], dim).cpu()
        assert torch.equal(t, torch.cat([-q[..., 8:], q[..., :8]], dim))
    parts = [rand((5, 3, 4), torch.float32, seed=s) for s in range(3)]
    for dim in range(3):
        views = [p.transpose(0, 2) if dim != 1 else p[:, :, 1:] for p in parts]
        t = torch.cat([v.to(DEV) for v in views], dim).cpu()
        assert torch.equal(t, torch.cat(views, dim))
