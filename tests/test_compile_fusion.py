"""Fusion of elementwise custom calls (SiLU, GELU, their gradients, lerp, addcmul / addcdiv: rows.h's one-pass
kernels) into the host plan's elementwise clusters (drivers/host/exec.c, custom_elementwise): a multiply feeding an
addcmul, an AdamW update's sqrt / divide / add chain feeding its addcdiv, a bias add feeding a GELU in a GEMM
epilogue run as one tiled loop. The same per-element kernel runs on each tile, so results must be bitwise those of
the op-by-op path: fused eager (whose graphs take the fused plan) against strict eager (a lone custom call is a
library step), and compiled AdamW(capturable=True) against the same optimizer run eagerly; PyTorch CPU within
float tolerance. Odd sizes (1, one tile, several tiles, pool-sized), non-contiguous inputs, in-place updates,
NaN / inf inputs. TORCH_TPU_CUSTOM_FUSION=0 turns the fusion off (checked in a child process).
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from test_fused_eager import _to  # tests/test_fused_eager.py

pytestmark = pytest.mark.skipif(not torch.tpu.is_available(), reason="no tpu device")

SHAPES = [(1,), (37, 53), (513,), (4, 3, 70001 // 12)]


def _identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and (
        torch.equal(a, b) or bool((a.isnan() == b.isnan()).all()) and torch.equal(a.nan_to_num(), b.nan_to_num()))


def _inputs(shape, n, seed, special=True):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(shape, generator=g) * 3 for _ in range(n)]
    if special:
        flat = xs[0].view(-1)
        vals = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 30.0, -30.0])
        flat[: min(6, flat.numel())] = vals[: min(6, flat.numel())]
    return xs


# name -> fn(a, b, c) of f32 tensors of one shape; every chain has a custom call with an elementwise producer or
# consumer (or both) so the fused plan puts it in a cluster
CHAINS = {
    "silu_of_affine": lambda a, b, c: F.silu(a * 0.5 + b),
    "silu_then_mul": lambda a, b, c: F.silu(a) * b,
    "gelu_chain": lambda a, b, c: F.gelu(a - b) * 2 + c,
    "silu_bwd": lambda a, b, c: torch.ops.aten.silu_backward(b * c, a) + 1,
    "gelu_bwd": lambda a, b, c: torch.ops.aten.gelu_backward(b + c, a).abs(),
    "lerp_scalar": lambda a, b, c: torch.lerp(a * 2, b, 0.1) + c,
    "lerp_scalar_hi": lambda a, b, c: torch.lerp(a, b - c, 0.9).neg(),
    "lerp_tensor": lambda a, b, c: torch.lerp(a, b * 3, c.sigmoid()) - 1,
    "addcmul": lambda a, b, c: torch.addcmul(a * 0.9, b, c, value=0.1).sqrt(),
    "addcdiv": lambda a, b, c: torch.addcdiv(a, b.exp(), c.abs() + 1e-3, value=-0.01),
    "reduce_of_fused": lambda a, b, c: F.silu(a * b).sum(-1),
}


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_fused_eager_chains_bit_identical(name, shape):
    fn = CHAINS[name]
    args = _inputs(shape, 3, seed=hash(name) % 1000)
    strict = fn(*_to(args, "tpu")).cpu()
    with torch_tpu.fused_eager():
        fused = fn(*_to(args, "tpu")).cpu()
    assert _identical(strict, fused), (name, shape)
    # against the CPU on finite inputs (GELU(+inf) is NaN on the CPU, +inf here: the kernel's, not the fusion's)
    args = _inputs(shape, 3, seed=hash(name) % 1000, special=False)
    with torch_tpu.fused_eager():
        fused = fn(*_to(args, "tpu")).cpu()
    torch.testing.assert_close(fused, fn(*args), rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("name", ["silu_of_affine", "gelu_bwd", "lerp_tensor", "addcdiv"])
def test_fused_eager_non_contiguous(name):
    fn = CHAINS[name]
    args = [x.t() for x in _inputs((53, 37), 3, seed=5, special=False)]  # transposed views
    strict = fn(*_to(args, "tpu")).cpu()
    with torch_tpu.fused_eager():
        fused = fn(*_to(args, "tpu")).cpu()
    assert _identical(strict, fused)
    torch.testing.assert_close(fused, fn(*args), rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("shape", [(7,), (129, 31), (70001,)], ids=str)
def test_fused_eager_in_place_updates(shape):
    """AdamW-like in-place updates of pending values: mul_ then addcmul_, lerp_, addcdiv_ over a param."""

    def update(p, m, v, g):
        m.lerp_(g, 0.1)
        v.mul_(0.999).addcmul_(g, g, value=0.001)
        denom = (v.sqrt() / 0.3).add_(1e-8)
        p.mul_(0.99).addcdiv_(m, denom, value=-0.01)
        return p, m, v

    args = _inputs(shape, 4, seed=11, special=False)
    args[2] = args[2].abs()
    strict = _to(update(*_to(args, "tpu")), "cpu")
    with torch_tpu.fused_eager():
        fused = _to(update(*_to(args, "tpu")), "cpu")
    ref = update(*[a.clone() for a in args])
    for s, f, r in zip(strict, fused, ref):
        assert _identical(s, f)
        torch.testing.assert_close(f, r, rtol=1e-5, atol=1e-6)


def test_fused_eager_gelu_linear_epilogue():
    torch.manual_seed(0)
    x, w, b = torch.randn(33, 20), torch.randn(45, 20), torch.randn(45)

    def fn(x, w, b):
        return F.gelu(F.linear(x, w, b)) * 0.5

    strict = fn(*_to((x, w, b), "tpu")).cpu()
    with torch_tpu.fused_eager():
        fused = fn(*_to((x, w, b), "tpu")).cpu()
    assert _identical(strict, fused)
    torch.testing.assert_close(fused, fn(x, w, b), rtol=1e-4, atol=1e-5)


def _adamw_run(compiled: bool, shapes, steps=3, wd=1e-2):
    torch.manual_seed(0)
    ps = [torch.randn(s) for s in shapes]
    grads = [[torch.randn(s) for s in shapes] for _ in range(steps)]
    params = [torch.nn.Parameter(p.clone().to("tpu")) for p in ps]
    opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=wd, capturable=True)
    step = torch.compile(opt.step, backend="tpu") if compiled else opt.step
    for g in grads:
        for p, gg in zip(params, g):
            p.grad = gg.to("tpu")
        step()
    out = [p.detach().cpu() for p in params]
    out += [opt.state[p][k].cpu() for p in params for k in ("exp_avg", "exp_avg_sq")]
    return out


def test_compiled_adamw_capturable_bit_identical_to_eager():
    """The compiled optimizer graph fuses each parameter's multiply -> addcmul and sqrt/divide/add -> addcdiv
    chains; results must equal the eager optimizer's (op by op) bit for bit."""
    shapes = [(37, 53), (513,), (3, 8, 3, 3), (1,), (70001,)]
    torch._dynamo.reset()
    eager = _adamw_run(False, shapes)
    compiled = _adamw_run(True, shapes)
    for e, c in zip(eager, compiled):
        assert _identical(e, c)


def test_compiled_silu_gelu_model_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.SiLU(), torch.nn.Linear(40, 40), torch.nn.GELU(),
                                torch.nn.GroupNorm(4, 40), torch.nn.SiLU(), torch.nn.Linear(40, 5))
    x = torch.randn(19, 24)

    def run(compiled):
        m = copy.deepcopy(model).to("tpu")
        f = torch.compile(m, backend="tpu") if compiled else m
        xt = x.to("tpu").requires_grad_()
        y = f(xt)
        (y * y).sum().backward()
        return [y.detach().cpu(), xt.grad.cpu()] + [p.grad.cpu() for p in m.parameters()]

    torch._dynamo.reset()
    eager, compiled = run(False), run(True)
    for e, c in zip(eager, compiled):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-5)


def test_env_var_turns_fusion_off_same_bits(tmp_path):
    """TORCH_TPU_CUSTOM_FUSION=0 (each custom call a library step) gives the same bits as the fused plan."""
    code = (
        "import sys, torch, torch_tpu\n"
        "g = torch.Generator().manual_seed(3)\n"
        "a, b, c = (torch.randn(129, 77, generator=g) for _ in range(3))\n"
        "with torch_tpu.fused_eager():\n"
        "    r = torch.addcdiv(torch.lerp(a * 0.5, b, 0.2), torch.nn.functional.silu(b + c), c.abs() + 1, value=0.3)\n"
        "    r = r.cpu()\n"
        "torch.save(r, sys.argv[1])\n"
    )
    outs = []
    for flag in ("1", "0"):
        path = tmp_path / f"r{flag}.pt"
        env = dict(os.environ, TORCH_TPU_CUSTOM_FUSION=flag, TORCH_TPU_CACHE_DIR=str(tmp_path / f"cache{flag}"))
        subprocess.run([sys.executable, "-c", code, str(path)], check=True, env=env, timeout=300)
        outs.append(torch.load(path))
    assert _identical(outs[0], outs[1])
