"""misc ops (lower/misc.c) on the tpu device vs PyTorch CPU: sort / argsort / msort, topk,
kthvalue, median (dim and full, NaN), embedding_bag (sum/mean/max, offsets,
include_last_offset, per_sample_weights, padding_idx; forward and backward), multinomial
(statistics), reflection / replication padding 1d/2d/3d (+backward), searchsorted."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

DEV = "tpu"


def close(actual, expected, **kw):
    assert actual.device.type == DEV, actual.device
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **kw)


def distinct(*shape, dtype=torch.float32):
    """values without ties (so index results are unique), shuffled"""
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(max(n, 1))[:n].to(torch.float64) / 7 - n / 14).reshape(shape).to(dtype)


# ---------------------------------------------------------------- sort family

@pytest.mark.parametrize("shape,dim", [((5,), 0), ((4, 7), 1), ((4, 7), 0), ((3, 4, 5), -2), ((), 0), ((0, 3), 1)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort(shape, dim, descending):
    x = distinct(*shape)
    v, i = torch.sort(x.to(DEV), dim=dim, descending=descending)
    ev, ei = torch.sort(x, dim=dim, descending=descending)
    close(v, ev)
    close(i, ei)
    close(torch.argsort(x.to(DEV), dim=dim, descending=descending), torch.argsort(x, dim=dim, descending=descending))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.uint8])
def test_sort_dtypes_stable(dtype):
    torch.manual_seed(0)
    x = torch.randint(0, 5, (3, 17)).to(dtype)  # many ties: stable order matters
    for desc in (False, True):
        v, i = torch.sort(x.to(DEV), dim=1, descending=desc, stable=True)
        ev, ei = torch.sort(x, dim=1, descending=desc, stable=True)
        close(v, ev)
        close(i, ei)
    close(torch.msort(x.to(DEV)), torch.msort(x))


def test_sort_nan_out_and_views():
    x = torch.tensor([[3.0, float("nan"), -1.0, float("inf"), 0.0], [1.0, 2.0, float("nan"), float("-inf"), 5.0]])
    for desc in (False, True):
        v, i = torch.sort(x.to(DEV), 1, descending=desc)
        ev, ei = torch.sort(x, 1, descending=desc)
        close(v, ev)
        close(i, ei)
    # out= and a transposed input
    y = distinct(6, 4).t()
    vo, io = torch.empty(0, device=DEV), torch.empty(0, dtype=torch.long, device=DEV)
    torch.sort(y.to(DEV), dim=1, out=(vo, io))
    ev, ei = torch.sort(y, dim=1)
    close(vo, ev)
    close(io, ei)


def test_sort_backward():
    x = distinct(4, 6)
    xt = x.to(DEV).requires_grad_()
    xc = x.clone().requires_grad_()
    w = torch.linspace(-1, 1, 24).reshape(4, 6)
    (torch.sort(xt, 1, descending=True).values * w.to(DEV)).sum().backward()
    (torch.sort(xc, 1, descending=True).values * w).sum().backward()
    close(xt.grad, xc.grad)


@pytest.mark.parametrize("k,dim,largest", [(3, -1, True), (1, 0, False), (7, 1, False), (0, 1, True)])
def test_topk(k, dim, largest):
    x = distinct(5, 7)
    v, i = torch.topk(x.to(DEV), k, dim=dim, largest=largest)
    ev, ei = torch.topk(x, k, dim=dim, largest=largest)
    close(v, ev)
    close(i, ei)


def test_topk_backward_out_dtypes():
    x = distinct(3, 9)
    xt = x.to(DEV).requires_grad_()
    xc = x.clone().requires_grad_()
    torch.topk(xt, 4).values.square().sum().backward()
    torch.topk(xc, 4).values.square().sum().backward()
    close(xt.grad, xc.grad)
    for dt in (torch.bfloat16, torch.int64):
        y = torch.randperm(20).reshape(2, 10).to(dt)  # exact in bf16: no ties
        v, i = torch.topk(y.to(DEV), 3)
        ev, ei = torch.topk(y, 3)
        close(v, ev)
        close(i, ei)
    vo, io = torch.empty(0, device=DEV), torch.empty(0, dtype=torch.long, device=DEV)
    torch.topk(x.to(DEV), 2, out=(vo, io))
    close(vo, torch.topk(x, 2).values)
    with pytest.raises(RuntimeError):
        torch.topk(x.to(DEV), 10)


@pytest.mark.parametrize("keepdim", [False, True])
def test_kthvalue_median(keepdim):
    x = distinct(4, 7)
    for k, dim in ((1, 1), (4, 1), (2, 0), (7, -1)):
        v, i = torch.kthvalue(x.to(DEV), k, dim, keepdim=keepdim)
        ev, ei = torch.kthvalue(x, k, dim, keepdim=keepdim)
        close(v, ev)
        close(i, ei)
    for dim in (0, 1, -1):
        v, i = torch.median(x.to(DEV), dim, keepdim=keepdim)
        ev, ei = torch.median(x, dim, keepdim=keepdim)
        close(v, ev)
        close(i, ei)
    close(torch.median(x.to(DEV)), torch.median(x))
    with pytest.raises(RuntimeError):
        torch.kthvalue(x.to(DEV), 8, 1)


def test_median_nan_and_backward():
    x = distinct(3, 6)
    x[1, 2] = float("nan")
    x[1, 4] = float("nan")
    v, i = torch.median(x.to(DEV), 1)
    ev, ei = torch.median(x, 1)
    close(v, ev)
    close(i, ei)
    close(torch.median(x.to(DEV)), torch.median(x))
    close(torch.median(torch.tensor(3.5).to(DEV)), torch.tensor(3.5))
    y = distinct(5, 4)
    yt = y.to(DEV).requires_grad_()
    yc = y.clone().requires_grad_()
    (torch.median(yt, 0).values.sum() + torch.kthvalue(yt, 2, 1).values.sum() + torch.median(yt)).backward()
    (torch.median(yc, 0).values.sum() + torch.kthvalue(yc, 2, 1).values.sum() + torch.median(yc)).backward()
    close(yt.grad, yc.grad)


# ---------------------------------------------------------------- embedding_bag

IDX = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 7])
OFF = torch.tensor([0, 4, 4, 6])


def bag_run(dev, w, idx, off, psw=None, **kw):
    wd = w.detach().to(dev).requires_grad_()
    pd = psw.detach().to(dev).requires_grad_() if psw is not None else None
    out = F.embedding_bag(idx.to(dev), wd, off.to(dev) if off is not None else None, per_sample_weights=pd, **kw)
    out.backward(torch.linspace(-1, 2, out.numel()).reshape(out.shape).to(dev, out.dtype))
    return out, wd.grad, (pd.grad if pd is not None else None)


def bag_compare(w, idx, off, psw=None, tol=None, **kw):
    t = bag_run(DEV, w, idx, off, psw, **kw)
    c = bag_run("cpu", w, idx, off, psw, **kw)
    tol = tol or {}
    for a, b in zip(t, c):
        if b is None:
            assert a is None
        else:
            close(a, b, **tol)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 4])
def test_embedding_bag(mode, padding_idx):
    w = torch.randn(10, 3)
    bag_compare(w, IDX, OFF, mode=mode, padding_idx=padding_idx)
    # include_last_offset with a consistent last offset
    bag_compare(w, IDX, torch.tensor([0, 3, 3, 7, 10]), mode=mode, padding_idx=padding_idx, include_last_offset=True)
    # 2-D indices (fixed-size bags), i32 indices
    bag_compare(w, torch.randint(0, 10, (4, 3), generator=torch.Generator().manual_seed(0)), None, mode=mode)
    bag_compare(w, IDX.int(), OFF.int(), mode=mode, padding_idx=padding_idx)


def test_embedding_bag_per_sample_weights():
    w = torch.randn(10, 5)
    psw = torch.randn(IDX.numel())
    bag_compare(w, IDX, OFF, psw, mode="sum")
    bag_compare(w, IDX, OFF, psw, mode="sum", padding_idx=2)
    bag_compare(w, IDX, torch.tensor([0, 2, 10]), psw, mode="sum", include_last_offset=True)


def test_embedding_bag_module_dtypes_empty():
    torch.manual_seed(0)
    m = torch.nn.EmbeddingBag(12, 4, mode="mean")
    x = torch.randint(0, 12, (3, 5))
    close(m.to(DEV)(x.to(DEV)), m.cpu()(x))
    w = torch.randn(10, 3, dtype=torch.float64)
    bag_compare(w, IDX, OFF, mode="sum")
    wb = torch.randn(10, 3).to(torch.bfloat16)
    out = F.embedding_bag(IDX.to(DEV), wb.to(DEV), OFF.to(DEV), mode="mean")
    close(out, F.embedding_bag(IDX, wb, OFF, mode="mean"), atol=1e-2, rtol=1e-2)
    # all bags empty
    close(F.embedding_bag(torch.tensor([], dtype=torch.long).to(DEV), w.to(DEV), torch.tensor([0, 0]).to(DEV)),
          torch.zeros(2, 3, dtype=torch.float64))


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_bag_dlrm_sizes(mode, dtype):
    """DLRM-like tables (odd sizes, variable bags with empty ones, repeated ids) through the host's
    row-run index kernels: forward, weight grad and per-sample-weight grad vs CPU."""
    g = torch.Generator().manual_seed(5)
    nw, d, b = 1237, 13, 97
    lengths = torch.randint(0, 5, (b,), generator=g)
    offsets = torch.cumsum(lengths, 0) - lengths
    ids = torch.randint(0, nw, (int(lengths.sum()),), generator=g)
    ids[::7] = ids[0]  # duplicates accumulate
    w = torch.randn(nw, d, generator=g).to(dtype)
    psw = (torch.rand(ids.shape, generator=g) + 0.5).to(dtype) if mode == "sum" else None
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    bag_compare(w, ids, offsets, psw, tol=tol, mode=mode)
    # a transposed (non-contiguous) table
    wt = torch.randn(d, nw, generator=g).to(dtype).t()
    out = F.embedding_bag(ids.to(DEV), wt.to(DEV), offsets.to(DEV), mode=mode)
    close(out, F.embedding_bag(ids, wt, offsets, mode=mode), **tol)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("case", ["plain", "padding", "psw", "last_offset"])
def test_embedding_bag_bag_rows(mode, case):
    """Which bag row each id goes to: odd sizes, empty bags (also the last), repeated ids, padding_idx,
    per-sample weights, include_last_offset; output, weight grad and per-sample-weight grad vs CPU, and
    for mean/max (where PyTorch's CPU kernel fills them) offset2bag and bag_size of aten::_embedding_bag
    (with include_last_offset PyTorch's meta function and CPU kernel disagree on bag_size's length)."""
    g = torch.Generator().manual_seed(11 + len(mode))
    nw, d, b = 53, 7, 19
    lengths = torch.randint(0, 4, (b,), generator=g)
    lengths[-1] = 0
    offsets = torch.cumsum(lengths, 0) - lengths
    n = int(lengths.sum())
    ids = torch.randint(0, nw, (n,), generator=g)
    ids[::5] = ids[1]
    kw = dict(mode=mode)
    psw = None
    if case == "padding":
        kw["padding_idx"] = int(ids[1])
    if case == "psw":
        psw = torch.rand(n, generator=g) + 0.5
        if mode != "sum":  # per_sample_weights is for mode='sum' only: the same error as on the CPU
            for dev in ("cpu", DEV):
                with pytest.raises(NotImplementedError, match="only supported for mode='sum'"):
                    F.embedding_bag(ids.to(dev), torch.randn(nw, d).to(dev), offsets.to(dev), mode=mode,
                                    per_sample_weights=psw.to(dev))
            return
    if case == "last_offset":
        offsets, kw["include_last_offset"] = torch.cat([offsets, torch.tensor([ids.numel()])]), True
    w = torch.randn(nw, d, generator=g)
    bag_compare(w, ids, offsets, psw, **kw)
    if mode != "sum" and case != "last_offset":
        m = {"mean": 1, "max": 2}[mode]
        args = lambda dev: (w.to(dev), ids.to(dev), offsets.to(dev), False, m, False, None,
                            kw.get("include_last_offset", False), kw.get("padding_idx", -1))
        t, c = torch.ops.aten._embedding_bag(*args(DEV)), torch.ops.aten._embedding_bag(*args("cpu"))
        assert torch.equal(t[1].cpu(), c[1]) and torch.equal(t[2].cpu(), c[2]), (t[1], c[1], t[2], c[2])


def test_embedding_bag_backward_no_bags_and_bad_offset2bag():
    """No bags (PyTorch's CPU kernel crashes there): empty output, zero weight grad. An offset2bag entry
    outside [0, B) passed to the backward op is an index error, and the device stays usable."""
    w = torch.randn(5, 3, device=DEV, requires_grad=True)
    y = F.embedding_bag(torch.tensor([1, 2]).to(DEV), w, torch.tensor([], dtype=torch.long).to(DEV), mode="mean")
    y.sum().backward()
    assert y.shape == (0, 3) and torch.equal(w.grad.cpu(), torch.zeros(5, 3))
    with pytest.raises(RuntimeError, match="not in the valid range"):
        torch.ops.aten._embedding_bag_dense_backward(
            torch.ones(2, 3, device=DEV), torch.tensor([1, 2]).to(DEV), torch.tensor([0, 5]).to(DEV),
            torch.tensor([1, 1]).to(DEV), torch.tensor([0]).to(DEV), 5, False, 0, None, -1).cpu()
    w10 = torch.randn(10, 3)
    close(F.embedding_bag(IDX.to(DEV), w10.to(DEV), OFF.to(DEV)), F.embedding_bag(IDX, w10, OFF))


@pytest.mark.parametrize("bad", [-1, 10, 1 << 40])
def test_embedding_bag_out_of_range_id(bad):
    """An id outside [0, num_weights) is PyTorch's RuntimeError (negative ids do not wrap)."""
    w = torch.randn(10, 3)
    ids = torch.tensor([1, bad, 3])
    with pytest.raises(RuntimeError, match="not in the valid range"):
        F.embedding_bag(ids.to(DEV), w.to(DEV), torch.tensor([0, 2]).to(DEV)).cpu()
    with pytest.raises(RuntimeError):
        F.embedding_bag(ids, w, torch.tensor([0, 2]))
    # the device stays usable
    close(F.embedding_bag(IDX.to(DEV), w.to(DEV), OFF.to(DEV)), F.embedding_bag(IDX, w, OFF))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("extra", ["psw", "padding", "plain"])
@pytest.mark.parametrize("tail", [0, 1, 5])
def test_embedding_bag_last_offset_tail(mode, extra, tail):
    """include_last_offset with random bags (empty ones, an empty last one: mean 0) and `tail` ids after
    offsets[B] (0: the documented case offsets[B] == len(input)); output, weight grad and per-sample-weight
    grad vs CPU, float64. With a tail, PyTorch's CPU reference kernel (float64, padding_idx, mode='max',
    and the backward of every dtype) puts those ids into the last bag, and tpu does the same; only its
    float32/16 fast forward path (sum/mean without padding_idx) drops them, while that path's sum backward
    reads offset2bag it never filled, so float32 with a tail has no consistent CPU answer to compare to."""
    if extra == "psw" and mode != "sum":
        pytest.skip("per_sample_weights is for mode='sum' only (tested in test_embedding_bag_bag_rows)")
    g = torch.Generator().manual_seed(101 + 7 * tail + len(mode) + len(extra))
    nw, d, b = 37, 5, 13
    lengths = torch.randint(0, 4, (b,), generator=g)
    lengths[3] = 0
    lengths[-1] = 0
    n = int(lengths.sum()) + tail
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, 0)])
    ids = torch.randint(0, nw, (n,), generator=g)
    kw = dict(mode=mode, include_last_offset=True)
    if extra == "padding":
        kw["padding_idx"] = int(ids[0])
    psw = torch.rand(n, generator=g, dtype=torch.float64) + 0.5 if extra == "psw" else None
    w = torch.randn(nw, d, generator=g, dtype=torch.float64)
    bag_compare(w, ids, offsets, psw, **kw)
    if tail == 0:  # the documented case also in float32 (PyTorch's fast path)
        bag_compare(w.float(), ids, offsets, None if psw is None else psw.float(), **kw)


def test_embedding_bag_scale_grad_by_freq():
    # documented semantics (and CUDA's): each weight row's gradient is divided by the
    # frequency of its index. PyTorch's CPU kernel indexes its count table with the
    # position among unique indices instead, so compare to an explicit reference.
    w = torch.randn(10, 3)
    wt = w.to(DEV).requires_grad_()
    F.embedding_bag(IDX.to(DEV), wt, OFF.to(DEV), mode="sum", scale_grad_by_freq=True).sum().backward()
    wc = w.clone().requires_grad_()
    F.embedding_bag(IDX, wc, OFF, mode="sum").sum().backward()
    counts = torch.bincount(IDX, minlength=10).clamp(min=1).unsqueeze(1).float()
    close(wt.grad, wc.grad / counts)


def test_embedding_bag_errors():
    w = torch.randn(10, 3, device=DEV)
    with pytest.raises((RuntimeError, IndexError)):
        F.embedding_bag(torch.tensor([1, 10]).to(DEV), w, torch.tensor([0]).to(DEV)).cpu()
    with pytest.raises((RuntimeError, ValueError, NotImplementedError)):
        F.embedding_bag(IDX.to(DEV), w, OFF.to(DEV), mode="max", per_sample_weights=torch.ones(10, device=DEV))


# ---------------------------------------------------------------- multinomial

def test_multinomial_with_replacement_statistics():
    torch.manual_seed(0)
    p = torch.tensor([[0.1, 0.0, 0.2, 0.7], [1.0, 1.0, 0.0, 2.0]])
    n = 20000
    s = torch.multinomial(p.to(DEV), n, replacement=True)
    assert s.device.type == DEV and s.dtype == torch.long and s.shape == (2, n)
    s = s.cpu()
    for r in range(2):
        freq = torch.bincount(s[r], minlength=4).double() / n
        torch.testing.assert_close(freq, (p[r] / p[r].sum()).double(), atol=0.02, rtol=0)
        assert freq[(p[r] == 0).nonzero()].sum() == 0
    one = torch.multinomial(torch.tensor([0.0, 3.0, 0.0], device=DEV), 5, replacement=True)
    close(one, torch.ones(5, dtype=torch.long))


def test_multinomial_without_replacement():
    torch.manual_seed(0)
    p = torch.rand(4, 8) + 0.01
    p[:, 3] = 0
    s = torch.multinomial(p.to(DEV), 7).cpu()
    for r in range(4):
        assert len(set(s[r].tolist())) == 7 and 3 not in s[r].tolist()
    full = torch.multinomial(torch.ones(6, device=DEV), 6).cpu()
    assert sorted(full.tolist()) == list(range(6))
    # first draw follows p
    q = torch.tensor([0.6, 0.3, 0.1])
    first = torch.multinomial(q.to(DEV).expand(20000, 3).contiguous(), 2)[:, 0].cpu()
    torch.testing.assert_close(torch.bincount(first, minlength=3).double() / 20000, q.double(), atol=0.02, rtol=0)
    # generator reproducibility
    g1 = torch.Generator(device=DEV).manual_seed(5)
    g2 = torch.Generator(device=DEV).manual_seed(5)
    close(torch.multinomial(p.to(DEV), 3, generator=g1), torch.multinomial(p.to(DEV), 3, generator=g2).cpu())
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.ones(3, device=DEV), 4)


# ---------------------------------------------------------------- padding

PADS = {1: [(2, 3), (0, 1), (-1, 2)], 2: [(2, 1, 3, 2), (1, 1, 0, 0)], 3: [(1, 2, 1, 0, 2, 1)]}


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("batched", [True, False])
def test_pad_modes(mode, nd, batched):
    torch.manual_seed(0)
    spatial = (5, 4, 6)[:nd]
    shape = ((2, 3) if batched else (3,)) + spatial
    x = torch.randn(shape)
    for p in PADS[nd]:
        xt = x.to(DEV).requires_grad_()
        xc = x.clone().requires_grad_()
        yt, yc = F.pad(xt, p, mode=mode), F.pad(xc, p, mode=mode)
        close(yt, yc)
        g = torch.linspace(-1, 1, yc.numel()).reshape(yc.shape)
        yt.backward(g.to(DEV))
        yc.backward(g)
        close(xt.grad, xc.grad)


def test_pad_views_dtypes_errors():
    x = torch.randn(2, 6, 5).transpose(1, 2)  # non-contiguous
    close(F.pad(x.to(DEV), (2, 2), mode="reflect"), F.pad(x, (2, 2), mode="reflect"))
    for dt in (torch.float64, torch.bfloat16):
        y = torch.randn(1, 2, 4, 4).to(dt)
        close(F.pad(y.to(DEV), (1, 2, 2, 1), mode="replicate"), F.pad(y, (1, 2, 2, 1), mode="replicate"))
    with pytest.raises(RuntimeError):
        F.pad(torch.randn(1, 2, 3, device=DEV), (3, 0), mode="reflect")
    m = torch.nn.ReflectionPad2d(1)
    z = torch.randn(1, 1, 3, 3)
    close(m(z.to(DEV)), m(z))


# ---------------------------------------------------------------- searchsorted

@pytest.mark.parametrize("right", [False, True])
def test_searchsorted(right):
    torch.manual_seed(0)
    b = torch.sort(torch.randn(12)).values
    v = torch.cat([torch.randn(3, 4).flatten(), b[:3]]).reshape(3, 5)  # includes exact hits
    close(torch.searchsorted(b.to(DEV), v.to(DEV), right=right), torch.searchsorted(b, v, right=right))
    close(torch.searchsorted(b.to(DEV), v.to(DEV), right=right, out_int32=True),
          torch.searchsorted(b, v, right=right, out_int32=True))
    b2 = torch.sort(torch.randn(3, 8), 1).values
    v2 = torch.randn(3, 6)
    side = "right" if right else "left"
    close(torch.searchsorted(b2.to(DEV), v2.to(DEV), side=side), torch.searchsorted(b2, v2, side=side))
    close(torch.bucketize(v.to(DEV), b.to(DEV), right=right), torch.bucketize(v, b, right=right))
    ints = torch.tensor([1, 3, 3, 5, 9])
    close(torch.searchsorted(ints.to(DEV), torch.tensor([0, 3, 4, 9, 10]).to(DEV), right=right),
          torch.searchsorted(ints, torch.tensor([0, 3, 4, 9, 10]), right=right))


# ---------------------------------------------------------------- unique

UNIQUE_INPUTS = [
    torch.tensor([[3, 1, 2, 1], [5, 3, 3, 0]]),
    torch.tensor([3.0, 1.0, -0.5, 2.0, 1.0, 3.0]),
    torch.tensor([], dtype=torch.long),
    torch.tensor(5),
    torch.tensor([2.0, 0.0, 2.0, 1.0]).to(torch.bfloat16),
    torch.tensor([True, False, True]),
    torch.tensor([1, 1, 2, 2, 2, 1, 3, 3], dtype=torch.int32),
]


@pytest.mark.parametrize("x", UNIQUE_INPUTS, ids=lambda t: f"{t.dtype}{list(t.shape)}")
@pytest.mark.parametrize("inv,cnt", [(False, False), (True, False), (False, True), (True, True)])
def test_unique(x, inv, cnt):
    for fn in (torch.unique, torch.unique_consecutive):
        a = fn(x, return_inverse=inv, return_counts=cnt)
        b = fn(x.to(DEV), return_inverse=inv, return_counts=cnt)
        a = a if isinstance(a, tuple) else (a,)
        b = b if isinstance(b, tuple) else (b,)
        assert len(a) == len(b)
        for p, q in zip(a, b):
            close(q, p)


def test_nanmedian():
    x = distinct(4, 6)
    x[0, 1] = x[0, 4] = x[2, 0] = float("nan")
    for dim in (0, 1, -1):
        for keepdim in (False, True):
            v, i = torch.nanmedian(x.to(DEV), dim, keepdim=keepdim)
            ev, ei = torch.nanmedian(x, dim, keepdim=keepdim)
            close(v, ev)
            close(i, ei)
    close(torch.nanmedian(x.to(DEV)), torch.nanmedian(x))
    close(torch.nanmedian(torch.full((3,), float("nan")).to(DEV)), torch.tensor(float("nan")))
    y = torch.randperm(15).reshape(3, 5)
    close(torch.nanmedian(y.to(DEV), 1).values, torch.nanmedian(y, 1).values)
    xt = x.to(DEV).requires_grad_()
    xc = x.clone().requires_grad_()
    torch.nanmedian(xt, 1).values.sum().backward()
    torch.nanmedian(xc, 1).values.sum().backward()
    close(xt.grad, xc.grad)


# ---------------------------------------------------------------- cdist

@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, 1.5, 0.5, float("inf")])
@pytest.mark.parametrize("mode", ["use_mm_for_euclid_dist_if_necessary", "donot_use_mm_for_euclid_dist"])
def test_cdist(p, mode):
    torch.manual_seed(0)
    a, b = torch.randn(2, 5, 3), torch.randn(2, 4, 3)
    b[0, 1] = a[0, 2]  # a zero distance: zero gradient there, as on CPU
    res = []
    for dev in (DEV, "cpu"):
        x, y = a.to(dev).requires_grad_(), b.to(dev).requires_grad_()
        o = torch.cdist(x, y, p=p, compute_mode=mode)
        o.backward(torch.linspace(-1, 1, o.numel()).reshape(o.shape).to(dev))
        res.append((o.detach(), x.grad, y.grad))
    for t, c in zip(*res):
        close(t, c.cpu(), atol=1e-5, rtol=1e-4)
    close(torch.cdist(a[0].to(DEV), b[0].to(DEV), p=p), torch.cdist(a[0], b[0], p=p), atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------- logcumsumexp

LCSE_INPUTS = [
    torch.randn(3, 7, generator=torch.Generator().manual_seed(0)),
    torch.tensor([-1000.0, 0.0, 5.0, -2000.0, float("inf"), 1.0]),
    torch.tensor([float("-inf"), float("-inf"), 2.0]),
    torch.tensor([1.0, float("nan"), 2.0]),
    torch.randn(4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 100,
    torch.randn(6, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16),
    torch.tensor(2.0),
    torch.zeros(0, 3),
]


@pytest.mark.parametrize("x", LCSE_INPUTS, ids=lambda t: f"{t.dtype}{list(t.shape)}")
def test_logcumsumexp(x):
    for d in range(-max(x.dim(), 1), max(x.dim(), 1)):
        close(torch.logcumsumexp(x.to(DEV), d), torch.logcumsumexp(x, d))


def test_logcumsumexp_backward_out_views():
    x = torch.randn(3, 6, dtype=torch.float64)
    res = []
    for dev in (DEV, "cpu"):
        t = x.to(dev).requires_grad_()
        torch.logcumsumexp(t, 1).backward(torch.linspace(-1, 1, 18, dtype=torch.float64).reshape(3, 6).to(dev))
        res.append(t.grad)
    close(res[0], res[1].cpu())
    y = torch.randn(5, 4).t()
    out = torch.empty(0, device=DEV)
    torch.logcumsumexp(y.to(DEV), 0, out=out)
    close(out, torch.logcumsumexp(y, 0))


def test_searchsorted_sorter():
    torch.manual_seed(0)
    b = torch.randn(3, 9)
    srt = torch.argsort(b, 1)
    v = torch.randn(3, 4)
    for right in (False, True):
        close(torch.searchsorted(b.to(DEV), v.to(DEV), right=right, sorter=srt.to(DEV)),
              torch.searchsorted(b, v, right=right, sorter=srt))
    with pytest.raises((RuntimeError, IndexError)):
        torch.searchsorted(b.to(DEV), v.to(DEV), sorter=(srt + 9).to(DEV)).cpu()


def _same(actual, expected):
    """exact: values, dtype and shape"""
    assert actual.device.type == DEV, actual.device
    a = actual.cpu()
    assert a.dtype == expected.dtype and a.shape == expected.shape, (a.dtype, a.shape, expected.dtype, expected.shape)
    assert torch.equal(a, expected), (a, expected)


@pytest.mark.parametrize("m", [1, 2, 7, 64, 1000, 4099])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.bfloat16])
def test_searchsorted_bisection_matches_cpu(m, dtype):
    """lower/misc.c bisects as the CPU kernel does: sorted boundaries with many ties (small integer values),
    values on and between boundaries and outside the range, 1-D and N-D, left/right/side, out_int32, odd sizes."""
    g = torch.Generator().manual_seed(m)
    b = torch.sort(torch.randint(-m // 3 - 2, m // 3 + 3, (m,), generator=g).to(dtype)).values
    v = torch.randint(-m // 3 - 5, m // 3 + 6, (5, 13), generator=g).to(dtype)
    if dtype.is_floating_point:
        v = v + (torch.rand(5, 13, generator=g) < 0.5).to(dtype) * 0.5  # some between boundaries
    for right in (False, True):
        _same(torch.searchsorted(b.to(DEV), v.to(DEV), right=right), torch.searchsorted(b, v, right=right))
        _same(torch.searchsorted(b.to(DEV), v.to(DEV), side="right" if right else "left", out_int32=True),
              torch.searchsorted(b, v, side="right" if right else "left", out_int32=True))
        _same(torch.bucketize(v.to(DEV), b.to(DEV), right=right), torch.bucketize(v, b, right=right))
    bn = torch.sort(torch.randint(-4, 5, (3, 2, m), generator=g).to(dtype), -1).values  # N-D: a row per value row
    vn = torch.randint(-6, 7, (3, 2, 11), generator=g).to(dtype)
    for right in (False, True):
        _same(torch.searchsorted(bn.to(DEV), vn.to(DEV), right=right), torch.searchsorted(bn, vn, right=right))
        _same(torch.searchsorted(bn.to(DEV)[:, 1:], vn.to(DEV)[:, 1:].transpose(0, 1).contiguous().transpose(0, 1),
                                 right=right), torch.searchsorted(bn[:, 1:], vn[:, 1:], right=right))  # views


def test_searchsorted_nan_sorter_scalar_and_broken_contract():
    nan, inf = float("nan"), float("inf")
    b = torch.tensor([-inf, -1.0, 0.0, 0.0, 2.5, inf, nan, nan])  # torch.sort's order: NaN last
    v = torch.tensor([nan, -inf, -1.0, -0.0, 0.0, 1.0, 2.5, inf, 7.0, -7.0])
    for right in (False, True):
        for bb in (b, b[:6], b[5:], b[6:]):  # NaN boundaries: the CPU's probes step over them, ours too
            _same(torch.searchsorted(bb.to(DEV), v.to(DEV), right=right), torch.searchsorted(bb, v, right=right))
        _same(torch.searchsorted(b.to(DEV), 2.5, right=right), torch.searchsorted(b, 2.5, right=right))  # Scalar
        _same(torch.searchsorted(b.to(DEV), torch.tensor(0.0).to(DEV), right=right),
              torch.searchsorted(b, torch.tensor(0.0), right=right))  # 0-dim values
    g = torch.Generator().manual_seed(0)
    for m in (1, 5, 33, 1001):  # sorter: unsorted boundaries read through their argsort, 1-D and N-D
        b1 = torch.randn(m, generator=g)
        b2 = torch.randint(-3, 4, (4, m), generator=g).double()
        v1, v2 = torch.randn(17, generator=g), torch.randint(-4, 5, (4, 9), generator=g).double()
        for right in (False, True):
            s1, s2 = torch.argsort(b1), torch.argsort(b2, stable=True, dim=-1)
            _same(torch.searchsorted(b1.to(DEV), v1.to(DEV), right=right, sorter=s1.to(DEV)),
                  torch.searchsorted(b1, v1, right=right, sorter=s1))
            _same(torch.searchsorted(b2.to(DEV), v2.to(DEV), right=right, sorter=s2.to(DEV)),
                  torch.searchsorted(b2, v2, right=right, sorter=s2))
            # unsorted boundaries without a sorter break the contract: the same probes give the same answers
            _same(torch.searchsorted(b1.to(DEV), v1.to(DEV), right=right), torch.searchsorted(b1, v1, right=right))
    e = torch.empty(0)
    _same(torch.searchsorted(e.to(DEV), v.to(DEV)), torch.searchsorted(e, v))
    _same(torch.searchsorted(b.to(DEV), e.to(DEV)), torch.searchsorted(b, e))
    _same(torch.searchsorted(torch.zeros(3, 0).to(DEV), torch.ones(3, 2).to(DEV)),
          torch.searchsorted(torch.zeros(3, 0), torch.ones(3, 2)))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_last_offset_past_end(mode):
    """include_last_offset with offsets[-1] > len(input): PyTorch's CPU kernel raises, so does tpu (at the next
    sync, as every data-dependent error), and the device stays usable."""
    import torch.nn.functional as F

    w, ids, offs = torch.randn(10, 3), torch.tensor([1, 2, 3, 4, 5]), torch.tensor([0, 2, 100])
    msg = "offsets\\[-1\\] can not be greater than input's length 5 but got offsets\\[-1\\] of 100"
    with pytest.raises(RuntimeError, match=msg):
        F.embedding_bag(ids, w, offs, mode=mode, include_last_offset=True)
    with pytest.raises(RuntimeError, match=msg):
        F.embedding_bag(ids.to(DEV), w.to(DEV), offs.to(DEV), mode=mode, include_last_offset=True).cpu()
    assert (torch.arange(3.0).to(DEV) * 2).cpu().tolist() == [0.0, 2.0, 4.0]
