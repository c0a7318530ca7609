"""aten::_foreach_* list ops (lower/foreach.c: one graph per call, each element lowered by the
single-tensor op's own lowering) vs PyTorch CPU's foreach ops: every family and overload in its
functional, in-place and out= forms, on lists that mix shapes, dtypes (f32/bf16/f16) and
non-contiguous members; empty, length-1 and long lists (the registry's split into several
calls); torch.optim optimizers with foreach=True for 3 steps vs CPU; and the number of device
tasks an optimizer step takes (torch_tpu.metrics()["ops_run"])."""
from __future__ import annotations

import copy

import pytest
import torch
import torch_tpu

DEV = "tpu"
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float32, torch.bfloat16, torch.float32]
# odd sizes, a 0-dim tensor, a non-contiguous member (built transposed), an empty tensor
SHAPES = [(5,), (3, 7), (), (4, 3), (1, 2, 3), (0,)]
TRANSPOSED = {3}


def ops_run() -> int:
    return torch_tpu.metrics()["ops_run"]


def make_list(seed: int, lo: float = -2.0, hi: float = 2.0, n: int | None = None, dtypes=None):
    """CPU tensors (some non-contiguous) and their device copies with the same strides."""
    gen = torch.Generator().manual_seed(seed)
    cpu, dev = [], []
    n = len(SHAPES) if n is None else n
    dtypes = dtypes or DTYPES
    for i in range(n):
        shape, dt = SHAPES[i % len(SHAPES)], dtypes[i % len(dtypes)]
        if i % len(SHAPES) in TRANSPOSED:
            base = (torch.rand(shape[::-1], generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dt)
            cpu.append(base.t())
            dev.append(base.to(DEV).t())
        else:
            t = (torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dt)
            cpu.append(t)
            dev.append(t.to(DEV))
    assert n <= 3 or not dev[3].is_contiguous()
    return cpu, dev


def check(got, exp):
    assert len(got) == len(exp)
    for g, e in zip(got, exp):
        assert g.device.type == DEV and g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g.cpu(), e, equal_nan=True)


def run_variants(name: str, variant: str, make_args, positive: bool = False):
    """Runs torch._foreach_<name>[_] on CPU and tpu lists: the tpu call must be ONE task."""
    lo, hi = (0.2, 1.8) if positive else (-2.0, 2.0)
    cpu_args, dev_args = make_args(lo, hi)
    if variant == "inplace":
        fn = getattr(torch, f"_foreach_{name}_")
        fn(*cpu_args)
        before = ops_run()
        fn(*dev_args)
        assert ops_run() - before == 1
        check(dev_args[0], cpu_args[0])
    elif variant == "functional":
        fn = getattr(torch, f"_foreach_{name}")
        exp = fn(*cpu_args)
        before = ops_run()
        got = fn(*dev_args)
        assert ops_run() - before == 1
        check(got, exp)
    else:  # out=
        op = getattr(torch.ops.aten, f"_foreach_{name}")
        exp = op(*cpu_args)
        outs = [torch.empty_like(e, device=DEV) for e in exp]
        overload = {"Scalar": "Scalar_out", "List": "List_out", "ScalarList": "ScalarList_out",
                    "Tensor": "Tensor_out"}
        kind = make_args.overload
        getattr(op, overload.get(kind, "out"))(*dev_args, out=outs)
        check(outs, exp)


VARIANTS = ["functional", "inplace", "out"]

UNARY = ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "exp", "expm1", "floor", "frac",
         "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign",
         "sin", "sinh", "sqrt", "tan", "tanh", "trunc"]
POSITIVE = {"acos", "asin", "log", "log10", "log1p", "log2", "rsqrt", "sqrt", "lgamma", "reciprocal"}


def args_maker(overload: str, fn):
    def make(lo, hi):
        return fn(lo, hi)
    make.overload = overload
    return make


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", UNARY)
def test_unary(name, variant):
    lo_hi = (0.1, 0.9) if name in ("acos", "asin") else None

    def mk(lo, hi):
        c, d = make_list(1, *(lo_hi or (lo, hi)))
        return [c], [d]
    run_variants(name, variant, args_maker("", mk), positive=name in POSITIVE)


def _scalar_list(n):
    return [0.5 + 0.25 * i for i in range(n)]


def binary_cases():
    """(name, overload, args builder(lo, hi) -> (cpu args, tpu args))"""
    def lst(name):
        def mk(lo, hi):
            a, da = make_list(2, lo, hi)
            b, db = make_list(3, lo, hi)
            return [a, b], [da, db]
        return mk

    def sc(v):
        def mk(lo, hi):
            a, da = make_list(2, lo, hi)
            return [a, v], [da, v]
        return mk

    def scl(lo, hi):
        a, da = make_list(2, lo, hi)
        s = _scalar_list(len(a))
        return [a, s], [da, s]

    def ten(device_scalar):
        def mk(lo, hi):
            a, da = make_list(2, lo, hi)
            t = torch.tensor(0.75)
            return [a, t], [da, t.to(DEV) if device_scalar else t]
        return mk

    cases = []
    for name in ["add", "sub", "mul", "div", "clamp_min", "clamp_max", "maximum", "minimum", "pow"]:
        cases.append((name, "List", lst(name)))
        cases.append((name, "Scalar", sc(1.25)))
        cases.append((name, "ScalarList", scl))
    for name in ["add", "mul", "div"]:
        cases.append((name, "Tensor", ten(True)))
        cases.append((name, "Tensor_cpu", ten(False)))
    cases.append(("add", "Scalar_int", sc(2)))
    return cases


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name,overload,mk", binary_cases(), ids=lambda x: x if isinstance(x, str) else "")
def test_binary(name, overload, mk, variant):
    run_variants(name, variant, args_maker(overload.split("_")[0], mk), positive=name == "pow")


def test_add_alpha_rounds_like_cpu():
    """add/sub(alpha=) on f16/bf16 round alpha to the tensor dtype first, as PyTorch's CPU kernels."""
    gen = torch.Generator().manual_seed(21)
    for dt in (torch.bfloat16, torch.float16):
        a = torch.randn(4001, generator=gen).to(dt)
        b = torch.randn(4001, generator=gen).to(dt)
        for fn in (torch.add, torch.sub):
            torch.testing.assert_close(fn(a.to(DEV), b.to(DEV), alpha=-0.3).cpu(), fn(a, b, alpha=-0.3))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", ["add", "sub"])
def test_add_sub_list_alpha(name, variant):
    # positive operands and a sign of alpha that adds magnitudes: PyTorch's CPU kernel rounds
    # alpha * other to bf16 before adding on small tensors (its scalar path) but not on long ones
    # (its vector path); without cancellation both roundings stay within bf16's tolerance
    alpha = 0.3 if name == "add" else -0.3
    a, da = make_list(4, 0.2, 1.8)
    b, db = make_list(5, 0.2, 1.8)
    if variant == "inplace":
        getattr(torch, f"_foreach_{name}_")(a, b, alpha=alpha)
        before = ops_run()
        getattr(torch, f"_foreach_{name}_")(da, db, alpha=alpha)
        assert ops_run() - before == 1
        check(da, a)
    elif variant == "functional":
        exp = getattr(torch, f"_foreach_{name}")(a, b, alpha=alpha)
        check(getattr(torch, f"_foreach_{name}")(da, db, alpha=alpha), exp)
    else:
        exp = getattr(torch, f"_foreach_{name}")(a, b, alpha=alpha)
        outs = [torch.empty_like(e, device=DEV) for e in exp]
        getattr(torch.ops.aten, f"_foreach_{name}").List_out(da, db, alpha=alpha, out=outs)
        check(outs, exp)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("overload", ["Scalar", "ScalarList", "Tensor"])
@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_addcmul_addcdiv(name, overload, variant):
    def mk(lo, hi):
        s, ds = make_list(6)
        t1, dt1 = make_list(7)
        t2, dt2 = make_list(8, 0.5, 2.0)
        n = len(s)
        if overload == "Scalar":
            v, dv = -0.7, -0.7
        elif overload == "ScalarList":
            v = dv = _scalar_list(n)
        else:  # n values in a 1-D CPU tensor (as PyTorch requires)
            v = dv = torch.tensor(_scalar_list(n))
        return [s, t1, t2, v], [ds, dt1, dt2, dv]
    run_variants(name, variant, args_maker(overload, mk))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("overload", ["Scalar", "ScalarList", "List"])
def test_lerp(overload, variant):
    def mk(lo, hi):
        s, ds = make_list(9)
        e, de = make_list(10)
        if overload == "Scalar":
            return [s, e, 0.3], [ds, de, 0.3]
        if overload == "ScalarList":
            w = [0.1, 0.7, 0.45, 0.9, 0.2, 0.6]
            return [s, e, w], [ds, de, w]
        w, dw = make_list(11, 0.0, 1.0)
        return [s, e, w], [ds, de, dw]
    run_variants("lerp", variant, args_maker(overload, mk))


def test_pow_scalar_and_tensor():
    e, de = make_list(12, -1.0, 1.5)
    before = ops_run()
    got = torch._foreach_pow(2.5, de)
    assert ops_run() - before == 1
    check(got, torch._foreach_pow(2.5, e))


@pytest.mark.parametrize("ord", [2, 1, float("inf"), 3.0])
def test_norm(ord):
    a, da = make_list(13, n=5)  # no empty tensor: inf-norm of nothing is an error
    exp = torch._foreach_norm(a, ord)
    before = ops_run()
    got = torch._foreach_norm(da, ord)
    assert ops_run() - before == 1
    check(got, exp)
    # the dtype argument
    exp = torch.ops.aten._foreach_norm.Scalar(a, 2, dtype=torch.float64)
    check(torch.ops.aten._foreach_norm.Scalar(da, 2, dtype=torch.float64), exp)


def test_max_zero_copy_clone():
    a, da = make_list(14, n=5)
    check(torch._foreach_max(da), torch._foreach_max(a))
    check(torch._foreach_clone(da) if hasattr(torch, "_foreach_clone") else torch.ops.aten._foreach_clone(da),
          torch.ops.aten._foreach_clone(a))
    b, db = make_list(15, dtypes=[torch.float32] * 6)  # copy_ converts each source to its target's dtype
    torch._foreach_copy_(a, b[:5])
    before = ops_run()
    torch._foreach_copy_(da, db[:5])
    assert ops_run() - before == 1
    check(da, a)
    torch._foreach_zero_(a)
    before = ops_run()
    torch._foreach_zero_(da)
    assert ops_run() - before == 1
    check(da, a)


def test_length_one_and_empty_lists():
    a, da = make_list(16, n=1)
    torch._foreach_mul_(a, 3.0)
    before = ops_run()
    torch._foreach_mul_(da, 3.0)
    assert ops_run() - before == 1
    check(da, a)
    check(torch._foreach_sqrt(da), torch._foreach_sqrt(a))
    # an empty list has no device to dispatch on: PyTorch's own check raises
    for fn in (torch._foreach_sqrt, lambda x: torch._foreach_add_(x, 1.0)):
        with pytest.raises(RuntimeError, match="at least one tensor"):
            fn([])


@pytest.mark.parametrize("n", [1100])
def test_long_list_splits(n):
    """More tensors than one graph binds: the registry runs slices, still far fewer tasks than tensors."""
    a, da = make_list(17, n=n)
    b, db = make_list(18, n=n)
    torch._foreach_add_(a, b, alpha=0.5)
    before = ops_run()
    torch._foreach_add_(da, db, alpha=0.5)
    calls = ops_run() - before
    assert 1 < calls <= 10
    check(da, a)
    s = [0.001 * i for i in range(n)]
    exp = torch._foreach_mul(a, s)
    before = ops_run()
    got = torch._foreach_mul(da, s)
    assert 1 < ops_run() - before <= 20
    check(got, exp)


def test_errors():
    a, da = make_list(19, n=3)
    b, db = make_list(20, n=2)
    with pytest.raises(RuntimeError):
        torch._foreach_add_(a, b)
    with pytest.raises(RuntimeError):
        torch._foreach_add_(da, db)
    with pytest.raises(RuntimeError):
        torch._foreach_mul_(da, [1.0, 2.0])
    with pytest.raises(RuntimeError, match="0 dim"):
        torch._foreach_mul_(da, torch.ones(2, device=DEV))
    with pytest.raises(RuntimeError, match="on CPU"):
        torch._foreach_addcmul_(da, da, da, torch.ones(3, device=DEV))
    with pytest.raises(RuntimeError):
        torch._foreach_addcmul_(da, da, da, torch.ones(2))
    with pytest.raises(RuntimeError):  # one list on two devices
        torch._foreach_mul_([da[0], a[1]], 2.0)
    ints = [torch.arange(3, device=DEV), torch.arange(4, device=DEV)]
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch._foreach_add_(ints, 0.5)  # like CPU: Float result into Long tensors
    # a family without a lowering keeps PyTorch's per-tensor decomposition, whose ops must each exist
    with pytest.raises(NotImplementedError, match="erfc"):
        torch._foreach_erfc(da)


# ---------------------------------------------------------------- torch.optim with foreach=True

def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 9), torch.nn.LayerNorm(9), torch.nn.Tanh(), torch.nn.Linear(9, 7),
        torch.nn.LayerNorm(7), torch.nn.Linear(7, 5), torch.nn.Linear(5, 3),
    )


OPTIMIZERS = {
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01, foreach=True),
    "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01,
                                               maximize=True, foreach=True),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=True),
    "adam_amsgrad_maximize": lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.05, amsgrad=True,
                                                         maximize=True, foreach=True),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, foreach=True),
    "adamw_amsgrad": lambda ps: torch.optim.AdamW(ps, lr=0.01, amsgrad=True, foreach=True),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1, lr_decay=0.01, weight_decay=0.01, foreach=True),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=0.01, weight_decay=0.01, foreach=True),
    "rmsprop_centered_momentum": lambda ps: torch.optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True,
                                                               foreach=True),
    "adamax": lambda ps: torch.optim.Adamax(ps, lr=0.01, weight_decay=0.01, foreach=True),
    "nadam": lambda ps: torch.optim.NAdam(ps, lr=0.01, weight_decay=0.01, foreach=True),
    "nadam_decoupled": lambda ps: torch.optim.NAdam(ps, lr=0.01, weight_decay=0.01, decoupled_weight_decay=True,
                                                    foreach=True),
    "radam": lambda ps: torch.optim.RAdam(ps, lr=0.01, weight_decay=0.01, foreach=True),
    "adadelta": lambda ps: torch.optim.Adadelta(ps, lr=1.0, weight_decay=0.01, foreach=True),
}


def run_optim(dev: str, make_opt, steps: int = 3, clip: float | None = None, monkeypatch=None):
    """Parameters after `steps` steps; per step the device tasks and the _foreach_ calls made."""
    model = copy.deepcopy(make_model()).to(dev)
    opt = make_opt(model.parameters())
    calls = [0]
    if monkeypatch is not None:  # count torch._foreach_* calls on device lists
        for name in [n for n in dir(torch) if n.startswith("_foreach_")]:
            fn = getattr(torch, name)

            def counted(*args, _fn=fn, **kwargs):
                first = args[0] if isinstance(args[0], (list, tuple)) else args[1]
                calls[0] += bool(first) and first[0].device.type == DEV
                return _fn(*args, **kwargs)
            monkeypatch.setattr(torch, name, counted)
    gen = torch.Generator().manual_seed(1)
    per_step, calls_per_step = [], []
    for _ in range(steps):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=gen).to(dev)
        before, calls[0] = ops_run(), 0
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip, foreach=True)
        opt.step()
        per_step.append(ops_run() - before)
        calls_per_step.append(calls[0])
    if monkeypatch is not None:
        monkeypatch.undo()
    return [p.detach().cpu() for p in model.parameters()], per_step, calls_per_step


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_foreach_matches_cpu(name, monkeypatch):
    got, per_step, calls = run_optim(DEV, OPTIMIZERS[name], monkeypatch=monkeypatch)
    exp, _, _ = run_optim("cpu", OPTIMIZERS[name])
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # after the first step (which also creates the state) a step's tasks are its _foreach_ calls,
    # one each: PyTorch's per-tensor decomposition ran one per parameter per call (12 here)
    assert calls[1] > 0 and per_step[1:] == calls[1:], (per_step, calls)


def test_sgd_momentum_task_count():
    """SGD with momentum and weight decay: after the first step (which copies grads into the
    momentum buffers) a step is add(grads, params, alpha=wd), mul_(bufs), add_(bufs, grads),
    add_(params, bufs): 4 tasks for 12 parameters (the decomposition ran 48)."""
    _, per_step, _ = run_optim(DEV, OPTIMIZERS["sgd_momentum"], steps=3)
    assert per_step[1:] == [4, 4], per_step


def test_clip_grad_norm_foreach():
    make = lambda ps: torch.optim.SGD(ps, lr=0.1, foreach=True)
    got, per_step, _ = run_optim(DEV, make, clip=0.5)
    exp, _, _ = run_optim("cpu", make, clip=0.5)
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["adamw", "sgd_nesterov", "adagrad"])
def test_optimizer_foreach_in_fused_eager(name):
    """Under fused eager the recorded _foreach_ ops are re-lowered into the trace's graph (the
    per-element lowerings then bind through the trace): same parameters as the CPU."""
    with torch_tpu.fused_eager():
        got, _, _ = run_optim(DEV, OPTIMIZERS[name])
    exp, _, _ = run_optim("cpu", OPTIMIZERS[name])
    assert torch_tpu.metrics()["traced_ops"] > 0
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_integer_lists_and_integer_scalar_lists():
    """All-integral Scalar[] (passed as int values, part of the cache key) on int and float lists."""
    gen = torch.Generator().manual_seed(22)
    a = [torch.randint(-9, 9, s, generator=gen) for s in [(5,), (2, 3), ()]]
    da = [t.to(DEV) for t in a]
    for scalars in ([2, -3, 4], [5, 1, 0]):
        check(torch._foreach_mul(da, scalars), torch._foreach_mul(a, scalars))
        check(torch._foreach_add(da, scalars), torch._foreach_add(a, scalars))
    check(torch._foreach_sub(da, 7), torch._foreach_sub(a, 7))
    check(torch._foreach_abs(da), torch._foreach_abs(a))
    f, df = make_list(23, n=3)
    check(torch._foreach_mul(df, [2, -3, 4]), torch._foreach_mul(f, [2, -3, 4]))
    check(torch._foreach_div(df, [2, -3, 4]), torch._foreach_div(f, [2, -3, 4]))


def test_list_of_cpu_scalar_tensors():
    """A compiled optimizer passes per-tensor scalars as a list of CPU 0-dim tensors (PyTorch's
    per-tensor ops accept CPU scalars next to device tensors): they act as a Scalar[]."""
    a, da = make_list(24)
    s = [torch.tensor(0.25 * (i + 1)) for i in range(len(a))]
    check(torch._foreach_div(da, s), torch._foreach_div(a, s))
    torch._foreach_mul_(a, s)
    before = ops_run()
    torch._foreach_mul_(da, s)
    assert ops_run() - before == 1
    check(da, a)
    ints = [torch.arange(4), torch.arange(3)]
    dints = [t.to(DEV) for t in ints]
    k = [torch.tensor(2), torch.tensor(-3)]
    check(torch._foreach_mul(dints, k), torch._foreach_mul(ints, k))
    with pytest.raises(RuntimeError, match="same device"):
        torch._foreach_mul_(da[:2], [torch.tensor(1.0), torch.ones((), device=DEV)])


def test_in_place_lists_that_are_also_inputs():
    """self passed again as the other operand(s): each element reads and writes the same memory."""
    a, da = make_list(25)
    torch._foreach_add_(a, a, alpha=0.5)
    torch._foreach_add_(da, da, alpha=0.5)
    check(da, a)
    torch._foreach_addcmul_(a, a, a, 0.25)
    torch._foreach_addcmul_(da, da, da, 0.25)
    check(da, a)
