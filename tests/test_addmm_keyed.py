"""addmm / baddbmm / addbmm / addmv / _addmm_activation with beta and alpha as executable-cache key scalars
(lower/matmul.c): beta = alpha = 1 (nn.Linear's bias) takes the one-add epilogue, other values the general
select(beta == 0, ...) form; both vs PyTorch CPU on random odd-sized inputs, one after another in the same
process (so a cached executable for one (beta, alpha) must never serve another), with NaN / inf in self
(beta = 0 ignores self), broadcast and non-contiguous self, bf16 and f64."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

DEV = "tpu"
COEFFS = [(1, 1), (0, 1), (1, 0), (2, 1), (1, 0.5), (1, 1), (-1.5, 3), (0, 0), (1.0, 1.0), (1, 1)]


def gen(seed):
    return torch.Generator().manual_seed(seed)


def close(t, c, dt=torch.float32):
    tol = {"rtol": 2e-2, "atol": 2e-2} if dt == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-4}
    torch.testing.assert_close(t.cpu(), c, equal_nan=True, **tol)


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16, torch.float64])
def test_addmm_coeffs(dt):
    a = torch.randn(37, 19, generator=gen(0)).to(dt)
    b = torch.randn(19, 23, generator=gen(1)).to(dt)
    selfs = [torch.randn(37, 23, generator=gen(2)).to(dt), torch.randn(23, generator=gen(3)).to(dt),
             torch.randn(23, 37, generator=gen(4)).to(dt).t()]
    nan_self = selfs[0].clone()
    nan_self[3, 4] = float("nan"); nan_self[5, 6] = float("inf")
    selfs.append(nan_self)
    for beta, alpha in COEFFS:
        for s in selfs:
            close(torch.addmm(s.to(DEV), a.to(DEV), b.to(DEV), beta=beta, alpha=alpha),
                  torch.addmm(s, a, b, beta=beta, alpha=alpha), dt)


def test_batched_and_vector_coeffs():
    b1 = torch.randn(5, 7, 9, generator=gen(5)); b2 = torch.randn(5, 9, 11, generator=gen(6))
    s3 = torch.randn(5, 7, 11, generator=gen(7)); s2 = torch.randn(7, 11, generator=gen(8))
    m = torch.randn(13, 9, generator=gen(9)); v = torch.randn(9, generator=gen(10)); sv = torch.randn(13, generator=gen(11))
    for beta, alpha in COEFFS:
        close(torch.baddbmm(s3.to(DEV), b1.to(DEV), b2.to(DEV), beta=beta, alpha=alpha),
              torch.baddbmm(s3, b1, b2, beta=beta, alpha=alpha))
        close(torch.addbmm(s2.to(DEV), b1.to(DEV), b2.to(DEV), beta=beta, alpha=alpha),
              torch.addbmm(s2, b1, b2, beta=beta, alpha=alpha))
        close(torch.addmv(sv.to(DEV), m.to(DEV), v.to(DEV), beta=beta, alpha=alpha),
              torch.addmv(sv, m, v, beta=beta, alpha=alpha))
        close(torch.ops.aten._addmm_activation(s2.to(DEV), b1[0].to(DEV), b2[0].to(DEV), beta=beta, alpha=alpha,
                                               use_gelu=True),
              torch.ops.aten._addmm_activation(s2, b1[0], b2[0], beta=beta, alpha=alpha, use_gelu=True))
    close(m.to(DEV) @ v.to(DEV), m @ v)  # mv: addmv with beta = 0 on an uninitialized self


def test_linear_bias_fwd_bwd():
    x = torch.randn(3, 17, 29, generator=gen(12))
    lin = torch.nn.Linear(29, 31)
    ld = torch.nn.Linear(29, 31).to(DEV)
    ld.load_state_dict(lin.state_dict())
    xd = x.to(DEV).requires_grad_(); x.requires_grad_()
    yd, y = ld(xd), lin(x)
    close(yd, y)
    g = torch.randn(y.shape, generator=gen(13))
    yd.backward(g.to(DEV)); y.backward(g)
    close(xd.grad, x.grad); close(ld.weight.grad, lin.weight.grad); close(ld.bias.grad, lin.bias.grad)
    close(F.gelu(F.linear(xd, ld.weight, ld.bias)), F.gelu(F.linear(x, lin.weight, lin.bias)))


def test_default_coeffs_compile_to_one_add(tmp_path):
    """beta = alpha = 1 compiles to dot + one add (no select on beta == 0); other values to the general form."""
    import os
    import subprocess
    import sys
    code = ("import torch, torch_tpu\n"
            "a = torch.randn(9, 5, device='tpu'); b = torch.randn(5, 7, device='tpu'); s = torch.randn(7, device='tpu')\n"
            "torch.addmm(s, a, b).cpu()\n")
    env = dict(os.environ, TORCH_TPU_DUMP_IR=str(tmp_path), TORCH_TPU_CACHE_DIR="0")
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    files = [f for f in os.listdir(tmp_path) if f.endswith("aten__addmm.out.after.txt")]
    assert len(files) == 1, os.listdir(tmp_path)
    text = (tmp_path / files[0]).read_text()
    assert "dot_general" in text and "add(" in text and "select" not in text and "multiply" not in text, text


def test_coeffs_other_than_one_share_one_executable():
    """beta / alpha are keyed only by whether they equal 1 (lower/matmul.c addmm_coeff_class): after one
    general (beta, alpha) pair has compiled, other float pairs (beta = 0 included: the select reads beta at
    run time, so NaN in self is still ignored) reuse it."""
    import torch_tpu
    a = torch.randn(29, 13, generator=gen(20)); b = torch.randn(13, 17, generator=gen(21))
    s = torch.randn(29, 17, generator=gen(22))
    s[1, 2] = float("nan")
    ad, bd, sd = a.to(DEV), b.to(DEV), s.to(DEV)
    close(torch.addmm(sd, ad, bd, beta=2.0, alpha=0.5), torch.addmm(s, a, b, beta=2.0, alpha=0.5))
    before = torch_tpu.metrics()
    for beta, alpha in [(0.0, 3.0), (-1.5, 0.25), (0.0, 0.0), (4.0, -2.0)]:
        close(torch.addmm(sd, ad, bd, beta=beta, alpha=alpha), torch.addmm(s, a, b, beta=beta, alpha=alpha))
    after = torch_tpu.metrics()
    assert after["exec_cache_misses"] == before["exec_cache_misses"]
    assert after["compiles"] == before["compiles"]
