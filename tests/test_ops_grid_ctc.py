"""grid_sampler_2d and CTC loss on tpu (lower/grid_ctc.c -> custom targets GRID_SAMPLE(_BWD), CTC(_BWD) in
drivers/host/grid_sample.c and ctc.c) vs PyTorch CPU: forward and gradients through torch.autograd on both
devices, every interpolation/padding/align_corners combination, odd sizes, non-contiguous inputs, f32/f64.
The host kernels compute in double: float32 results are compared with CPU's float64 result rounded (default
float32 tolerances), float64 results with CPU float64 (default tolerances). Bad arguments raise PyTorch's
errors."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

DEV = "tpu"
DTYPES = [torch.float32, torch.float64]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _grads(fn, inputs, dev, seed=0):
    """fn(*inputs) on dev and the gradients of <out, g> for a fixed random g."""
    xs = [x.detach().to(dev).requires_grad_(x.requires_grad) for x in inputs]
    out = fn(*xs)
    g = torch.randn(out.shape, generator=_gen(seed), dtype=torch.float64).to(out.dtype).to(dev)
    gr = torch.autograd.grad(out, [x for x in xs if x.requires_grad], g)
    return out.detach().cpu(), [t.cpu() for t in gr]


def _compare(fn, inputs, dtype):
    got, ggot = _grads(fn, inputs, DEV)
    ref_in = [x.detach().double().requires_grad_(x.requires_grad) for x in inputs]
    exp, gexp = _grads(fn, ref_in, "cpu")
    torch.testing.assert_close(got, exp.to(dtype), equal_nan=True)
    for a, b in zip(ggot, gexp):
        torch.testing.assert_close(a, b.to(dtype), equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample(dtype, mode, padding, align):
    x = torch.randn(2, 3, 5, 7, generator=_gen(1), dtype=torch.float64).to(dtype).requires_grad_()
    # coordinates beyond [-1, 1] exercise the padding modes
    grid = (torch.rand(2, 4, 6, 2, generator=_gen(2), dtype=torch.float64) * 2.6 - 1.3).to(dtype)
    grid.requires_grad_(mode != "nearest")
    _compare(lambda a, g: F.grid_sample(a, g, mode=mode, padding_mode=padding, align_corners=align), [x, grid], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_grid_sample_noncontiguous_and_edge_cases(dtype):
    x = torch.randn(3, 2, 6, 5, generator=_gen(3), dtype=torch.float64).to(dtype)
    x = x.to(memory_format=torch.channels_last).requires_grad_()
    grid = torch.rand(3, 5, 4, 2, generator=_gen(4), dtype=torch.float64).to(dtype).mul(2.2).sub(1.1)
    grid = grid.transpose(1, 2).requires_grad_()  # non-contiguous [3, 4, 5, 2]
    for mode in ("bilinear", "bicubic"):
        _compare(lambda a, g: F.grid_sample(a, g, mode=mode, padding_mode="reflection", align_corners=False),
                 [x, grid], dtype)
    # a 1x1 input (align_corners: reflection span 0), and non-finite grid entries
    one = torch.randn(1, 2, 1, 1, generator=_gen(5), dtype=torch.float64).to(dtype)
    g1 = torch.tensor([[[[0.3, -0.2], [float("nan"), 0.0], [float("inf"), 0.5]]]], dtype=dtype)
    for pad in ("zeros", "border", "reflection"):
        for align in (False, True):
            for mode in ("bilinear", "nearest"):
                got = F.grid_sample(one.to(DEV), g1.to(DEV), mode=mode, padding_mode=pad, align_corners=align)
                exp = F.grid_sample(one.double(), g1.double(), mode=mode, padding_mode=pad, align_corners=align)
                torch.testing.assert_close(got.cpu(), exp.to(dtype), equal_nan=True)


def test_grid_sample_only_grid_grad_and_errors():
    x = torch.randn(1, 2, 4, 4, generator=_gen(6), dtype=torch.float64)
    grid = (torch.rand(1, 3, 3, 2, generator=_gen(7), dtype=torch.float64) * 2 - 1).requires_grad_()
    _compare(lambda a, g: F.grid_sample(a, g, align_corners=True), [x, grid], torch.float64)
    with pytest.raises(RuntimeError):  # PyTorch's meta function raises first (a reshape error)
        torch.grid_sampler_2d(torch.randn(2, 1, 3, 3, device=DEV), torch.randn(1, 2, 2, 2, device=DEV), 0, 0, False)
    with pytest.raises((RuntimeError, AssertionError), match="last dimension"):  # meta: AssertionError
        torch.grid_sampler_2d(torch.randn(1, 1, 3, 3, device=DEV), torch.randn(1, 2, 2, 3, device=DEV), 0, 0, False)
    with pytest.raises(RuntimeError):
        F.grid_sample(torch.randn(1, 1, 3, 3, device=DEV), torch.randn(1, 2, 2, 2, device=DEV, dtype=torch.float64))


def _ctc_inputs(T, N, C, lengths, seed, dtype, concat=False, pad_to=None):
    lp = torch.randn(T, N, C, generator=_gen(seed), dtype=torch.float64).log_softmax(2).to(dtype)
    S = pad_to or max(lengths + [1])
    tg = torch.randint(1, C, (N, S), generator=_gen(seed + 1))
    if concat:
        tg = torch.cat([tg[i, :n] for i, n in enumerate(lengths)])
    return lp, tg


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("concat", [False, True])
def test_ctc_loss(dtype, reduction, concat):
    T, N, C = 11, 4, 6
    tl = [4, 0, 5, 2]
    il = [11, 3, 9, 6]
    lp, tg = _ctc_inputs(T, N, C, tl, 10, dtype, concat, pad_to=6)
    lp.requires_grad_()
    _compare(lambda a: F.ctc_loss(a, tg.to(a.device), il, tl, reduction=reduction), [lp], dtype)


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_impossible_alignment_blank_and_int32(zero_infinity):
    """A target longer than its input (likelihood 0: loss inf) and repeated labels that need blanks between
    them; blank != 0; int32 targets; non-contiguous log_probs."""
    T, N, C = 5, 3, 5
    lp = torch.randn(N, T, C, generator=_gen(20), dtype=torch.float64).log_softmax(2).transpose(0, 1)
    tg = torch.tensor([[1, 1, 1, 2], [2, 3, 3, 0], [1, 2, 3, 1]], dtype=torch.int32)
    tl, il = [4, 3, 2], [5, 4, 5]
    lp = lp.detach().requires_grad_()
    for blank in (0, 4):
        _compare(lambda a: F.ctc_loss(a, tg.to(a.device), il, tl, blank=blank, reduction="sum",
                                      zero_infinity=zero_infinity), [lp], torch.float64)
    # the raw op: log_alpha inside each sample's lengths matches CPU's
    nll, la = torch.ops.aten._ctc_loss(lp.detach().to(DEV), tg.to(DEV), il, tl, 0, zero_infinity)
    nll0, la0 = torch.ops.aten._ctc_loss(lp.detach(), tg, il, tl, 0, zero_infinity)
    torch.testing.assert_close(nll.cpu(), nll0)
    for b in range(N):
        torch.testing.assert_close(la.cpu()[b, :il[b], :2 * tl[b] + 1], la0[b, :il[b], :2 * tl[b] + 1])


def test_ctc_loss_errors():
    lp, tg = _ctc_inputs(5, 2, 4, [2, 2], 30, torch.float32)
    lpd, tgd = lp.to(DEV), tg.to(DEV)
    cases = [([6, 5], [2, 2], 0, "Expected input_lengths to have value at most 5, but got value 6"),
             ([5, 5], [2, 3], 0, "Expected tensor to have size at least 3 at dimension 1, but got size 2"),
             ([5, 5], [-1, 2], 0, "Expected target_lengths to have value at least 0, but got value -1"),
             ([-1, 5], [2, 2], 0, "Expected input_lengths to have value at least 0, but got value -1"),
             ([5, 5], [2, 2], 4, "blank must be in label range"),
             ([5], [2, 2], 0, "input_lengths must be of size batch_size")]
    for il, tl, blank, msg in cases:
        with pytest.raises(RuntimeError, match=msg):
            torch.ops.aten._ctc_loss(lp, tg, il, tl, blank, False)  # CPU raises it too
        with pytest.raises(RuntimeError, match=msg):
            torch.ops.aten._ctc_loss(lpd, tgd, il, tl, blank, False)
    bad = tg.clone()
    bad[1, 0] = 7  # label outside [0, C): CPU reads out of bounds; tpu raises at the next sync
    with pytest.raises(RuntimeError, match="target label 7 of batch element 1 is out of range"):
        F.ctc_loss(lpd, bad.to(DEV), [5, 5], [2, 2]).cpu()
    torch.testing.assert_close(F.ctc_loss(lpd, tgd, [5, 5], [2, 2]).cpu(),
                               F.ctc_loss(lp.double(), tg, [5, 5], [2, 2]).float())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_3d(dtype, mode, padding, align):
    x = torch.randn(2, 3, 4, 5, 3, generator=_gen(40), dtype=torch.float64).to(dtype).requires_grad_()
    grid = (torch.rand(2, 3, 4, 2, 3, generator=_gen(41), dtype=torch.float64) * 2.6 - 1.3).to(dtype)
    grid.requires_grad_(mode != "nearest")
    _compare(lambda a, g: F.grid_sample(a, g, mode=mode, padding_mode=padding, align_corners=align), [x, grid], dtype)


def test_grid_sample_3d_noncontiguous_and_errors():
    x = torch.randn(1, 2, 3, 4, 5, generator=_gen(42), dtype=torch.float64).permute(0, 1, 4, 3, 2).requires_grad_()
    grid = (torch.rand(1, 2, 3, 3, 3, generator=_gen(43), dtype=torch.float64) * 2 - 1).transpose(1, 3)
    _compare(lambda a, g: F.grid_sample(a, g, padding_mode="reflection", align_corners=True),
             [x, grid.requires_grad_()], torch.float64)
    with pytest.raises(RuntimeError, match="bicubic interpolation only supports 4D input"):
        F.grid_sample(torch.randn(1, 1, 2, 2, 2, device=DEV), torch.zeros(1, 1, 1, 1, 3, device=DEV), mode="bicubic")
