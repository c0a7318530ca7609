"""In-place one-pass updates: addcmul_ / addcdiv_ / lerp_ (f32: the host's one-pass custom kernels, run as a
library step) write straight into self when self is the very same view as the operand it overlaps (no temporary,
no output copy); an operand that overlaps self without being the same view (a shifted slice of it) still goes
through a temporary. Bits vs PyTorch CPU on odd sizes, transposed and strided selves, self passed as an operand
too, partial overlaps, and the _foreach_ lists torch.optim issues."""
from __future__ import annotations

import pytest
import torch

DEV = "tpu"


def rnd(shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def weights(t):
    """b's role as lerp weights: values in [-0.2, 1.2) built on the CPU (both sides get the same bits)."""
    return t.abs().remainder(1.4) - 0.2


def both(fn, *tensors):
    """fn applied to CPU clones and to tpu copies; returns (tpu results on cpu, cpu results)."""
    c = [t.clone() for t in tensors]
    d = [t.to(DEV) for t in tensors]
    fn(*c)
    fn(*d)
    return [t.cpu() for t in d], c


UPDATES = {
    "addcmul": lambda s, a, b: s.addcmul_(a, b, value=-0.37),
    "addcdiv": lambda s, a, b: s.addcdiv_(a, b.abs() + 0.5, value=0.21),
    "lerp_scalar": lambda s, a, b: s.lerp_(a, 0.1),
    "lerp_scalar_big": lambda s, a, b: s.lerp_(a, 0.75),
    "lerp_tensor": lambda s, a, b: s.lerp_(a, b),  # b: weights() on the CPU
}


@pytest.mark.parametrize("name", list(UPDATES))
@pytest.mark.parametrize("shape", [(1,), (7,), (4099,), (37, 129), (3, 5, 70001)])
def test_inplace_same_bits(name, shape):
    s, a, b = rnd(shape, 1), rnd(shape, 2), weights(rnd(shape, 3))
    got, exp = both(lambda s, a, b: UPDATES[name](s, a, b), s, a, b)
    assert torch.equal(got[0], exp[0])
    assert torch.equal(got[1], exp[1]) and torch.equal(got[2], exp[2])  # operands untouched


@pytest.mark.parametrize("name", ["addcmul", "addcdiv", "lerp_scalar", "lerp_tensor"])
def test_inplace_self_as_operand(name):
    s, b = rnd((301, 17), 4), weights(rnd((301, 17), 5))
    got, exp = both(lambda s, b: UPDATES[name](s, s, b), s, b)  # self is also t1 / end
    assert torch.equal(got[0], exp[0])
    if name.startswith("addc"):
        got, exp = both(lambda s: UPDATES[name](s, s, s), s)  # self is every operand
        assert torch.equal(got[0], exp[0])


@pytest.mark.parametrize("name", list(UPDATES))
def test_inplace_views(name):
    base, a, b = rnd((64, 90), 6), rnd((90, 64), 7), weights(rnd((64, 180), 8))
    # a transposed self and a strided self (every other column), each updated in place
    got, exp = both(lambda x, a, b: UPDATES[name](x.t(), a, b[:, ::2].t()), base, a, b)
    assert torch.equal(got[0], exp[0])
    got, exp = both(lambda x, a, b: UPDATES[name](x[:, ::2], a.t()[:, :45], b[:, 1::4]), base, a, b)
    assert torch.equal(got[0], exp[0])


@pytest.mark.parametrize("name", list(UPDATES))
def test_inplace_partial_overlap(name):
    x, b = rnd((5001,), 9), weights(rnd((5000,), 10))
    # self = x[1:] next to a copy of x[:-1]; then self = y[:, 1:] with an operand that overlaps it (y[:, :-1])
    got, exp = both(lambda x, b: UPDATES[name](x[1:], x[:-1].clone(), b), x, b)
    assert torch.equal(got[0], exp[0])
    y, b2 = rnd((64, 64), 11), weights(rnd((64, 63), 12))
    # (PyTorch CPU's result then depends on its loop order; ours reads every operand before writing: compare
    # with the same update made from a copy of the overlapping operand)
    yd = y.to(DEV)
    UPDATES[name](yd[:, 1:], yd[:, :-1], b2.to(DEV))
    exp = y.clone()
    UPDATES[name](exp[:, 1:], y[:, :-1].clone(), b2)
    assert torch.equal(yd.cpu(), exp)


@pytest.mark.parametrize("op", ["addcmul", "addcdiv", "lerp"])
def test_foreach_inplace_same_bits(op):
    shapes = [(600, 600), (600,), (13, 7), (1,), (4099,)]
    sel = [rnd(sh, 20 + i) for i, sh in enumerate(shapes)]
    t1 = [rnd(sh, 30 + i) for i, sh in enumerate(shapes)]
    t2 = [rnd(sh, 40 + i).abs() + 0.1 for i, sh in enumerate(shapes)]
    if op == "lerp":
        fn = lambda s, a, b: torch._foreach_lerp_(s, a, 0.1)
    else:
        fn = lambda s, a, b: getattr(torch, f"_foreach_{op}_")(s, a, b, [0.1, -0.2, 0.3, 1e-3, 2.0])
    d = [x.to(DEV) for x in sel]
    fn(d, [x.to(DEV) for x in t1], [x.to(DEV) for x in t2])
    c = [x.clone() for x in sel]
    fn(c, t1, t2)
    for p, q in zip(d, c):
        assert torch.equal(p.cpu(), q)
    # self also the first operand (exp_avg_sq.addcmul_(g, g) has self apart; this aliases on purpose)
    d2 = [x.to(DEV) for x in sel]
    fn(d2, d2, [x.to(DEV) for x in t2])
    c2 = [x.clone() for x in sel]
    fn(c2, c2, t2)
    for p, q in zip(d2, c2):
        assert torch.equal(p.cpu(), q)


@pytest.mark.parametrize("op", ["add", "sub"])
def test_foreach_alpha_one_and_not(op):
    """_foreach_add_/_sub_ .List/.Tensor key alpha by whether it is 1 (the alpha == 1 graph has no multiply): the
    same lists with alpha 1, 0.5, 1, -1 in turn each get their own result (a cached graph of the other class would
    give wrong values)."""
    shapes = [(600, 7), (13,), (1,)]
    xs = [rnd(sh, 60 + i) for i, sh in enumerate(shapes)]
    ys = [rnd(sh, 70 + i) for i, sh in enumerate(shapes)]
    fn = getattr(torch, f"_foreach_{op}_")
    d, c = [x.to(DEV) for x in xs], [x.clone() for x in xs]
    yd = [y.to(DEV) for y in ys]
    for alpha in (1, 0.5, 1.0, -1, 1):
        fn(d, yd, alpha=alpha)
        fn(c, ys, alpha=alpha)
        for p, q in zip(d, c):
            torch.testing.assert_close(p.cpu(), q, rtol=1e-6, atol=1e-6)  # (CPU: fma(alpha, y, x); ours rounds twice)
    if op == "add":  # .Tensor: a 0-dim tensor other
        t = torch.tensor(0.25)
        for alpha in (1, 2.0):
            torch._foreach_add_(d, t.to(DEV), alpha=alpha)
            torch._foreach_add_(c, t, alpha=alpha)
            for p, q in zip(d, c):
                torch.testing.assert_close(p.cpu(), q, rtol=1e-6, atol=1e-6)


MORE = {
    "adagrad": lambda ps, **kw: torch.optim.Adagrad(ps, lr=0.05, **kw),
    "adagrad_wd_max": lambda ps, **kw: torch.optim.Adagrad(ps, lr=0.05, lr_decay=0.01, weight_decay=0.1,
                                                           initial_accumulator_value=0.2, maximize=True, **kw),
    "rmsprop": lambda ps, **kw: torch.optim.RMSprop(ps, lr=0.01, **kw),
    "rmsprop_all": lambda ps, **kw: torch.optim.RMSprop(ps, lr=0.01, momentum=0.9, centered=True, weight_decay=0.05,
                                                        maximize=True, **kw),
    "sgd_nesterov_wd": lambda ps, **kw: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, **kw),
    "adam_amsgrad_max": lambda ps, **kw: torch.optim.Adam(ps, lr=0.01, amsgrad=True, maximize=True, weight_decay=0.02,
                                                          **kw),
}


@pytest.mark.parametrize("foreach", [True, False])
@pytest.mark.parametrize("name", list(MORE))
def test_more_optimizers_match_cpu(name, foreach):
    """Adagrad and RMSprop (their foreach forms run addcmul_ / addcdiv_ in place) and flag mixes, 4 steps on odd-sized
    parameters, vs PyTorch CPU within test_optim.py's tolerance."""
    torch.manual_seed(0)
    shapes = [(37, 13), (13,), (5, 3, 7), (1,)]
    init = [torch.randn(s) for s in shapes]
    gen = torch.Generator().manual_seed(3)
    grads = [[torch.randn(s, generator=gen) for s in shapes] for _ in range(4)]
    out = {}
    for dev in ("cpu", DEV):
        ps = [torch.nn.Parameter(t.clone().to(dev)) for t in init]
        opt = MORE[name](ps, foreach=foreach)
        for gs in grads:
            for p, g in zip(ps, gs):
                p.grad = g.to(dev)
            opt.step()
        out[dev] = [p.detach().cpu() for p in ps]
    for a, b in zip(out[DEV], out["cpu"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
