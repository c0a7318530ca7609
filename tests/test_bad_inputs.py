"""Issue 3's bad-input list, each case against PyTorch CPU:

- unsupported argument combinations raise NotImplementedError naming the op and the argument;
- NaN / inf propagate through reductions, sorting, selection, softmax and clamps as on CPU;
- out-of-range indices (embedding, gather, index_select, scatter, index_put, ...) raise at the next
  sync (immediately with TORCH_TPU_LAUNCH_BLOCKING=1) and the device keeps working; the index
  kernels never touch memory out of bounds (csrc/tpurt/tests/test_index.c runs them under ASan);
- SVD / eigh of a non-finite matrix raise torch.linalg.LinAlgError (a RuntimeError), as CPU does,
  at the next sync.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401

DEV = "tpu"
NAN, INF = float("nan"), float("inf")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _to(v):
    return v.to(DEV) if isinstance(v, torch.Tensor) else v


def _same(fn, *args):
    """fn on tpu vs CPU; every tensor output compared with NaNs equal (exactly for integer outputs)."""
    got = fn(*[_to(a) for a in args])
    exp = fn(*args)
    got = got if isinstance(got, (tuple, list)) else (got,)
    exp = exp if isinstance(exp, (tuple, list)) else (exp,)
    assert len(got) == len(exp)
    for g, e in zip(got, exp):
        assert g.device.type == DEV
        torch.testing.assert_close(g.cpu(), e, equal_nan=True)


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("TORCH_TPU_CPU_FALLBACK", None)
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e,
                          timeout=300)


# ---------------------------------------------------------------- unsupported combinations


def test_unsupported_argument_names_op_and_argument():
    x = torch.tensor([[1, 1], [1, 1], [2, 3]], device=DEV)
    with pytest.raises(NotImplementedError, match=r"aten::unique_consecutive: the dim argument is not supported"):
        torch.unique_consecutive(x, dim=0)
    q = torch.randn(1, 1, 4, 8, device=DEV)
    with pytest.raises(NotImplementedError, match=r"_scaled_dot_product_fused_attention_overrideable: "
                                                  r"return_debug_mask=True"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, q, q, return_debug_mask=True)
    # the same ops with supported arguments still run, and match CPU
    _same(lambda t: torch.unique_consecutive(t, return_counts=True), torch.tensor([1, 1, 2, 2, 2, 3, 1]))


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_unsupported_interpolate_antialias_names_op(mode):
    x = torch.randn(1, 2, 8, 9, device=DEV)
    with pytest.raises(NotImplementedError, match=rf"_upsample_{mode}2d_aa.*tpu"):
        F.interpolate(x, size=(3, 4), mode=mode, antialias=True)


@pytest.mark.parametrize("mode", ["circular", "reflect", "replicate", "constant"])
@pytest.mark.parametrize("ndim", [3, 4, 5])
def test_pad_modes_run(mode, ndim):
    """Every F.pad mode on 3-, 4- and 5-D inputs (none of them is an unsupported combination)."""
    shape = (2, 3, 5, 4, 6)[:ndim]
    pad = (1, 2, 2, 1, 1, 0)[: 2 * (ndim - 2)]
    _same(lambda t: F.pad(t, pad, mode=mode), torch.randn(shape, generator=_gen(ndim)))


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "area", "bilinear", "bicubic", "trilinear", "linear"])
def test_interpolate_modes_run(mode):
    ndim = {"trilinear": 5, "linear": 3}.get(mode, 4)
    x = torch.randn((2, 3, 5, 6, 7)[:ndim], generator=_gen(3))
    size = (7, 4, 9)[: ndim - 2]
    _same(lambda t: F.interpolate(t, size=size, mode=mode), x)


@pytest.mark.parametrize("padding_mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("ndim", [1, 3])
def test_conv_padding_modes_run(padding_mode, ndim):
    conv = [None, torch.nn.Conv1d, None, torch.nn.Conv3d][ndim]
    torch.manual_seed(0)
    m = conv(2, 3, 3, padding=1, padding_mode=padding_mode)
    x = torch.randn((2, 2, 5, 6, 4)[: ndim + 2], generator=_gen(5))
    md = conv(2, 3, 3, padding=1, padding_mode=padding_mode).to(DEV)
    md.load_state_dict(m.state_dict())
    torch.testing.assert_close(md(x.to(DEV)).cpu(), m(x))


# ---------------------------------------------------------------- NaN / inf propagation


def _nan_matrix(dtype=torch.float32) -> torch.Tensor:
    x = torch.randn(4, 7, generator=_gen(11)).to(dtype)
    x[0, 3] = NAN
    x[1, 0] = INF
    x[1, 5] = -INF
    x[2, :] = NAN
    x[3, 2] = NAN
    x[3, 6] = INF
    return x


NAN_FNS = {
    "max": lambda t: t.max(),
    "min": lambda t: t.min(),
    "max_dim": lambda t: t.max(1),
    "min_dim": lambda t: t.min(0),
    "amax": lambda t: t.amax(1),
    "amin": lambda t: t.amin(0),
    "argmax": lambda t: t.argmax(1),
    "argmin": lambda t: t.argmin(0),
    "maximum": lambda t: torch.maximum(t, t.flip(1)),
    "minimum": lambda t: torch.minimum(t, t.flip(0)),
    "fmax": lambda t: torch.fmax(t, t.flip(1)),
    "fmin": lambda t: torch.fmin(t, t.flip(0)),
    "sort": lambda t: t.sort(1),
    "sort_desc": lambda t: t.sort(1, descending=True),
    "sort_stable": lambda t: t.sort(stable=True, dim=0),
    "argsort": lambda t: t.argsort(1),
    "median": lambda t: t.median(1),
    "cummax": lambda t: t.cummax(1),
    "cummin": lambda t: t.cummin(1),
    "softmax": lambda t: t.softmax(1),
    "log_softmax": lambda t: t.log_softmax(1),
    "logsumexp": lambda t: t.logsumexp(1),
    "relu": F.relu,
    "relu6": F.relu6,
    "hardtanh": F.hardtanh,
    "leaky_relu": F.leaky_relu,
    "clamp": lambda t: t.clamp(-0.5, 0.5),
    "clamp_min": lambda t: t.clamp(min=0.0),
    "clamp_tensor": lambda t: t.clamp(t.flip(1), t.flip(1) + 1),
    "clamp_nan_bound": lambda t: t.clamp(min=NAN),
    "sum": lambda t: t.sum(1),
    "mean": lambda t: t.mean(0),
    "nansum": lambda t: t.nansum(1),
    "nanmean": lambda t: t.nanmean(1),
    "prod": lambda t: t.prod(1),
    "var": lambda t: t.var(1),
    "norm": lambda t: t.norm(dim=1),
    "cumsum": lambda t: t.cumsum(1),
    "where_isnan": lambda t: torch.where(t.isnan(), 0.0, t),
    "nan_to_num": lambda t: t.nan_to_num(),
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "eq": lambda t: t == t,
    "lt": lambda t: t < t.flip(1),
    "max_pool1d": lambda t: F.max_pool1d(t[None], 3, 2),
    "adaptive_max_pool1d": lambda t: F.adaptive_max_pool1d(t[None], 3),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(NAN_FNS))
def test_nan_inf_propagate_as_cpu(name, dtype):
    x = _nan_matrix(dtype)
    _same(NAN_FNS[name], x)
    _same(NAN_FNS[name], x.t().contiguous().t())  # the same values through a transposed view


SELECT_FNS = {  # values as CPU's; among equal values (the all-NaN row) any index of one is right
    "topk": lambda t: t.topk(3, 1),
    "topk_smallest": lambda t: t.topk(2, 1, largest=False),
    "kthvalue": lambda t: t.kthvalue(2, 1),
    "nanmedian": lambda t: t.nanmedian(1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(SELECT_FNS))
def test_nan_inf_selection_as_cpu(name, dtype):
    x = _nan_matrix(dtype)
    gv, gi = SELECT_FNS[name](x.to(DEV))
    ev, ei = SELECT_FNS[name](x)
    torch.testing.assert_close(gv.cpu(), ev, equal_nan=True)
    gi = gi.cpu()
    picked = x.gather(1, gi if gi.dim() == 2 else gi[:, None]).view(ev.shape)
    torch.testing.assert_close(picked, ev, equal_nan=True)  # the index points at a value equal to CPU's
    same = ~ev.isnan()  # where CPU's value is a number the index is CPU's unless that value repeats
    for r in range(x.shape[0]):
        vals = x[r]
        for k in range(ev.shape[-1] if ev.dim() == 2 else 1):
            e = ev[r, k] if ev.dim() == 2 else ev[r]
            g_i = gi[r, k] if gi.dim() == 2 else gi[r]
            e_i = ei[r, k] if ei.dim() == 2 else ei[r]
            if (same[r, k] if same.dim() == 2 else same[r]) and int((vals == e).sum()) == 1:
                assert int(g_i) == int(e_i), (name, r, k)


def test_softmax_all_minus_inf_row():
    x = torch.randn(3, 5, generator=_gen(2))
    x[1] = -INF
    _same(lambda t: t.softmax(1), x)
    _same(lambda t: t.log_softmax(1), x)
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[2] = True
    _same(lambda t, m: t.masked_fill(m, -INF).softmax(-1), x, mask)


# ---------------------------------------------------------------- out-of-range indices

IDX_ERR = r"out of bounds|out of range|not in the valid range|index \d+ is out"


def _bad_index_cases():
    w = torch.randn(5, 3, generator=_gen(1))
    x = torch.randn(4, 6, generator=_gen(2))
    big = torch.tensor([[1, 7], [0, 2], [3, 3], [1, 0]])
    return {
        "embedding": lambda d: F.embedding(torch.tensor([[0, 5]], device=d), w.to(d)),
        "embedding_neg": lambda d: F.embedding(torch.tensor([-6], device=d), w.to(d)),
        "embedding_bag": lambda d: F.embedding_bag(torch.tensor([1, 9], device=d), w.to(d),
                                                   torch.tensor([0], device=d)),
        "gather": lambda d: torch.gather(x.to(d), 1, big.to(d)),
        "gather_neg": lambda d: torch.gather(x.to(d), 0, torch.full((2, 6), -1, device=d)),
        "index_select": lambda d: torch.index_select(x.to(d), 1, torch.tensor([2, 6], device=d)),
        "index_select_neg": lambda d: torch.index_select(x.to(d), 0, torch.tensor([-1], device=d)),
        "scatter": lambda d: x.to(d).scatter(1, big.to(d), 1.0),
        "scatter_src": lambda d: x.to(d).scatter(1, big.to(d), torch.ones(4, 2, device=d)),
        "scatter_add": lambda d: x.to(d).scatter_add(1, big.to(d), torch.ones(4, 2, device=d)),
        "scatter_reduce": lambda d: x.to(d).scatter_reduce(1, big.to(d), torch.ones(4, 2, device=d), "amax"),
        "index_put": lambda d: x.to(d).index_put((torch.tensor([0, 4], device=d),), torch.tensor(1.0, device=d)),
        "index_put_acc": lambda d: x.to(d).index_put((torch.tensor([1], device=d), torch.tensor([-7], device=d)),
                                                     torch.tensor(1.0, device=d), accumulate=True),
        "index_tensor": lambda d: x.to(d)[torch.tensor([1, 4], device=d)],
        "index_add": lambda d: x.to(d).index_add(0, torch.tensor([4], device=d), torch.ones(1, 6, device=d)),
        "index_copy": lambda d: x.to(d).index_copy(1, torch.tensor([6], device=d), torch.ones(4, 1, device=d)),
        "index_fill": lambda d: x.to(d).index_fill(1, torch.tensor([9], device=d), 2.0),
        "take": lambda d: torch.take(x.to(d), torch.tensor([24], device=d)),
        "nll_loss": lambda d: F.nll_loss(x.to(d).log_softmax(1), torch.tensor([0, 1, 6, 2], device=d)),
        "cross_entropy": lambda d: F.cross_entropy(x.to(d), torch.tensor([0, -3, 1, 2], device=d)),
    }


@pytest.mark.parametrize("name", list(_bad_index_cases()))
def test_out_of_range_index_raises_at_sync(name):
    case = _bad_index_cases()[name]
    with pytest.raises((IndexError, RuntimeError)):  # CPU raises at once (its message wording varies)
        case("cpu")
    with pytest.raises((IndexError, RuntimeError), match=IDX_ERR):
        r = case(DEV)  # the error may come at once (checked on the host) or at the next sync
        torch.tpu.synchronize()
        (r[0] if isinstance(r, tuple) else r).cpu()
    # the sticky error is cleared and the device keeps working
    y = torch.arange(12.0, device=DEV).view(3, 4)
    assert y.sum().item() == 66.0
    torch.testing.assert_close(torch.gather(y, 1, torch.tensor([[3], [0], [1]], device=DEV)).cpu(),
                               torch.tensor([[3.0], [4.0], [9.0]]))


NEG_CASES = {  # ops whose CPU kernel rejects negative indices (no wrap); -1 must be named as given
    "gather": lambda x, i: torch.gather(x, 1, i.view(1, 1).expand(4, 1)),
    "index_select_1d": lambda x, i: x[0].index_select(0, i),
    "index_select_2d": lambda x, i: x.index_select(1, i),
    "embedding": lambda x, i: F.embedding(i, x),
    "scatter": lambda x, i: x.scatter(1, i.view(1, 1), 1.0),
    "scatter_add": lambda x, i: x.scatter_add(1, i.view(1, 1), torch.ones(1, 1, device=x.device)),
    "index_add": lambda x, i: x.index_add(0, i, torch.ones(1, 6, device=x.device)),
    "index_copy": lambda x, i: x.index_copy(0, i, torch.ones(1, 6, device=x.device)),
}


@pytest.mark.parametrize("name", list(NEG_CASES))
def test_negative_index_rejected_as_cpu_and_named(name):
    x = torch.randn(4, 6, generator=_gen(3))
    i = torch.tensor([-1])
    with pytest.raises((IndexError, RuntimeError)):
        NEG_CASES[name](x, i)
    with pytest.raises((IndexError, RuntimeError), match=r"index -1 is out of bounds for dimension \d with size \d"):
        NEG_CASES[name](x.to(DEV), i.to(DEV)).cpu()
    # where CPU wraps, tpu wraps too
    _same(lambda t, j: t.index_fill(0, j, 2.0), x, i)
    _same(lambda t, j: torch.take(t, j), x, i)
    _same(lambda t, j: t[j], x, i)


def test_out_of_range_index_launch_blocking_raises_at_the_op():
    r = _run("""
        import torch, torch.nn.functional as F
        w = torch.randn(5, 3, device="tpu")
        x = torch.randn(4, 6, device="tpu")
        bad = {
            "embedding": lambda: F.embedding(torch.tensor([5], device="tpu"), w),
            "gather": lambda: torch.gather(x, 1, torch.tensor([[6]], device="tpu")),
            "scatter": lambda: x.scatter(1, torch.tensor([[7]], device="tpu"), 1.0),
            "index_put": lambda: x.index_put_((torch.tensor([4], device="tpu"),), torch.tensor(1.0, device="tpu")),
            "index_add": lambda: x.index_add_(0, torch.tensor([-5], device="tpu"), torch.ones(1, 6, device="tpu")),
        }
        for name, fn in bad.items():
            try:
                fn()  # no sync: with launch blocking the op itself raises
            except (IndexError, RuntimeError) as e:
                assert "out of" in str(e) or "valid range" in str(e), (name, e)
                print("raised", name)
        print("sum", x.abs().sum().item() > 0)
    """, TORCH_TPU_LAUNCH_BLOCKING="1")
    assert r.returncode == 0, r.stderr
    for name in ["embedding", "gather", "scatter", "index_put", "index_add"]:
        assert f"raised {name}" in r.stdout, r.stdout
    assert "sum True" in r.stdout


# ---------------------------------------------------------------- LinAlgError at sync


def _nonfinite_batch() -> torch.Tensor:
    a = torch.randn(3, 4, 4, generator=_gen(8), dtype=torch.float64)
    a = a + a.mT
    a[1, 2, 1] = NAN
    a[1, 1, 2] = NAN
    return a


@pytest.mark.parametrize("fn", [lambda t: torch.linalg.svd(t)[1], lambda t: torch.linalg.svdvals(t),
                                lambda t: torch.linalg.eigh(t)[0], lambda t: torch.linalg.eigvalsh(t)],
                         ids=["svd", "svdvals", "eigh", "eigvalsh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_linalg_nonfinite_raises_linalgerror(fn, dtype):
    a = _nonfinite_batch().to(dtype)
    with pytest.raises(torch.linalg.LinAlgError) as cpu:
        fn(a)
    with pytest.raises(torch.linalg.LinAlgError) as tpu:
        fn(a.to(DEV)).cpu()
    assert isinstance(tpu.value, RuntimeError)
    # the same words as CPU's (batch element included) up to LAPACK's error code, which the tpu kernel
    # does not have; the tpu message may carry the op as a prefix
    assert str(cpu.value).splitlines()[0].split(" (error code")[0] in str(tpu.value), (str(cpu.value), str(tpu.value))
    torch.testing.assert_close(fn(a[0].to(DEV)).cpu(), fn(a[0]))  # the device keeps working


def test_linalg_nonfinite_launch_blocking_raises_at_the_op():
    r = _run("""
        import torch
        a = torch.eye(3, device="tpu")
        a[1, 0] = float("nan")  # eigh reads the lower triangle
        try:
            torch.linalg.eigh(a)  # no sync
        except torch.linalg.LinAlgError as e:
            assert "failed to converge" in str(e), e
            print("raised")
    """, TORCH_TPU_LAUNCH_BLOCKING="1")
    assert r.returncode == 0 and "raised" in r.stdout, (r.stdout, r.stderr)


# Bad arguments whose meta function fails: the glue caches the failure by argument signature, so the
# second identical call takes another path (the cached failure). It must raise the same error as the first,
# like the CPU does, and never run (arange with step 0 once returned a tensor on the second call).
_REPEATED_BAD = {
    "arange_step_0": (lambda d: torch.arange(0, 5, 0, device=d), RuntimeError),
    "arange_out_step_0": (lambda d: torch.arange(0, 5, 0, out=torch.empty(0, device=d)), RuntimeError),
    "index_select_dim": (lambda d: torch.index_select(torch.ones(2, 3, device=d), 5,
                                                      torch.zeros(1, dtype=torch.long, device=d)), IndexError),
    "mm_shapes": (lambda d: torch.mm(torch.ones(2, 3, device=d), torch.ones(4, 5, device=d)), RuntimeError),
}


@pytest.mark.parametrize("name", sorted(_REPEATED_BAD))
def test_repeated_bad_call_raises_the_same_error(name):
    fn, exc = _REPEATED_BAD[name]
    with pytest.raises(exc):
        fn("cpu")
    errors = []
    for _ in range(3):
        with pytest.raises(exc) as info:
            fn("tpu")
            torch.tpu.synchronize()
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1] == errors[2]
