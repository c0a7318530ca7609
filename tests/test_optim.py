"""torch.optim on tpu parameters vs the same optimizer on CPU: SGD (momentum, nesterov,
weight_decay), Adam (amsgrad, maximize), AdamW in the three implementations — foreach (the
default on tpu: each _foreach_* op is one graph, lower/foreach.c), fused=True (_fused_sgd_,
_fused_adam_, _fused_adamw_ lowered in lower/optim.c) and foreach=False — for 5 steps from
identical parameters and gradients; plus grad_scale / found_inf, Tensor lr, bf16, and
clip_grad_norm_."""
from __future__ import annotations

import copy

import pytest
import torch

DEV = "tpu"


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    # 10 parameter tensors: more than one fused call's chunk (the registry splits long lists)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.Tanh(), torch.nn.Linear(8, 8),
        torch.nn.LayerNorm(8), torch.nn.Linear(8, 5), torch.nn.Linear(5, 3),
    )


def run(dev: str, make_opt, steps: int = 5, dtype=torch.float32, clip: float | None = None):
    model = copy.deepcopy(make_model()).to(device=dev, dtype=dtype)
    opt = make_opt(model.parameters())
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=gen).to(device=dev, dtype=dtype)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
    return [p.detach().cpu() for p in model.parameters()], opt


OPTIMIZERS = {
    "sgd": lambda ps, **kw: torch.optim.SGD(ps, lr=0.1, **kw),
    "sgd_momentum": lambda ps, **kw: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01, **kw),
    "sgd_nesterov": lambda ps, **kw: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01,
                                                     maximize=True, **kw),
    "adam": lambda ps, **kw: torch.optim.Adam(ps, lr=0.01, **kw),
    "adam_wd_amsgrad": lambda ps, **kw: torch.optim.Adam(ps, lr=0.01, weight_decay=0.05, amsgrad=True, **kw),
    "adam_maximize": lambda ps, **kw: torch.optim.Adam(ps, lr=0.01, betas=(0.8, 0.9), maximize=True, **kw),
    "adamw": lambda ps, **kw: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, **kw),
    "adamw_amsgrad": lambda ps, **kw: torch.optim.AdamW(ps, lr=0.01, amsgrad=True, **kw),
}
MODES = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}, "single": {"foreach": False}}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_matches_cpu(name, mode):
    make = lambda ps: OPTIMIZERS[name](ps, **MODES[mode])
    got, opt = run(DEV, make)
    exp, _ = run("cpu", make)
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # optimizer state lives on the device
    for st in opt.state.values():
        for k, v in st.items():
            if torch.is_tensor(v) and k != "step":
                assert v.device.type == DEV


def test_fused_ops_reach_the_device():
    """fused=True runs our _fused_* lowerings (no CPU fallback, no decomposition)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.add(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    for make, op in ((lambda ps: torch.optim.Adam(ps, lr=0.01, fused=True), "aten._fused_adam_"),
                     (lambda ps: torch.optim.AdamW(ps, lr=0.01, fused=True), "aten._fused_adamw_"),
                     (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.5, fused=True), "aten._fused_sgd_")):
        with Ops() as m:
            run(DEV, make, steps=2)
        assert op in m.names, m.names


def _fused_args(dev, n=3, amsgrad=False):
    gen = torch.Generator().manual_seed(7)
    shapes = [(4, 3), (5,), (2, 2, 2)][:n]
    mk = lambda s=1.0: [(torch.randn(sh, generator=gen) * s).to(dev) for sh in shapes]
    params, grads, m = mk(), mk(), mk(0.1)
    v = [t.abs() for t in mk(0.1)]
    vmax = [t.clone() for t in v] if amsgrad else []
    steps = [torch.tensor(float(i + 3)).to(dev) for i in range(n)]
    return params, grads, m, v, vmax, steps


@pytest.mark.parametrize("fn", [torch._fused_adam_, torch._fused_adamw_])
@pytest.mark.parametrize("found", [0.0, 1.0])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_fused_adam_grad_scale_found_inf(fn, found, amsgrad):
    res = []
    for dev in (DEV, "cpu"):
        args = _fused_args(dev, amsgrad=amsgrad)
        fn(*args, lr=0.01, beta1=0.9, beta2=0.99, weight_decay=0.02, eps=1e-8, amsgrad=amsgrad, maximize=False,
           grad_scale=torch.tensor(4.0, device=dev), found_inf=torch.tensor(found, device=dev))
        res.append(args)
    for lt, lc in zip(*res):
        for a, b in zip(lt, lc):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("found", [0.0, 1.0])
def test_fused_sgd_grad_scale_found_inf(found):
    res = []
    for dev in (DEV, "cpu"):
        p, g, m, *_ = _fused_args(dev)
        torch._fused_sgd_(p, g, m, weight_decay=0.01, momentum=0.9, lr=0.1, dampening=0.0, nesterov=True,
                          maximize=False, is_first_step=False, grad_scale=torch.tensor(2.0, device=dev),
                          found_inf=torch.tensor(found, device=dev))
        res.append((p, g, m))
    for lt, lc in zip(*res):
        for a, b in zip(lt, lc):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd_momentum"])
def test_fused_tensor_lr(name):
    make = lambda ps: OPTIMIZERS[name](ps, fused=True) if name.startswith("sgd") else \
        (torch.optim.Adam if name == "adam" else torch.optim.AdamW)(ps, lr=torch.tensor(0.01), fused=True)
    got, _ = run(DEV, make)
    exp, _ = run("cpu", make)
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["foreach", "fused"])
def test_adamw_bf16(mode):
    make = lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, **MODES[mode])
    got, _ = run(DEV, make, dtype=torch.bfloat16)
    exp, _ = run("cpu", make, dtype=torch.bfloat16)
    for a, b in zip(got, exp):
        assert a.dtype == torch.bfloat16
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("foreach", [None, False])
@pytest.mark.parametrize("norm_type", [2.0, float("inf")])
def test_clip_grad_norm(foreach, norm_type):
    res = []
    for dev in (DEV, "cpu"):
        model = copy.deepcopy(make_model()).to(dev)
        gen = torch.Generator().manual_seed(3)
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=gen).to(dev)
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, norm_type=norm_type, foreach=foreach)
        res.append((total.cpu(), [p.grad.cpu() for p in model.parameters()]))
    torch.testing.assert_close(res[0][0], res[1][0], rtol=1e-5, atol=1e-6)
    for a, b in zip(res[0][1], res[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_adam_with_clip_training_loop():
    make = lambda ps: torch.optim.Adam(ps, lr=0.01)
    got, _ = run(DEV, make, clip=1.0)
    exp, _ = run("cpu", make, clip=1.0)
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
