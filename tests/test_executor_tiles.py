"""The host executor's elementwise tile loop (drivers/host/exec.c) against PyTorch CPU.

The loop reads contiguous f32/f64/i64 leaves in place, fills broadcast leaves once per source element,
converts or gathers the others, and writes the root straight into a contiguous output of a register
dtype (through its tile buffer otherwise, or when an input is the output itself). Each test below hits
one of those paths with odd sizes, rows shorter and longer than a tile (512), non-contiguous views,
in-place ops and fused-eager chains; fused eager must equal strict eager bit for bit.
"""
from __future__ import annotations

import pytest
import torch

import torch_tpu

pytestmark = pytest.mark.skipif(not torch.tpu.is_available(), reason="no tpu device")


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.is_floating_point:
        tol = {torch.bfloat16: 1e-2, torch.float16: 1e-3}.get(want.dtype, 1e-6)
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    else:
        assert torch.equal(got, want)


def _rand(shape, dtype, gen):
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    return torch.randint(-50, 50, shape, generator=gen).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(7,), (3, 1500), (37, 129), (2, 5, 1031)])
def test_binary_chain_layouts(dtype, shape):
    gen = torch.Generator().manual_seed(1)
    a, b, c = (_rand(shape, dtype, gen) for _ in range(3))
    fn = lambda a, b, c: (a + b * 3) * c - a  # noqa: E731  one cluster: leaves a, b, c, the scalars
    _close(fn(a.to("tpu"), b.to("tpu"), c.to("tpu")), fn(a, b, c))
    # non-contiguous inputs (transposed / sliced), contiguous output
    at, bt = a.t() if a.dim() == 2 else a.flip(0), b[..., ::2] if shape[-1] > 2 else b
    ct = c.t() if c.dim() == 2 else c
    if bt.shape == at.shape:
        _close(fn(at.to("tpu"), bt.to("tpu"), ct.to("tpu")), fn(at, bt, ct))
    _close(fn(a.to("tpu")[..., 1:], b.to("tpu")[..., 1:], c.to("tpu")[..., :-1]), fn(a[..., 1:], b[..., 1:], c[..., :-1]))


@pytest.mark.parametrize("shape", [(37, 129), (3, 1500), (4, 6, 700), (5, 33, 64), (300, 3), (2, 3, 7, 40)])
def test_row_and_column_broadcasts(shape):
    """Leaves with stride 0 along the tile (row statistics) change value from row to row."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(shape, generator=gen)
    mu = x.mean(-1, keepdim=True)
    col = torch.randn(shape[-1], generator=gen)
    fn = lambda x, mu, col: (x - mu) * col + mu * 2  # noqa: E731
    _close(fn(x.to("tpu"), mu.to("tpu"), col.to("tpu")), fn(x, mu, col))
    if len(shape) == 3:
        first = x[:, :1, :]  # broadcast along dim 1 only
        _close(x.to("tpu") * x.to("tpu")[:, :1, :] + 1, x * first + 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_inplace(dtype, layout):
    """In-place ops: the output is one of the inputs (same view)."""
    gen = torch.Generator().manual_seed(3)
    base = _rand((33, 1037), dtype, gen)
    y = _rand((33, 1037), dtype, gen)

    def view(t):
        return {"contiguous": t, "transposed": t.t(), "sliced": t[:, 3:1000:2]}[layout]

    cpu, dev = base.clone(), base.to("tpu")
    yc, yd = view(y), view(y.to("tpu"))
    view(cpu).mul_(yc).add_(yc, alpha=2)
    view(dev).mul_(yd).add_(yd, alpha=2)
    _close(dev, cpu)
    # the output read twice by the same op, and a scalar-only update
    view(cpu).add_(view(cpu))
    view(dev).add_(view(dev))
    view(cpu).mul_(3)
    view(dev).mul_(3)
    _close(dev, cpu)


def test_out_noncontiguous_and_mixed_dtypes():
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(41, 600, generator=gen)
    i = torch.randint(-9, 9, (41, 600), generator=gen, dtype=torch.int32)
    out_cpu = torch.empty(600, 41).t()
    out_dev = torch.empty(600, 41, device="tpu").t()
    torch.mul(a, i, out=out_cpu)
    torch.mul(a.to("tpu"), i.to("tpu"), out=out_dev)
    _close(out_dev, out_cpu)
    # bool result and f64 promotion
    d = torch.randn(41, 600, generator=gen, dtype=torch.float64)
    _close((a.to("tpu") + d.to("tpu")) > 0.25, (a + d) > 0.25)
    _close(a.to("tpu") + d.to("tpu"), a + d)


def test_scalar_outputs_and_inplace_scalar():
    s_cpu = torch.tensor(1.5)
    s_dev = s_cpu.to("tpu")
    for k in range(3):
        s_cpu.mul_(s_cpu).add_(k)
        s_dev.mul_(s_dev).add_(k)
    _close(s_dev, s_cpu)


def _tree(xs):
    a, b, c, d, e, f, g, h = xs
    t = ((a + b) * (c - d)) + ((e * f) / (g.abs() + 1)) - (h * a)
    return (t.tanh() * t.exp().clamp(max=30) + (a * b).sigmoid()).sum(0)


@pytest.mark.parametrize("n", [511, 2049])
def test_fused_chain_matches_strict_and_cpu(n):
    """Long fused-eager clusters (many members, few live tile registers) and in-place updates in them."""
    gen = torch.Generator().manual_seed(5)
    xs = [torch.randn(3, n, generator=gen) for _ in range(8)]

    def fn(*ts):
        acc = ts[0].clone()
        for k in range(12):
            acc.mul_(0.9).add_(ts[k % 8], alpha=0.1)
        return acc, _tree(ts)

    dev = [x.to("tpu") for x in xs]
    strict = [t.cpu() for t in fn(*dev)]
    with torch_tpu.fused_eager():
        fused = [t.cpu() for t in fn(*dev)]
    for s, f, c in zip(strict, fused, fn(*xs)):
        assert torch.equal(s, f)
        _close(s, c)


@pytest.mark.parametrize("shape", [(5, 33, 64), (300, 3), (7, 2, 129), (4, 37, 200)])
def test_short_rows(shape):
    """Rows shorter than a tile run several per tile: abutting or not, in place, into strided outputs."""
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(shape, generator=gen)
    y = torch.randn(shape[:-2] + (shape[-1], shape[-2]), generator=gen).transpose(-1, -2)  # rows do not abut
    st = x.amax(-1, keepdim=True)
    fn = lambda x, y, st: ((x - st).exp() * y + st).to(torch.bfloat16)  # noqa: E731  bf16: buffered store
    _close(fn(x.to("tpu"), y.to("tpu"), st.to("tpu")), fn(x, y, st))
    fn2 = lambda x, y, st: (x - st) * y  # noqa: E731
    _close(fn2(x.to("tpu"), y.to("tpu"), st.to("tpu")), fn2(x, y, st))
    # every other row of a bigger tensor: output rows do not abut
    big_c = torch.zeros(shape[:-2] + (shape[-2] * 2, shape[-1]))
    big_d = big_c.to("tpu")
    torch.mul(x, y, out=big_c[..., ::2, :])
    torch.mul(x.to("tpu"), y.to("tpu"), out=big_d[..., ::2, :])
    _close(big_d, big_c)
    # in place on a transposed (rows do not abut) view
    xc, xd = x.clone(), x.to("tpu")
    xc.transpose(-1, -2).mul_(2).sub_(1)
    xd.transpose(-1, -2).mul_(2).sub_(1)
    _close(xd, xc)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int8,
                                   torch.bool, torch.int64, torch.int16])
def test_same_dtype_copies(dtype):
    """clone/contiguous/copy_ of permuted and sliced views move the bytes as they are."""
    gen = torch.Generator().manual_seed(7)
    x = _rand((6, 37, 3, 32), dtype, gen)
    xd = x.to("tpu")
    for f in (lambda t: t.transpose(1, 2).contiguous(), lambda t: t.permute(3, 0, 2, 1).clone(),
              lambda t: t[:, 1::3, :, ::2].contiguous(), lambda t: t.flip(1).contiguous()):
        got, want = f(xd), f(x)
        assert got.stride() == want.stride()
        assert torch.equal(got.cpu(), want)
    dst_c = torch.zeros(37, 6, 32, 3, dtype=dtype)
    dst_d = dst_c.to("tpu")
    dst_c.permute(1, 0, 3, 2).copy_(x)
    dst_d.permute(1, 0, 3, 2).copy_(xd)
    assert torch.equal(dst_d.cpu(), dst_c)
    if dtype.is_floating_point:  # a converting copy still rounds as before
        _close(xd.transpose(0, 1).to(torch.float32 if dtype != torch.float32 else torch.bfloat16),
               x.transpose(0, 1).to(torch.float32 if dtype != torch.float32 else torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_pow_two_is_square(dtype):
    """x ** 2 runs as x * x (as PyTorch's CPU kernel does), exactly; other exponents still use pow."""
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(16, 32, 129, generator=gen).to(dtype) * 30
    x[0, 0, :4] = torch.tensor([float("nan"), float("inf"), -0.0, 1e-30]).to(dtype)
    assert torch.equal(x.to("tpu").pow(2).cpu().nan_to_num(), x.pow(2).nan_to_num())
    e = torch.full(x.shape, 2.0, dtype=dtype)
    e[::3] = 3.0  # tiles mixing exponent 2 and others
    _close(x.to("tpu").pow(e.to("tpu")).nan_to_num(), x.pow(e).nan_to_num())
    _close(x.abs().to("tpu").pow(0.5).nan_to_num(), x.abs().pow(0.5).nan_to_num())


def _bf16_bits(src: torch.Tensor) -> torch.Tensor:
    """common.h's tpu_f32_to_bf16 on every bit pattern: round to nearest even, a NaN keeps its payload's top
    bits and is made quiet ((u >> 16) | 0x40; PyTorch CPU's vector path returns 0xffff for every NaN)."""
    u = src.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    return torch.where((u & 0x7FFFFFFF) > 0x7F800000, ((u >> 16) | 0x40) & 0xFFFF, r)


@pytest.mark.parametrize("n", [500, 513, 4097, 3 * 32768 + 5, 262144])
def test_lone_convert_f32_bf16_direct(n: int) -> None:
    """A lone f32 <-> bf16 (and f16 -> f32) convert over one contiguous layout longer than a tile runs straight
    from input to output in 32K-element chunks (exec.c run_convert_direct); shorter ones take the one-tile path.
    Both give the same bits: random bit patterns (NaN payloads, subnormals, infinities) against the rounding
    rule, the CPU's bits for every non-NaN, exact widening back; views that are not contiguous keep the tile path."""
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=g) * 10
    y = torch.randint(0, 2**32, (n,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    y[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
    for src in (x, y):
        r = src.to("tpu").to(torch.bfloat16).cpu()
        assert torch.equal(r.view(torch.int16).to(torch.int64) & 0xFFFF, _bf16_bits(src))
        ok = ~src.isnan()
        assert torch.equal(r[ok].view(torch.int16), src[ok].to(torch.bfloat16).view(torch.int16))
        back = r.to("tpu").to(torch.float32).cpu()
        assert torch.equal(back.view(torch.int32), r.to(torch.float32).view(torch.int32))
        h = src.to(torch.float16)
        assert torch.equal(h.to("tpu").float().cpu().view(torch.int32), h.float().view(torch.int32))
    m = x[: (n // 64) * 64].view(-1, 64)
    assert torch.equal(m.to("tpu").t().to(torch.bfloat16).cpu().view(torch.int16),
                       m.t().to(torch.bfloat16).view(torch.int16))
