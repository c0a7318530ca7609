"""Special functions through the host's SPECIAL custom target (lower/special.c, drivers/host/special.c):
torch.i0, torch.special.i0e / i1 / i1e, torch.polygamma (n = 0..4) vs PyTorch CPU on random inputs
(odd sizes, non-contiguous, integer inputs promote). The kernels compute in double: float32 results
and bfloat16 results are compared with CPU's float64 result rounded to their dtype (CPU's float kernels
overflow in intermediates: i0(89) is inf there, 1.9e37 here), float64 with CPU float64 (default
tolerances)."""
from __future__ import annotations

import pytest
import torch

DEV = "tpu"


def _x(dtype, lo, hi, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(7, 13, generator=g, dtype=torch.float64) * (hi - lo) + lo
    return x.to(dtype).t()  # non-contiguous


def _cmp(fn, x):
    got = fn(x.to(DEV)).cpu()
    ref_in = x.double() if x.dtype in (torch.float32, torch.bfloat16) else x
    exp = fn(ref_in).to(got.dtype)
    assert got.dtype == fn(x).dtype
    torch.testing.assert_close(got, exp, equal_nan=True)


BESSEL = [torch.i0, torch.special.i0e, torch.special.i1, torch.special.i1e]


@pytest.mark.parametrize("fn", BESSEL, ids=["i0", "i0e", "i1", "i1e"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("lo,hi", [(-3, 3), (-40, 40), (25, 90)])
def test_bessel(fn, dtype, lo, hi):
    _cmp(fn, _x(dtype, lo, hi))


@pytest.mark.parametrize("fn", BESSEL, ids=["i0", "i0e", "i1", "i1e"])
def test_bessel_special_values_and_ints(fn):
    x = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-30, 700.0, -710.0])
    _cmp(fn, x)
    _cmp(fn, torch.arange(-5, 6))  # int64 -> float32


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_polygamma(n, dtype):
    _cmp(lambda t: torch.polygamma(n, t), _x(dtype, 0.05, 12, seed=n))
    _cmp(lambda t: torch.special.polygamma(n, t), _x(dtype, -6, 6, seed=10 + n))


def test_polygamma_poles_and_errors():
    """Poles give +-inf as on CPU (CPU's trigamma is finite at negative integers, from sin(pi x)
    rounding: n = 1 is checked at 0 only)."""
    x = torch.tensor([0.0, -1.0, -2.0, 1.0, float("nan")], dtype=torch.float64)
    _cmp(lambda t: torch.polygamma(1, t), x[[0, 3, 4]])
    for n in (2, 3):
        _cmp(lambda t: torch.polygamma(n, t), x)
    with pytest.raises(RuntimeError, match="polygamma\\(n, x\\) does not support negative n"):
        torch.polygamma(-1, x.to(DEV))
