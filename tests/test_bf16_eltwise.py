"""bf16 / f16 (and narrow integer) elementwise ops against PyTorch CPU, bit for bit.

Their clusters read and write through CONVERTs: convert(bf16 leaf) -> op -> convert to bf16. The host executor
(drivers/host/exec.c member_skip) does not copy an identity CONVERT of a leaf (f32 from bf16 / f16, i64 from a
narrower integer) and stores a root CONVERT's operand straight into the output, which narrows it as the CONVERT
would have. These tests hit each leaf mode (loaded, broadcast scalar, broadcast rows, transposed / sliced),
short and long rows, in-place updates, strided outputs, mixed dtypes and fused eager. The ops round once per op
to the output dtype on both sides, so every non-NaN result must be the CPU's bits.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

pytestmark = pytest.mark.skipif(not torch.tpu.is_available(), reason="no tpu device")

LOWP = [torch.bfloat16, torch.float16]


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.is_floating_point:
        nan = want.isnan()
        assert torch.equal(got.isnan(), nan)
        assert torch.equal(got[~nan], want[~nan])
        w = torch.int16 if want.element_size() == 2 else torch.int32
        assert torch.equal(got[~nan].view(w), want[~nan].view(w))  # signed zeros too
    else:
        assert torch.equal(got, want)


def _special(x: torch.Tensor) -> torch.Tensor:
    """x with NaN, infinities, signed zeros, subnormals and values near the rounding boundaries mixed in."""
    f = x.float().flatten().clone()
    vals = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-40, -3e-39, 65504.0, 3e38,
                         1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -9, -(1.0 + 2.0 ** -8)])
    idx = torch.arange(0, f.numel(), 7)[: vals.numel()]
    f[idx] = vals[: idx.numel()]
    return f.view(x.shape).to(x.dtype)


def _rand(shape, dtype, gen, special=True):
    x = (torch.randn(shape, generator=gen) * 3).to(dtype)
    return _special(x) if special else x


OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: torch.sub(a, b),
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "chain": lambda a, b: (a * b + a) * 0.5,
    "max": lambda a, b: torch.maximum(a, b),
    "where": lambda a, b: torch.where(a > b, a, -b),
    "neg_abs": lambda a, b: (-a).abs() - b,
}


@pytest.mark.parametrize("dtype", LOWP)
@pytest.mark.parametrize("shape", [(7,), (3, 1031), (37, 129), (2, 5, 2053), (64, 3)])
@pytest.mark.parametrize("op", sorted(OPS))
def test_binary_layouts(dtype, shape, op):
    gen = torch.Generator().manual_seed(hash((str(dtype), shape, op)) % 2**31)
    fn = OPS[op]
    a, b = _rand(shape, dtype, gen), _rand(shape, dtype, gen)
    ad, bd = a.to("tpu"), b.to("tpu")
    _same(fn(ad, bd), fn(a, b))
    # transposed / flipped and sliced operands (loaded by rows), contiguous output
    at = a.t() if a.dim() == 2 else a.flip(-1)
    bt = b.t() if b.dim() == 2 else b.flip(0)
    _same(fn(ad.t() if a.dim() == 2 else ad.flip(-1), bd.t() if b.dim() == 2 else bd.flip(0)), fn(at, bt))
    _same(fn(ad[..., 1:], bd[..., :-1]), fn(a[..., 1:], b[..., :-1]))
    _same(fn(ad[..., 1::2], bd[..., :-1:2]), fn(a[..., 1::2], b[..., :-1:2]))
    # broadcast scalar and broadcast rows
    s = _rand((), dtype, gen, special=False)
    _same(fn(ad, s.to("tpu")), fn(a, s))
    r = _rand(shape[:-1] + (1,), dtype, gen, special=False)
    _same(fn(r.to("tpu"), bd), fn(r, b))
    c = _rand(shape[-1:], dtype, gen, special=False)
    _same(fn(ad, c.to("tpu")), fn(a, c))


@pytest.mark.parametrize("dtype", LOWP)
def test_alpha_rounds_once(dtype):
    """a - alpha * b computed in f32 and rounded once (PyTorch CPU's bf16 kernel fuses the multiply-add, which
    rounds differently in ~1e-4 of the cases, so the reference is the f32 formula)."""
    gen = torch.Generator().manual_seed(2)
    a, b = _rand((5, 2049), dtype, gen), _rand((5, 2049), dtype, gen)
    want = (a.float() - b.float() * 3).to(dtype)
    _same(torch.sub(a.to("tpu"), b.to("tpu"), alpha=3), want)
    ad = a.to("tpu")
    ad.t().sub_(b.to("tpu").t(), alpha=3)
    _same(ad, want)


@pytest.mark.parametrize("dtype", LOWP)
def test_inplace_and_strided_out(dtype):
    gen = torch.Generator().manual_seed(3)
    a, b = _rand((33, 517), dtype, gen), _rand((33, 517), dtype, gen)
    ac, ad = a.clone(), a.to("tpu")
    ac.add_(b).mul_(0.75).sub_(b)
    ad.add_(b.to("tpu")).mul_(0.75).sub_(b.to("tpu"))
    _same(ad, ac)
    # in place on a transposed view (rows do not abut)
    ac, ad = a.clone(), a.to("tpu")
    ac.t().mul_(3).add_(1)
    ad.t().mul_(3).add_(1)
    _same(ad, ac)
    # into every other row / column of a bigger tensor
    for sl in ((slice(None, None, 2), slice(None)), (slice(None), slice(None, None, 2))):
        big_c = torch.zeros(66, 1034, dtype=dtype)
        big_d = big_c.to("tpu")
        torch.mul(a, b, out=big_c[sl][:33, :517])
        torch.mul(a.to("tpu"), b.to("tpu"), out=big_d[sl][:33, :517])
        _same(big_d, big_c)


@pytest.mark.parametrize("dtype", LOWP)
def test_mixed_with_f32(dtype):
    """bf16 + f32 -> f32 (an identity convert of the bf16 leaf feeds an op writing f32 in place), an f32 result
    rounded to bf16 (a root convert fed by an f32 leaf read in place) and in-place f32 updates by bf16."""
    gen = torch.Generator().manual_seed(4)
    a = _rand((19, 1100), dtype, gen)
    x = _rand((19, 1100), torch.float32, gen)
    _same(a.to("tpu") + x.to("tpu"), a + x)
    _same(x.to("tpu").t().to(dtype), x.t().to(dtype))
    _same((x.to("tpu") * 3).to(dtype), (x * 3).to(dtype))
    xc, xd = x.clone(), x.to("tpu")
    xc.add_(a).mul_(a)
    xd.add_(a.to("tpu")).mul_(a.to("tpu"))
    _same(xd, xc)
    ac, ad = a.clone(), a.to("tpu")
    ac.add_(x)  # bf16 += f32: computed in f32, rounded once
    ad.add_(x.to("tpu"))
    _same(ad, ac)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.bool])
def test_narrow_integers(dtype):
    """i64-class clusters: identity widenings of narrow leaves, the root's wrap done by the store."""
    gen = torch.Generator().manual_seed(5)
    if dtype == torch.bool:
        a, b = (torch.randint(0, 2, (37, 1029), generator=gen).bool() for _ in range(2))
        for fn in (lambda a, b: a & b, lambda a, b: a ^ b.t().t(), lambda a, b: ~a | b):
            _same(fn(a.to("tpu"), b.to("tpu")), fn(a, b))
        return
    lo, hi = (0, 256) if dtype == torch.uint8 else (-(2 ** 15), 2 ** 15)
    a, b = (torch.randint(lo, hi, (37, 1029), generator=gen).to(dtype) for _ in range(2))
    for fn in (lambda a, b: a + b, lambda a, b: a * b - a, lambda a, b: (a + 7) * 3):
        _same(fn(a.to("tpu"), b.to("tpu")), fn(a, b))
        _same(fn(a.to("tpu").t(), b.to("tpu").t()), fn(a.t(), b.t()))
    ac, ad = a.clone(), a.to("tpu")
    ac.mul_(5).add_(b)
    ad.mul_(5).add_(b.to("tpu"))
    _same(ad, ac)


@pytest.mark.parametrize("dtype", LOWP)
def test_fused_eager_matches_strict(dtype):
    """Longer fused clusters (converts between members, a GELU custom call, an f32 stretch) give strict eager's
    bits."""
    gen = torch.Generator().manual_seed(6)
    a, b = _rand((8, 64, 129), dtype, gen), _rand((8, 64, 129), dtype, gen)
    x = torch.randn(8, 64, 129, generator=gen)

    def fn(a, b, x):
        y = F.gelu(a * b + a) * 0.5
        z = (y.float() * x + 1).to(dtype)
        return y, z, (z - a).abs().to(torch.float32) * x

    dev = [t.to("tpu") for t in (a, b, x)]
    strict = [t.cpu() for t in fn(*dev)]
    with torch_tpu.fused_eager():
        fused = [t.cpu() for t in fn(*dev)]
    for s, f in zip(strict, fused):
        assert torch.equal(s.view(torch.int16 if s.element_size() == 2 else torch.int32),
                           f.view(torch.int16 if f.element_size() == 2 else torch.int32))


@pytest.mark.parametrize("shape", [(3, 1031), (37, 129), (2, 4, 64, 64)])
def test_bf16_scalar_operands(shape):
    """bf16 tensor OP scalar and scalar OP tensor (a Python float, a 0-dim bf16 tensor) with the tensor
    contiguous, sliced or in place: the host driver's one-pass bf16 kernels (exec.c cluster_bin_bf16)."""
    gen = torch.Generator().manual_seed(5)
    a = _rand(shape, torch.bfloat16, gen)
    ad = a.to("tpu")
    for s in (0.5, -3.0, 1e-40, float("inf"), float("nan")):
        for fn in (lambda x: x * s, lambda x: x + s, lambda x: s - x, lambda x: x / s, lambda x: s / x):
            _same(fn(ad), fn(a))
            _same(fn(ad[..., 1:]), fn(a[..., 1:]))
    s = torch.tensor(1.5, dtype=torch.bfloat16)
    sd = s.to("tpu")
    _same(ad * sd, a * s)
    _same(sd - ad, s - a)
    _same(ad / sd, a / s)
    ac, adi = a.clone(), a.to("tpu")
    ac.mul_(0.75).add_(1.0)
    adi.mul_(0.75).add_(1.0)
    _same(adi, ac)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.int8, torch.float64])
def test_large_transposing_copies(dtype):
    """Copies over 256 KiB (drivers/host/kernels.c tpu_host_k_copy): transposes in 32 x 32 tiles (odd edges,
    flipped and sliced sources) and short contiguous rows (attention heads), bytes as they are."""
    gen = torch.Generator().manual_seed(7)
    big = lambda *s: (torch.randn(s, generator=gen) * 100).to(dtype)  # noqa: E731
    qkv = big(32, 64, 3 * 128)
    cases = [
        (qkv, lambda t: t[:, :, 128:256].view(32, 64, 4, 32).transpose(1, 2).transpose(-2, -1)),  # k^T
        (qkv, lambda t: t[:, :, :128].view(32, 64, 4, 32).transpose(1, 2)),  # heads: rows of 32
        (big(32, 4, 64, 32), lambda t: t.transpose(1, 2)),
        (big(37, 300, 41), lambda t: t.permute(0, 2, 1)),
        (big(37, 300, 41), lambda t: t.flip(1).permute(2, 0, 1)),
        (big(70, 9, 1000), lambda t: t[:, 1:, 3:].transpose(0, 2)),
        (big(3, 130, 7, 129), lambda t: t.permute(0, 3, 1, 2)),
        (big(5, 3, 100, 101), lambda t: t.permute(1, 0, 3, 2)),
    ]
    for x, f in cases:
        want = f(x).contiguous()
        got = f(x.to("tpu")).contiguous()
        assert got.stride() == want.stride()
        assert torch.equal(got.cpu(), want)
        dst_c = torch.zeros_like(want)
        dst_d = dst_c.to("tpu")
        dst_c.copy_(f(x))
        dst_d.copy_(f(x.to("tpu")))
        assert torch.equal(dst_d.cpu(), dst_c)


LOWP_OPS = {  # one-pass low-precision clusters (exec.c cluster_lowp): ops that round once, so bit for bit
    "masked_fill": lambda a, b, m: a.masked_fill(~m, float("-inf")),
    "clamp": lambda a, b, m: torch.clamp(a * b, -1.5, 2.0),
    "sqrt_recip": lambda a, b, m: torch.sqrt(a.abs()) + torch.reciprocal(b),
    "where_scalar": lambda a, b, m: torch.where(m, a - 1.0, b * 2),
    "minmax_neg": lambda a, b, m: torch.minimum(torch.maximum(a, -b), b.abs()),
    "row_col": lambda a, b, m: a * b[..., :1] + b[..., :1, :],
    # converts inside a program: a rounding one read straight from its source, a root one left to the store, one to
    # f32 of a member (minGPT bf16's attention backward: f32 grad -> bf16, masked_fill 0, * scale)
    "convert_chain": lambda a, b, m: (a.float() * 1.5).to(a.dtype).masked_fill(m, 0.0) * 0.17,
    "to_float_root": lambda a, b, m: (a * b).masked_fill(m, 1.0).float(),
    "float_member": lambda a, b, m: ((a * b).float() * b.float()).masked_fill(m, 2.0).to(a.dtype),
}


@pytest.mark.parametrize("fused", [False, True], ids=["strict", "fused"])
@pytest.mark.parametrize("dtype", LOWP)
@pytest.mark.parametrize("shape", [(3, 1000), (7, 33, 129), (4, 2, 64, 64)])
@pytest.mark.parametrize("op", sorted(LOWP_OPS))
def test_lowp_clusters(dtype, shape, op, fused):
    """strict eager: the clusters one op lowers to (masked_fill, clamp, where); fused eager: the whole expression
    (and the in-place chain) as one cluster, the case the one-pass programs are for."""
    with torch_tpu.fused_eager(fused):
        _lowp_cluster_case(dtype, shape, op)


def _lowp_cluster_case(dtype, shape, op):
    gen = torch.Generator().manual_seed(11)
    a, b = _rand(shape, dtype, gen), _rand(shape, dtype, gen)
    m = torch.rand(shape[-2:], generator=gen) > 0.3  # a mask broadcast over the leading dims
    fn = LOWP_OPS[op]
    _same(fn(a.to("tpu"), b.to("tpu"), m.to("tpu")), fn(a, b, m))
    # transposed operands (the tile path for them) and in place
    at, bt = a.transpose(-1, -2), b.transpose(-1, -2)
    mt = m.transpose(-1, -2)
    _same(fn(at.to("tpu"), bt.to("tpu"), mt.to("tpu")), fn(at, bt, mt))
    x, xt = a.clone(), a.to("tpu")
    x.mul_(b).add_(1.0)
    xt.mul_(b.to("tpu")).add_(1.0)
    _same(xt, x)
