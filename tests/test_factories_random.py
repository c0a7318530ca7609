"""Tensor factories and random numbers on the tpu device: arange, linspace, logspace,
eye, full/zeros/ones (+ _like), tril/triu_indices vs PyTorch CPU; the Philox RNG
(normal, uniform, bernoulli, random/randint, randperm, exponential, log_normal,
cauchy, geometric, rand_like...): reproducibility under torch.manual_seed and
explicit generators, independence of successive calls, and sample statistics per
dtype."""
from __future__ import annotations

import math

import pytest
import torch

DEV = "tpu"
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
N = 100_000


def same(got, want, **kw):
    assert isinstance(got, torch.Tensor) and got.device.type == DEV
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **kw)


# ------------------------------------------------------------------ ranges


ARANGES = [(5,), (0, 1, 0.1), (10, 0, -3), (0, 0), (3, 3, -1), (-2.5, 2.5, 0.5), (1, 2, 0.3), (-7, 8, 2),
           (0, 1e-3, 1e-4), (5, -5, -0.7)]


@pytest.mark.parametrize("args", ARANGES)
def test_arange(args):
    same(torch.arange(*args, device=DEV), torch.arange(*args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64,
                                   torch.int32, torch.int16, torch.int8, torch.uint8])
def test_arange_dtypes(dtype):
    same(torch.arange(0, 20, 3, dtype=dtype, device=DEV), torch.arange(0, 20, 3, dtype=dtype))
    if dtype.is_floating_point:
        same(torch.arange(-1, 1, 0.25, dtype=dtype, device=DEV), torch.arange(-1, 1, 0.25, dtype=dtype))


def test_arange_out_and_errors():
    out = torch.empty(0, dtype=torch.int64, device=DEV)
    torch.arange(2, 11, 2, out=out)
    same(out, torch.arange(2, 11, 2))
    # a new end reuses the executable: start/step are runtime values
    same(torch.arange(7, 14, device=DEV), torch.arange(7, 14))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32])
@pytest.mark.parametrize("args", [(0, 1, 5), (-3, 10, 7), (2, 2, 1), (0, 1, 0), (10, -10, 11), (-1, 1, 100), (0, 7, 2)])
def test_linspace(dtype, args):
    # CPU's vectorized f16/bf16 path rounds each vector's base value; allow about one ulp at |x| ~ 1
    kw = {torch.bfloat16: dict(atol=1 / 128, rtol=1 / 128), torch.float16: dict(atol=1 / 1024, rtol=1 / 1024)}.get(dtype, {})
    same(torch.linspace(*args, dtype=dtype, device=DEV), torch.linspace(*args, dtype=dtype), **kw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("args", [(-2, 2, 9), (0, 3, 4, 2.0), (1, 1, 1), (0, 1, 0), (3, -1, 6, 3.0)])
def test_logspace(dtype, args):
    kw = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else {}
    same(torch.logspace(*args, dtype=dtype, device=DEV), torch.logspace(*args, dtype=dtype), **kw)


def test_linspace_logspace_out():
    out = torch.empty(0, device=DEV)
    torch.linspace(-1, 1, 9, out=out)
    same(out, torch.linspace(-1, 1, 9))
    out = torch.empty(0, dtype=torch.float64, device=DEV)
    torch.logspace(0, 2, 5, out=out)
    same(out, torch.logspace(0, 2, 5, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_eye(dtype):
    for args in [(3,), (3, 5), (4, 2), (0,), (0, 3), (1, 1)]:
        same(torch.eye(*args, dtype=dtype, device=DEV), torch.eye(*args, dtype=dtype))
    out = torch.empty(0, dtype=dtype, device=DEV)
    torch.eye(2, 3, out=out)
    same(out, torch.eye(2, 3, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.bool])
def test_full_zeros_ones(dtype):
    v = True if dtype == torch.bool else 3
    same(torch.full((2, 3), v, dtype=dtype, device=DEV), torch.full((2, 3), v, dtype=dtype))
    same(torch.zeros(4, 1, dtype=dtype, device=DEV), torch.zeros(4, 1, dtype=dtype))
    same(torch.ones(0, 3, dtype=dtype, device=DEV), torch.ones(0, 3, dtype=dtype))
    same(torch.ones((), dtype=dtype, device=DEV), torch.ones((), dtype=dtype))
    x = torch.empty(3, 2, dtype=dtype, device=DEV)
    same(torch.zeros_like(x), torch.zeros(3, 2, dtype=dtype))
    same(torch.ones_like(x), torch.ones(3, 2, dtype=dtype))
    same(torch.full_like(x, v), torch.full((3, 2), v, dtype=dtype))
    same(x.new_full((2,), v), torch.full((2,), v, dtype=dtype))


def test_tri_indices_dtype():
    same(torch.tril_indices(4, 3, dtype=torch.int32, device=DEV), torch.tril_indices(4, 3, dtype=torch.int32))


# ------------------------------------------------------------------ RNG: reproducibility


SAMPLERS = {
    "randn": lambda g=None: torch.randn(5, 7, device=DEV, generator=g),
    "rand": lambda g=None: torch.rand(33, device=DEV, generator=g),
    "randint": lambda g=None: torch.randint(-5, 100, (9,), device=DEV, generator=g),
    "normal_": lambda g=None: torch.empty(6, device=DEV).normal_(2.0, 0.5, generator=g),
    "uniform_": lambda g=None: torch.empty(6, dtype=torch.float64, device=DEV).uniform_(-1, 4, generator=g),
    "bernoulli": lambda g=None: torch.bernoulli(torch.full((17,), 0.4, device=DEV), generator=g),
    "randperm": lambda g=None: torch.randperm(12, device=DEV, generator=g),
    "exponential_": lambda g=None: torch.empty(5, device=DEV).exponential_(generator=g),
}


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_seed_reproducible(name):
    f = SAMPLERS[name]
    torch.manual_seed(1234)
    a, b = f().cpu(), f().cpu()
    torch.manual_seed(1234)
    c, d = f().cpu(), f().cpu()
    assert torch.equal(a, c) and torch.equal(b, d)
    assert not torch.equal(a, b)  # successive calls draw fresh numbers
    torch.manual_seed(99)
    assert not torch.equal(f().cpu(), a)


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_explicit_generator(name):
    f = SAMPLERS[name]
    g = torch.Generator(device=DEV)
    g.manual_seed(7)
    torch.manual_seed(0)
    a = f(g).cpu()
    after_default = f().cpu()
    g.manual_seed(7)
    torch.manual_seed(0)
    assert torch.equal(f(g).cpu(), a)
    assert torch.equal(f().cpu(), after_default)  # the explicit generator left the default one alone
    g2 = torch.Generator(device=DEV).manual_seed(8)
    assert not torch.equal(f(g2).cpu(), a)


def test_generator_state_roundtrip():
    g = torch.Generator(device=DEV).manual_seed(5)
    state = g.get_state()
    a = torch.randn(10, device=DEV, generator=g).cpu()
    g.set_state(state)
    assert torch.equal(torch.randn(10, device=DEV, generator=g).cpu(), a)
    assert g.device.type == DEV and g.initial_seed() == 5


def test_rng_layout_and_dtype_independent_of_strides():
    torch.manual_seed(3)
    a = torch.empty(4, 6, device=DEV).normal_().cpu()
    torch.manual_seed(3)
    b = torch.empty(6, 4, device=DEV).t().normal_().cpu()  # same logical order for a transposed out
    assert torch.equal(a, b)


# ------------------------------------------------------------------ RNG: statistics


def stats(x):
    x = x.double().cpu()
    return x.mean().item(), x.std().item(), x.min().item(), x.max().item()


@pytest.mark.parametrize("dtype", FLOATS)
def test_normal_stats(dtype):
    torch.manual_seed(0)
    m, s, _, _ = stats(torch.randn(N, dtype=dtype, device=DEV))
    assert abs(m) < 0.02 and abs(s - 1) < 0.02, (m, s)
    m, s, _, _ = stats(torch.empty(N, dtype=dtype, device=DEV).normal_(3.0, 0.5))
    assert abs(m - 3) < 0.02 and abs(s - 0.5) < 0.02, (m, s)
    assert torch.randn(3, 4, dtype=dtype, device=DEV).dtype == dtype


def test_normal_variants():
    torch.manual_seed(1)
    mean = torch.linspace(-5, 5, N, device=DEV)
    x = torch.normal(mean, 2.0)
    m, s, _, _ = stats(x - mean)
    assert abs(m) < 0.03 and abs(s - 2) < 0.03, (m, s)
    std = torch.full((N,), 0.25, device=DEV)
    m, s, _, _ = stats(torch.normal(1.5, std))
    assert abs(m - 1.5) < 0.01 and abs(s - 0.25) < 0.01, (m, s)
    m, s, _, _ = stats(torch.normal(mean, std) - mean)
    assert abs(m) < 0.01 and abs(s - 0.25) < 0.01, (m, s)
    m, s, _, _ = stats(torch.normal(-1.0, 3.0, (N,), device=DEV))
    assert abs(m + 1) < 0.05 and abs(s - 3) < 0.05, (m, s)
    out = torch.empty(N, device=DEV)
    torch.normal(mean, 1.0, out=out)
    assert abs(stats(out - mean)[1] - 1) < 0.02
    x = torch.randn(5, 6, device=DEV).t()  # non-contiguous in-place fill
    x.normal_()
    assert x.isfinite().all().item() and x.cpu().std() > 0.3


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("lo,hi", [(0.0, 1.0), (-2.0, 3.0), (2.0, 3.0), (-5.0, -4.0)])
def test_uniform_stats(dtype, lo, hi):
    torch.manual_seed(2)
    x = torch.empty(N, dtype=dtype, device=DEV).uniform_(lo, hi)
    assert x.dtype == dtype
    m, s, mn, mx = stats(x)
    assert lo <= mn and mx < hi, (mn, mx)
    assert abs(m - (lo + hi) / 2) < 0.01 * (hi - lo) + 0.004, m
    assert abs(s - (hi - lo) / math.sqrt(12)) < 0.01 * (hi - lo) + 0.004, s
    if lo == 0.0:
        m, _, mn, mx = stats(torch.rand(N, dtype=dtype, device=DEV))
        assert 0 <= mn and mx < 1 and abs(m - 0.5) < 0.01


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool])
def test_bernoulli(dtype):
    torch.manual_seed(3)
    x = torch.empty(N, dtype=dtype, device=DEV).bernoulli_(0.3)
    assert x.dtype == dtype
    v = x.double().cpu()
    assert set(v.unique().tolist()) <= {0.0, 1.0} and abs(v.mean().item() - 0.3) < 0.01
    p = torch.linspace(0, 1, 11, device=DEV).repeat(N // 10)
    y = torch.bernoulli(p).cpu().view(-1, 11).double().mean(0)
    torch.testing.assert_close(y, torch.linspace(0, 1, 11, dtype=torch.float64), atol=0.02, rtol=0)
    z = torch.empty(N, dtype=dtype, device=DEV).bernoulli_(torch.full((N,), 0.8, device=DEV))
    assert abs(z.double().cpu().mean().item() - 0.8) < 0.01
    assert abs(torch.bernoulli(torch.zeros(N, device=DEV), 0.6).cpu().mean().item() - 0.6) < 0.01


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.float32,
                                   torch.float64, torch.bfloat16])
def test_randint_random(dtype):
    torch.manual_seed(4)
    x = torch.randint(3, 10, (N,), dtype=dtype, device=DEV).cpu()
    assert x.dtype == dtype
    v = x.double()
    assert v.min() == 3 and v.max() == 9 and abs(v.mean().item() - 6) < 0.05
    assert torch.equal(v, v.round())
    counts = torch.bincount(x.long() - 3, minlength=7).double() / N
    assert (counts - 1 / 7).abs().max() < 0.01
    y = torch.empty(N, dtype=dtype, device=DEV).random_(5).cpu().double()
    assert y.min() == 0 and y.max() == 4
    z = torch.empty(N, dtype=dtype, device=DEV).random_().cpu().double()
    top = {torch.int64: 2**63 - 1, torch.int32: 2**31 - 1, torch.int16: 2**15 - 1, torch.int8: 127, torch.uint8: 255,
           torch.float32: 2**24, torch.float64: 2**53, torch.bfloat16: 2**8}[dtype]
    assert z.min() >= 0 and z.max() <= top and z.max() > top * 0.9 and torch.equal(z, z.round())


def test_random_wide_ranges():
    torch.manual_seed(5)
    x = torch.randint(-2**40, 2**40, (N,), device=DEV).cpu()
    assert x.min() >= -2**40 and x.max() < 2**40 and x.min() < -0.9 * 2**40 and x.max() > 0.9 * 2**40
    y = torch.empty(N, dtype=torch.int64, device=DEV).random_(-2**63, None).cpu()  # all of int64
    assert y.min() < -0.9 * 2**63 and y.max() > 0.9 * 2**63
    z = torch.empty(N, dtype=torch.int64, device=DEV).random_(-5, None).cpu()  # 2^63 + 5 values
    assert z.min() >= -5 and z.max() > 0.9 * 2**63
    b = torch.empty(N, dtype=torch.bool, device=DEV).random_().cpu()
    assert abs(b.double().mean().item() - 0.5) < 0.01
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to'"):
        torch.empty(3, device=DEV).random_(5, 5)


def test_randperm():
    torch.manual_seed(6)
    for n in [0, 1, 2, 10, 1000]:
        p = torch.randperm(n, device=DEV)
        assert p.dtype == torch.int64 and p.shape == (n,)
        assert torch.equal(p.cpu().sort().values, torch.arange(n))
    p = torch.randperm(50, dtype=torch.int32, device=DEV)
    assert p.dtype == torch.int32 and torch.equal(p.cpu().long().sort().values, torch.arange(50))
    firsts = torch.stack([torch.randperm(4, device=DEV)[0] for _ in range(200)]).cpu()
    assert torch.bincount(firsts, minlength=4).min() > 25


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_other_distributions(dtype):
    torch.manual_seed(7)
    e = torch.empty(N, dtype=dtype, device=DEV).exponential_(2.0)
    m, s, mn, _ = stats(e)
    assert mn >= 0 and abs(m - 0.5) < 0.02 and abs(s - 0.5) < 0.03, (m, s)
    ln = torch.empty(N, dtype=dtype, device=DEV).log_normal_(1.0, 0.5)
    assert ln.cpu().min() > 0
    m, s, _, _ = stats(ln.double().log())
    assert abs(m - 1) < 0.02 and abs(s - 0.5) < 0.02, (m, s)
    c = torch.empty(N, dtype=dtype, device=DEV).cauchy_(2.0, 0.5).double().cpu()
    assert abs(c.median().item() - 2) < 0.02
    q = c.quantile(torch.tensor([0.25, 0.75], dtype=torch.float64))
    assert abs(q[0].item() - 1.5) < 0.03 and abs(q[1].item() - 2.5) < 0.03
    gm = torch.empty(N, dtype=dtype, device=DEV).geometric_(0.25).double().cpu()
    assert gm.min() >= 1 and torch.equal(gm, gm.round()) and abs(gm.mean().item() - 4) < 0.1


def test_like_factories():
    torch.manual_seed(8)
    x = torch.empty(300, 400, dtype=torch.bfloat16, device=DEV)
    r = torch.randn_like(x)
    assert r.dtype == torch.bfloat16 and r.device.type == DEV and abs(r.float().cpu().std().item() - 1) < 0.02
    u = torch.rand_like(x).float().cpu()
    assert 0 <= u.min() and u.max() < 1
    i = torch.randint_like(x, 0, 3).cpu()
    assert set(i.float().unique().tolist()) == {0.0, 1.0, 2.0}


def test_efficientzerotensor_forward_ad():
    """Forward-mode AD's zero tangents (aten::_efficientzerotensor) on tpu: no storage bytes, the ZeroTensor
    key, materialized as zeros by any op; a jvp with an untangented weight matches CPU."""
    import torch.autograd.forward_ad as fwAD

    z = torch._efficientzerotensor((2, 3), dtype=torch.float32, device="tpu")
    assert z.device.type == "tpu" and z._is_zerotensor() and z.shape == (2, 3)
    one = torch.ones(2, 3, device="tpu")
    assert torch.equal((z + one).cpu(), torch.ones(2, 3)) and torch.equal((z * one).cpu(), torch.zeros(2, 3))
    g = torch.Generator().manual_seed(5)
    x, t, w, b = (torch.randn(s, generator=g) for s in ((4, 7), (4, 7), (3, 7), (3,)))
    res = []
    for dev in ("cpu", "tpu"):
        with fwAD.dual_level():
            y = torch.nn.functional.linear(fwAD.make_dual(x.to(dev), t.to(dev)), w.to(dev), b.to(dev))
            res.append([v.cpu() for v in fwAD.unpack_dual(y)])
    torch.testing.assert_close(res[1][0], res[0][0])
    torch.testing.assert_close(res[1][1], res[0][1])
