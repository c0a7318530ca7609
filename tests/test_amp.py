"""Mixed precision on tpu: torch.amp.GradScaler("tpu") with torch.autocast("tpu", dtype=torch.float16).

GradScaler's two ops are lowered in lower/optim.c (_amp_foreach_non_finite_check_and_unscale_,
_amp_update_scale_). Checked against PyTorch CPU: each op on random tensors (odd sizes,
non-contiguous, f32/f16/bf16, inf/NaN placed in one tensor of a list longer than one call's
slice), and a training loop (autocast f16 + GradScaler on both devices) with a forced overflow:
the step is skipped, the scale backs off, and it grows again after growth_interval good steps;
scale, growth tracker and parameters match CPU.
"""
from __future__ import annotations

import copy

import pytest
import torch

DEV = "tpu"


def _grads(gen: torch.Generator, dtype: torch.dtype, n: int = 20) -> list[torch.Tensor]:
    out = []
    for i in range(n):
        shape = (3 + i % 5, 7 - i % 3)
        t = torch.randn(shape, generator=gen).to(dtype) * 100
        out.append(t.t() if i % 4 == 1 else t)  # some non-contiguous
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bad", [None, "inf", "nan", "-inf"])
@pytest.mark.parametrize("where", [0, 19])  # first slice / last slice of a 20-tensor list
def test_unscale_matches_cpu(dtype, bad, where):
    gen = torch.Generator().manual_seed(3)
    cpu = _grads(gen, dtype)
    if bad is not None:
        cpu[where][1, 2] = float(bad)
    dev = [t.to(DEV) for t in cpu]
    assert sum(not t.is_contiguous() for t in dev) > 0
    inv = torch.tensor([1.0 / 1024.0])
    f_cpu, f_dev = torch.zeros(1), torch.zeros(1, device=DEV)
    torch._amp_foreach_non_finite_check_and_unscale_(cpu, f_cpu, inv)
    torch._amp_foreach_non_finite_check_and_unscale_(dev, f_dev, inv.to(DEV))
    assert f_dev.item() == f_cpu.item() == (0.0 if bad is None else 1.0)
    for a, b in zip(dev, cpu):
        torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0, equal_nan=True)


def test_unscale_keeps_found_inf_set():
    """found_inf is only ever set, never cleared (GradScaler accumulates it over groups)."""
    ts = [torch.ones(5, device=DEV)]
    found = torch.ones(1, device=DEV)
    torch._amp_foreach_non_finite_check_and_unscale_(ts, found, torch.full((1,), 0.5, device=DEV))
    assert found.item() == 1.0
    assert ts[0].cpu().tolist() == [0.5] * 5


def test_unscale_bad_arguments():
    ts = [torch.ones(3, device=DEV)]
    with pytest.raises(RuntimeError, match="found_inf must be a 1-element tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(ts, torch.zeros(2, device=DEV), torch.ones(1, device=DEV))
    with pytest.raises(RuntimeError, match="inv_scale must be a float tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(
            ts, torch.zeros(1, device=DEV), torch.ones(1, device=DEV, dtype=torch.float64))


@pytest.mark.parametrize("start_tracker", [0, 1, 2])
@pytest.mark.parametrize("found", [0.0, 1.0])
@pytest.mark.parametrize("scale", [65536.0, 3.0e38])  # 3e38 * 2 overflows f32: the scale is kept
def test_update_scale_matches_cpu(start_tracker, found, scale):
    res = {}
    for d in ("cpu", DEV):
        s = torch.tensor([scale], device=d)
        tr = torch.tensor([start_tracker], dtype=torch.int32, device=d)
        r = torch._amp_update_scale_(s, tr, torch.tensor([found], device=d), 2.0, 0.5, 3)
        assert r is s
        res[d] = (s.cpu(), tr.cpu())
    assert torch.equal(res[DEV][0], res["cpu"][0]) and torch.equal(res[DEV][1], res["cpu"][1])


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.Linear(32, 32),
                               torch.nn.LayerNorm(32), torch.nn.Linear(32, 5))


def _train(dev: str, overflow_steps: set[int], steps: int = 9):
    model = copy.deepcopy(_model()).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(dev, init_scale=2.0**12, growth_factor=2.0, backoff_factor=0.5,
                                  growth_interval=3)
    gen = torch.Generator().manual_seed(5)
    history = []
    for step in range(steps):
        x = torch.randn(16, 12, generator=gen).to(dev)
        y = torch.randint(0, 5, (16,), generator=gen).to(dev)
        opt.zero_grad()
        with torch.autocast(dev, dtype=torch.float16):
            out = model(x)
            assert out.dtype == torch.float16
            loss = torch.nn.functional.cross_entropy(out.float(), y)
        if step in overflow_steps:
            loss = loss * float("inf")  # forced overflow: every gradient becomes inf/NaN
        before = [p.detach().clone() for p in model.parameters()]
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        skipped = all(torch.equal(b, p.detach()) for b, p in zip(before, model.parameters()))
        history.append((scaler.get_scale(), int(scaler._growth_tracker.item()), skipped))
    return [p.detach().cpu() for p in model.parameters()], history


def test_grad_scaler_f16_training_matches_cpu():
    got, hist = _train(DEV, overflow_steps={2})
    exp, hist_cpu = _train("cpu", overflow_steps={2})
    assert hist == hist_cpu
    scales = [h[0] for h in hist]
    # steps 0, 1 good; 2 overflows (skipped, scale halves, tracker resets); 3..5 good -> grows at 5
    assert [h[2] for h in hist] == [False, False, True] + [False] * 6
    assert scales[:3] == [2.0**12, 2.0**12, 2.0**11]
    assert scales[5] == 2.0**12 and scales[8] == 2.0**13
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-3)
