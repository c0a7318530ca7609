"""Regressions found by benchmarks/bench_memory.py (peak memory of a training step vs PyTorch CPU):

- silu_backward / mish_backward run as ONE device op (their CompositeImplicitAutograd math kernels ran as
  5-6 ops, each leaving a full-size temporary: a UNet step's peak was 1.3x CPU's);
- the allocator's classes above 1 MiB are 1/8 of the power of two (were whole 2 MiB multiples: 1-2 MiB
  activations took up to 2x their bytes).
"""
from __future__ import annotations

import pytest
import torch
import torch_tpu

DEV = "tpu"
MiB = 1 << 20


@pytest.mark.parametrize("op", [torch.ops.aten.silu_backward, torch.ops.aten.mish_backward])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_activation_backward_is_one_op(op, dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(5, 37, generator=g) * 4).to(dtype)
    gy = torch.randn(5, 37, generator=g).to(dtype)
    xd, gd = x.to(DEV), gy.to(DEV)
    torch.tpu.synchronize()
    before = torch_tpu.metrics()["ops_run"]
    got = op(gd, xd)
    assert torch_tpu.metrics()["ops_run"] - before == 1
    torch.testing.assert_close(got.cpu(), op(gy, x))


def test_silu_grad_through_autograd():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 33, generator=g)
    xd = x.to(DEV).requires_grad_()
    xc = x.clone().requires_grad_()
    torch.nn.functional.silu(xd).sum().backward()
    torch.nn.functional.silu(xc).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)


@pytest.mark.parametrize("nbytes,block", [(MiB + 1, MiB + 128 * 1024), (3 * MiB + 1, 3 * MiB + 256 * 1024),
                                          (5 * MiB, 5 * MiB), (1000, 1024)])
def test_allocator_rounding(nbytes, block):
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    t = torch.empty(nbytes, dtype=torch.uint8, device=DEV)
    assert torch.tpu.memory_allocated() - base == block
    del t


def test_executor_scratch_is_reported():
    """The host executor's temporaries (device memory outside the allocator) are counted in
    memory_stats()["scratch_bytes.*"]: in use only while an executable runs, peak since reset."""
    x = torch.randn(256, 512, device=DEV)
    torch.tpu.synchronize()
    torch.tpu.reset_peak_memory_stats()
    s = torch.tpu.memory_stats()
    assert s["scratch_bytes.all.current"] == 0 and s["scratch_bytes.all.peak"] == 0
    # var_mean reads exp(x) twice (sum and sum of squares): exp(x) is materialized in scratch
    got = torch.var_mean(x.exp(), 0)
    torch.tpu.synchronize()
    s = torch.tpu.memory_stats()
    assert s["scratch_bytes.all.current"] == 0  # nothing runs: every block went back
    assert s["scratch_bytes.all.peak"] >= x.numel() * 4
    assert s["scratch_bytes.cached"] >= 0
    exp = torch.var_mean(x.cpu().exp(), 0)
    torch.testing.assert_close(got[0].cpu(), exp[0])
    torch.testing.assert_close(got[1].cpu(), exp[1])
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.memory_stats()["scratch_bytes.all.peak"] == 0
