"""GEMM epilogue fusion (the host driver runs the elementwise ops after a matrix product, the bias add
of addmm, activations and the f32 -> bf16/f16 convert of autocast, on each block of the product as
the GEMM finishes it; TORCH_TPU_GEMM_EPILOGUE=0 turns it off).

Results vs PyTorch CPU (F.linear with bias and an activation, f32 and under bf16 autocast, strict
and fused eager, odd shapes, 3-D inputs), and bit identity between the fused and the unfused
executors on the same inputs (two processes, the environment variable set differently). The C test
csrc/tpurt/tests/test_epilogue.c checks the fusion itself on hand-built graphs."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

DEV = "tpu"
pytestmark = pytest.mark.skipif(not torch.tpu.is_available(), reason="no tpu device")

ACTS = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu, "none": lambda t: t}


def make(shape, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * scale


def close_f32(got, want):
    assert got.device.type == DEV and got.dtype == want.dtype and got.shape == want.shape
    g = got.cpu()
    tol = 1e-5 * (want.abs().max() + 1)
    assert bool(((g - want).abs() <= tol + 1e-5 * want.abs()).all()), float((g - want).abs().max())


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("shape,n", [((1, 7), 5), ((33, 130), 7), ((3, 13, 33), 130), ((130, 1), 33)])
@pytest.mark.parametrize("fused", [False, True])
def test_linear_bias_act_f32(act, shape, n, fused):
    x, w, b = make(shape, 1), make((n, shape[-1]), 2, 0.3), make((n,), 3)
    want = ACTS[act](F.linear(x, w, b))
    torch_tpu.set_fused_eager(fused)
    try:
        got = ACTS[act](F.linear(x.to(DEV), w.to(DEV), b.to(DEV)))
        got = got.cpu().to(DEV)  # flush
    finally:
        torch_tpu.set_fused_eager(False)
    close_f32(got, want)


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("shape,n", [((7, 33), 130), ((2, 9, 65), 17), ((1, 1), 1)])
@pytest.mark.parametrize("fused", [False, True])
def test_linear_bias_act_autocast_bf16(act, shape, n, fused):
    """Under bf16 autocast: bf16 operands, f32 accumulation and bias add, one rounding to bf16; the
    activation then runs on the bf16 result (as on CPU)."""
    x, w, b = make(shape, 4), make((n, shape[-1]), 5, 0.3), make((n,), 6)
    bf = lambda t: t.bfloat16().float()  # noqa: E731
    lin32 = F.linear(bf(x), bf(w), bf(b))
    torch_tpu.set_fused_eager(fused)
    try:
        with torch.autocast(DEV, dtype=torch.bfloat16):
            y = F.linear(x.to(DEV), w.to(DEV), b.to(DEV))
            z = ACTS[act](y)
        y, z = y.cpu(), z.cpu()
    finally:
        torch_tpu.set_fused_eager(False)
    assert y.dtype == torch.bfloat16 and z.dtype == torch.bfloat16
    err = (y.float() - lin32).abs()
    assert bool((err <= 2.0 ** -8 * lin32.abs() + 1e-4 * (lin32.abs().max() + 1)).all())
    # the activation of the device's own bf16 linear output, computed by PyTorch CPU in bf16
    want = ACTS[act](y)
    assert bool(((z.float() - want.float()).abs() <= 2.0 ** -8 * want.float().abs() + 1e-6).all())


_SAME = """
    import hashlib, sys
    import torch, torch.nn.functional as F
    import torch_tpu
    g = torch.Generator().manual_seed(11)
    r = lambda *s: torch.randn(*s, generator=g)
    outs = []
    x, w, b = r(37, 130), r(65, 130) * 0.2, r(65)
    x3, res = r(3, 11, 130), r(3, 11, 65)
    q, k = r(4, 33, 64).bfloat16(), r(4, 64, 70).bfloat16()
    qs, ks, mask = r(64, 16, 8), r(64, 8, 16), r(16, 16) > 0.5  # 16+ matrices of <= 4096: epilogue after the product
    for fused in (False, True):
        torch_tpu.set_fused_eager(fused)
        d = lambda t: t.to("tpu")
        outs.append(F.gelu(F.linear(d(x), d(w), d(b))).cpu())
        outs.append(F.silu(F.linear(d(x3), d(w), d(b))).cpu())
        outs.append((F.linear(d(x3), d(w)) + d(res)).relu().cpu())
        outs.append(torch.bmm(d(q), d(k)).cpu())
        outs.append((torch.bmm(d(q), d(k)) * 0.125).softmax(-1).cpu())
        outs.append((torch.bmm(d(qs), d(ks)) * 0.25).masked_fill(d(mask), -1e4).cpu())
        outs.append((torch.bmm(d(qs[:15]), d(ks[:15])) * 0.25 + 1.0).cpu())  # 15: per matrix
        outs.append(torch.addmm(d(b), d(x), d(w).t(), beta=0.5, alpha=2.0).cpu())
        with torch.autocast("tpu", dtype=torch.bfloat16):
            outs.append(F.gelu(F.linear(d(x3), d(w), d(b))).cpu())
            outs.append(F.linear(d(x), d(w)).cpu())
            outs.append(F.linear(d(x).half(), d(w).half(), d(b).half()).cpu())
        torch_tpu.set_fused_eager(False)
    for t in outs:
        print(hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16], t.dtype)
"""


def _run(value: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "TORCH_TPU_GEMM_EPILOGUE"}
    env["TORCH_TPU_GEMM_EPILOGUE"] = value
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_SAME)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("\n")


def test_fused_epilogue_is_bit_identical_to_unfused():
    on, off = _run("1"), _run("0")
    assert len(on) > 22 and on == off
