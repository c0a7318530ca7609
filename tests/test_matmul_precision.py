"""torch.set_float32_matmul_precision on the tpu device: "highest" = f32 products, "high" = 3-pass
bf16 (x = hi + lo, hi = bf16(x), lo = bf16(x - hi); hi*hi + hi*lo + lo*hi), "medium" = 1-pass bf16
(hi*hi), all accumulated in f32 — the TPU's precision_config HIGHEST / HIGH / DEFAULT.

Each mode is checked against a float64 emulation of that recipe built from torch's own f32 -> bf16
rounding on the CPU (so only the f32 accumulation order may differ), for mm, bmm, linear (addmm),
matmul with broadcast batches and conv2d forward and backward; plus: the error against the exact
product orders highest < high < medium, the default is "highest", bf16/f16/f64 operands ignore the
setting, and switching modes never reuses an executable compiled for another mode."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

DEV = "tpu"
MODES = ["highest", "high", "medium"]


@pytest.fixture(autouse=True)
def restore_precision():
    old = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(old)


def rnd(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float32)


def split(x):
    """(hi, lo) of an f32 tensor as float64: hi = bf16(x) (round to nearest even), lo = bf16(x - hi)."""
    hi32 = x.to(torch.bfloat16).to(torch.float32)
    lo32 = (x - hi32).to(torch.bfloat16).to(torch.float32)  # x - hi is exact in f32
    return hi32.double(), lo32.double()


def emulate(fn, mode, *xs):
    """fn (bilinear in its two operands) evaluated in float64 on the split parts; also the
    magnitude sum |products| that bounds an f32 accumulation error."""
    a, b = xs
    if mode == "highest":
        terms = [(a.double(), b.double())]
    else:
        (ah, al), (bh, bl) = split(a), split(b)
        terms = [(ah, bh)] if mode == "medium" else [(ah, bh), (ah, bl), (al, bh)]
    val = sum(fn(p, q) for p, q in terms)
    mag = sum(fn(p.abs(), q.abs()) for p, q in terms)
    return val, mag


def check_mode(fn, mode, a, b, k):
    torch.set_float32_matmul_precision(mode)
    got = fn(a.to(DEV), b.to(DEV)).cpu()
    assert got.dtype == torch.float32
    want, mag = emulate(fn, mode, a, b)
    # f32 accumulation of k (3k for "high") products: |error| <= ~k * 2^-24 * sum|products|
    passes = 3 if mode == "high" else 1
    bound = 2.0 * (passes * k + 2) * 2.0 ** -24 * mag + 1e-30
    err = (got.double() - want).abs()
    assert bool((err <= bound).all()), (mode, float(err.max()), float((err / bound).max()))
    return got


GEMMS = [
    ("mm", lambda a, b: a @ b, (37, 129), (129, 23), 129),
    ("mm_t", lambda a, b: a @ b.t(), (64, 300), (45, 300), 300),  # x @ W^T: k-contiguous operand
    ("bmm", lambda a, b: torch.bmm(a, b), (3, 17, 70), (3, 70, 9), 70),
    ("matmul_bcast", lambda a, b: torch.matmul(a, b), (2, 3, 11, 40), (40, 13), 40),
    ("linear", lambda a, b: F.linear(a, b), (5, 7, 33), (19, 33), 33),
    ("vec", lambda a, b: a @ b, (1, 257), (257, 31), 257),  # m == 1
    ("large_k", lambda a, b: a @ b, (20, 1100), (1100, 40), 1100),  # several k blocks
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn,sa,sb,k", GEMMS, ids=[g[0] for g in GEMMS])
def test_gemm_matches_emulation(mode, name, fn, sa, sb, k):
    check_mode(fn, mode, rnd(sa, 1), rnd(sb, 2), k)


def test_addmm_with_bias_and_scaling():
    a, b, c = rnd((21, 50), 3), rnd((50, 17), 4), rnd((21, 17), 5)
    for mode in MODES:
        torch.set_float32_matmul_precision(mode)
        got = torch.addmm(c.to(DEV), a.to(DEV), b.to(DEV), beta=0.5, alpha=2.0).cpu()
        prod, mag = emulate(lambda p, q: p @ q, mode, a, b)
        want = 0.5 * c.double() + 2.0 * prod
        bound = 2.0 * (3 * 50 + 4) * 2.0 ** -24 * (2.0 * mag + 0.5 * c.double().abs()) + 1e-30
        assert bool(((got.double() - want).abs() <= bound).all()), mode


CONV = lambda x, w: F.conv2d(x, w, stride=1, padding=1)  # noqa: E731


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("channels_last", [False, True])
def test_conv2d_forward_matches_emulation(mode, channels_last):
    x, w = rnd((2, 5, 9, 8), 6), rnd((7, 5, 3, 3), 7)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    check_mode(CONV, mode, x, w, 5 * 9)


@pytest.mark.parametrize("mode", MODES)
def test_conv2d_backward_matches_emulation(mode):
    """grad_input = conv_transpose(gy, w), grad_weight = correlation of x and gy: each a bilinear
    product of the two operands the kernel multiplies, emulated like the forward."""
    x, w, gy = rnd((2, 4, 8, 7), 8), rnd((6, 4, 3, 3), 9), rnd((2, 6, 8, 7), 10)
    torch.set_float32_matmul_precision(mode)
    xd, wd = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_()
    CONV(xd, wd).backward(gy.to(DEV))

    def gx(g, ww):
        return torch.nn.grad.conv2d_input(x.shape, ww, g, padding=1)

    def gw(xx, g):
        return torch.nn.grad.conv2d_weight(xx, w.shape, g, padding=1)

    for got, fn, ops, k in ((xd.grad, gx, (gy, w), 6 * 9), (wd.grad, gw, (x, gy), 2 * 8 * 7)):
        want, mag = emulate(fn, mode, *ops)
        bound = 2.0 * ((3 if mode == "high" else 1) * k + 2) * 2.0 ** -24 * mag + 1e-30
        err = (got.cpu().double() - want).abs()
        assert bool((err <= bound).all()), (mode, float((err / bound).max()))


def test_error_ordering():
    """Against the exact product: highest < high < medium, by orders of magnitude."""
    a, b = rnd((128, 256), 11), rnd((256, 96), 12)
    exact = a.double() @ b.double()
    errs = {}
    for mode in MODES:
        torch.set_float32_matmul_precision(mode)
        got = (a.to(DEV) @ b.to(DEV)).cpu().double()
        errs[mode] = float(((got - exact).abs() / (a.double().abs() @ b.double().abs())).max())
    assert errs["highest"] < errs["high"] < errs["medium"], errs
    assert errs["high"] * 20 < errs["medium"], errs  # 3 passes recover ~8 more mantissa bits
    assert errs["medium"] < 2 ** -7, errs  # still bf16-accurate


def test_default_is_highest():
    assert torch.get_float32_matmul_precision() == "highest"
    a, b = rnd((33, 65), 13), rnd((65, 29), 14)
    default = (a.to(DEV) @ b.to(DEV)).cpu()
    torch.set_float32_matmul_precision("highest")
    assert torch.equal(default, (a.to(DEV) @ b.to(DEV)).cpu())


def test_switching_never_reuses_another_modes_executable():
    a, b = rnd((40, 72), 15), rnd((72, 24), 16)
    ad, bd = a.to(DEV), b.to(DEV)
    results = {}
    for mode in ["highest", "medium", "high", "highest", "medium", "high"]:
        torch.set_float32_matmul_precision(mode)
        r = (ad @ bd).cpu()
        if mode in results:
            assert torch.equal(results[mode], r), mode  # same mode: same executable, same bits
        results[mode] = r
    assert not torch.equal(results["highest"], results["medium"])
    assert not torch.equal(results["highest"], results["high"])
    assert not torch.equal(results["high"], results["medium"])
    # a conv compiled under one mode is not reused under another either
    x, w = rnd((1, 3, 6, 6), 17), rnd((4, 3, 3, 3), 18)
    convs = {}
    for mode in ["medium", "highest", "medium"]:
        torch.set_float32_matmul_precision(mode)
        r = CONV(x.to(DEV), w.to(DEV)).cpu()
        assert mode not in convs or torch.equal(convs[mode], r)
        convs[mode] = r
    assert not torch.equal(convs["medium"], convs["highest"])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_other_dtypes_ignore_the_setting(dtype):
    a, b = rnd((19, 47), 19).to(dtype), rnd((47, 23), 20).to(dtype)
    x, w = rnd((2, 3, 7, 7), 21).to(dtype), rnd((4, 3, 3, 3), 22).to(dtype)
    outs = []
    for mode in MODES:
        torch.set_float32_matmul_precision(mode)
        outs.append(((a.to(DEV) @ b.to(DEV)).cpu(), CONV(x.to(DEV), w.to(DEV)).cpu()))
    for o in outs[1:]:
        assert torch.equal(o[0], outs[0][0]) and torch.equal(o[1], outs[0][1])


def test_special_values_survive_high():
    """inf stays inf under the split (lo is 0 where hi is not finite); NaN propagates."""
    a = torch.ones(3, 4)
    a[0, 1] = float("inf")
    a[1, 2] = float("nan")
    b = torch.ones(4, 2)
    want = a @ b
    for mode in MODES:
        torch.set_float32_matmul_precision(mode)
        torch.testing.assert_close((a.to(DEV) @ b.to(DEV)).cpu(), want, equal_nan=True)


_FIRST_CALL_SCRIPT = r"""
import sys, torch
import torch.nn.functional as F
mode, out = sys.argv[1], sys.argv[2]
g = torch.Generator().manual_seed(23)
T = {k: torch.randn(*s, generator=g) for k, s in dict(a=(9, 70), b=(70, 11), c=(9, 11), p=(4, 9, 70),
                                                      q=(4, 70, 11), bias=(4, 9, 11), x=(1, 3, 7, 6), w=(5, 3, 3, 3)).items()}
OPS = {
    "mm": lambda t: t["a"] @ t["b"], "addmm": lambda t: torch.addmm(t["c"], t["a"], t["b"]),
    "linear": lambda t: F.linear(t["a"], t["b"].t(), t["c"][0]), "bmm": lambda t: torch.bmm(t["p"], t["q"]),
    "baddbmm": lambda t: torch.baddbmm(t["bias"], t["p"], t["q"]), "matmul": lambda t: torch.matmul(t["p"], t["b"]),
    "einsum": lambda t: torch.einsum("bik,bkj->bij", t["p"], t["q"]),
    "conv2d": lambda t: F.conv2d(t["x"], t["w"], padding=1),
}
def run():
    d = {k: v.to("tpu") for k, v in T.items()}
    return {name: fn(d).cpu() for name, fn in OPS.items()}
torch.set_float32_matmul_precision(mode)
first = run()                           # each lowering's first call in this process
torch.set_float32_matmul_precision("highest")
highest = run()
torch.set_float32_matmul_precision(mode)
again = run()                           # now known to read the precision
torch.save({"first": first, "highest": highest, "again": again}, out)
"""


@pytest.mark.parametrize("mode", ["medium", "high"])
def test_first_call_of_each_op_honors_the_mode(tmp_path, mode):
    """libtpurt reads the precision only for ops whose graphs have a DOT or a convolution, which it
    learns from an op's first compile (or disk-cache load): a first call under a non-default mode
    must use that mode — also when the disk cache holds the same op compiled under "highest" by
    an earlier process — and later switches must keep working."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"))
    outs = {}
    for run_mode in ("highest", mode):  # the first process fills the disk cache under "highest"
        out = tmp_path / f"{run_mode}.pt"
        subprocess.run([sys.executable, "-c", _FIRST_CALL_SCRIPT, run_mode, str(out)], env=env, check=True,
                       timeout=600)
        outs[run_mode] = torch.load(out)
    res = outs[mode]
    for name in res["first"]:
        assert torch.equal(res["first"][name], res["again"][name]), name
        assert not torch.equal(res["first"][name], res["highest"][name]), name
        assert torch.equal(res["highest"][name], outs["highest"]["first"][name]), name
