"""embedding_bag (drivers/host/embed.c through lower/misc.c) vs PyTorch CPU on random cases: odd sizes, empty
bags (also the first and the last), repeated ids, padding_idx, per_sample_weights, include_last_offset, i32 ids,
a transposed (non-contiguous) table, f32 / f64 / bf16 / f16, all four forward results and the gradients.

Bit for bit where PyTorch's CPU forward rounds as the definition does (f32 accumulation in id order, the sum
rounded to a 16-bit dtype before mean divides, RNE): everything except two fbgemm fast paths of a contiguous
table without padding_idx, which are compared within one rounding: f32 with per_sample_weights (fbgemm fuses the
multiply-add) and bf16 sum / mean (fbgemm rounds f32 to bf16 half-up, not to nearest even). The backward is
compared with tolerances: PyTorch's CPU weight gradient adds in the order of an unstable sort of the ids, scales
by a rounded reciprocal, and accumulates bf16 / f16 in bf16 / f16 (tpu: id order, f32)."""
from __future__ import annotations

import itertools

import pytest
import torch

DEV = "tpu"
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def make_case(seed, dt, mode, pad, psw_on, last, nc, i32, nw=41, D=19, B=23):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 6, (B,), generator=g)
    lengths[0] = lengths[2] = lengths[-1] = 0
    N = int(lengths.sum())
    off = torch.cumsum(lengths, 0) - lengths
    if last:
        off = torch.cat([off, torch.tensor([N])])
    ids = torch.randint(0, nw, (N,), generator=g)
    ids[1::7] = ids[3]  # repeated ids
    if pad is not None:
        ids[::4] = pad
        ids[off[5]:off[5] + lengths[5]] = pad  # an all-padding bag
    if i32:
        ids, off = ids.int(), off.int()
    w = (torch.randn(D, nw, generator=g).t() if nc else torch.randn(nw, D, generator=g)).to(dt)
    w[5, 3] = float("nan") if mode == 2 else w[5, 3]
    psw = (torch.rand(N, generator=g) + 0.5).to(dt) if psw_on else None
    grad = torch.randn(B, D, generator=g).to(dt)
    return w, ids, off, psw, grad


def run(dev, w, ids, off, psw, grad, mode, pad, last):
    wd = w.detach().to(dev).requires_grad_()
    pd = psw.detach().to(dev).requires_grad_() if psw is not None else None
    if w.stride(0) == 1 and dev == DEV:  # keep the table's layout on the device
        wd = w.detach().t().contiguous().to(dev).t().detach().requires_grad_()
    outs = torch.ops.aten._embedding_bag(wd, ids.to(dev), off.to(dev), False, mode, False, pd, last,
                                         -1 if pad is None else pad)
    outs[0].backward(grad.to(dev))
    return [o.detach().cpu() for o in outs], wd.grad.cpu(), (pd.grad.cpu() if pd is not None else None)


def tol(dt):
    return {torch.bfloat16: dict(atol=3e-2, rtol=2e-2), torch.float16: dict(atol=4e-3, rtol=2e-3)}.get(dt, {})


CASES = [(dt, mode, pad, psw, last, nc) for dt in DTYPES for mode in (0, 1, 2)
         for pad, psw, last, nc in itertools.product((None, 3), (False, True), (False, True), (False, True))
         if not (psw and mode)]


@pytest.mark.parametrize("dt,mode,pad,psw_on,last,nc", CASES)
def test_embedding_bag_random(dt, mode, pad, psw_on, last, nc):
    w, ids, off, psw, grad = make_case(17 + mode, dt, mode, pad, psw_on, last, nc, i32=bool(last ^ nc))
    (t, tw, tp), (c, cw, cp) = (run(d, w, ids, off, psw, grad, mode, pad, last) for d in (DEV, "cpu"))
    fbgemm = not nc and pad is None and ((dt == torch.float32 and psw_on) or (dt == torch.bfloat16 and mode < 2))
    if fbgemm:
        torch.testing.assert_close(t[0], c[0], equal_nan=True)
    else:
        assert torch.equal(t[0].isnan(), c[0].isnan()) and torch.equal(t[0].nan_to_num(), c[0].nan_to_num()), \
            (t[0] - c[0]).abs().max()
    if mode or pad is not None or nc or dt == torch.float64:  # CPU fills offset2bag (not on its fast path)
        assert torch.equal(t[1], c[1])
    if mode:  # CPU fills bag_size (its length with include_last_offset: B, the meta function's: B + 1)
        assert torch.equal(t[2][:c[2].numel()], c[2]) and not t[2][c[2].numel():].any()
    if mode == 2:  # max_indices: 0 for empty and all-padding bags, the first of equal maxima, NaN never replaces
        assert torch.equal(t[3], c[3])
    torch.testing.assert_close(tw, cw, equal_nan=True, **tol(dt))
    if psw_on:
        torch.testing.assert_close(tp, cp, **tol(dt))


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_embedding_bag_thread_count_invariant(mode):
    """Large enough to split over the pool (forward by bags, backward by table rows): the forward is still
    CPU's bits and the weight gradient close to CPU's. (That the bits do not depend on the thread count is
    checked by tests/test_embed.c, 1 vs 4 threads.)"""
    w, ids, off, _, grad = make_case(3, torch.float32, mode, 3, False, False, True, False, nw=300, D=37, B=700)
    (t, tw, _), (c, cw, _) = (run(d, w, ids, off, None, grad, mode, 3, False) for d in (DEV, "cpu"))
    assert torch.equal(t[0].nan_to_num(), c[0].nan_to_num())
    torch.testing.assert_close(tw, cw, equal_nan=True)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_empty_inputs(mode):
    w = torch.randn(6, 4)
    for ids, off in [(torch.tensor([], dtype=torch.long), torch.tensor([0, 0, 0])),
                     (torch.tensor([1, 2]), torch.tensor([0, 2, 2]))]:
        t = torch.nn.functional.embedding_bag(ids.to(DEV), w.to(DEV), off.to(DEV), mode=mode)
        torch.testing.assert_close(t.cpu(), torch.nn.functional.embedding_bag(ids, w, off, mode=mode))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_max_errors_and_ids(mode):
    """an id outside the table: PyTorch's error for the mode; the device stays usable"""
    w, ids = torch.randn(10, 3), torch.tensor([1, 10, 3])
    msg = "num_embeddings but found idx to be 10" if mode == "max" else "not in the valid range"
    with pytest.raises(RuntimeError, match=msg):
        torch.nn.functional.embedding_bag(ids, w, torch.tensor([0, 2]), mode=mode)
    with pytest.raises(RuntimeError, match=msg):
        torch.nn.functional.embedding_bag(ids.to(DEV), w.to(DEV), torch.tensor([0, 2]).to(DEV), mode=mode).cpu()
    ok = torch.tensor([1, 2, 3])
    torch.testing.assert_close(
        torch.nn.functional.embedding_bag(ok.to(DEV), w.to(DEV), torch.tensor([0, 2]).to(DEV), mode=mode).cpu(),
        torch.nn.functional.embedding_bag(ok, w, torch.tensor([0, 2]), mode=mode))


@pytest.mark.parametrize("dt,n", [(torch.bfloat16, 259), (torch.float16, 2051), (torch.bfloat16, 1000)])
def test_embedding_bag_mean_large_bag_rounding(dt, n):
    """bf16 / f16 mean of a bag whose id count is not representable in the dtype (bf16(259) = 260): PyTorch
    divides the sum rounded to the dtype by the count rounded to it. A transposed table (not fbgemm's path)."""
    g = torch.Generator().manual_seed(n)
    w = torch.randn(64, 50, generator=g).t().to(dt)
    ids, off = torch.randint(0, 50, (n,), generator=g), torch.tensor([0, n // 3])
    t = torch.nn.functional.embedding_bag(ids.to(DEV), w.to(DEV), off.to(DEV), mode="mean").cpu()
    assert torch.equal(t, torch.nn.functional.embedding_bag(ids, w, off, mode="mean"))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_empty_table(mode):
    """a [0, D] table with only empty bags: zeros, as on CPU (max reads no max_indices)"""
    w, ids, off = torch.randn(0, 3), torch.tensor([], dtype=torch.long), torch.tensor([0, 0])
    t = torch.nn.functional.embedding_bag(ids.to(DEV), w.to(DEV), off.to(DEV), mode=mode).cpu()
    assert torch.equal(t, torch.nn.functional.embedding_bag(ids, w, off, mode=mode))


@pytest.mark.parametrize("mode,psw_on,i32,pad", [(0, True, False, None), (1, False, False, None), (0, False, True, 5),
                                                 (1, False, True, 5), (0, True, False, 5)])
def test_embedding_bag_dlrm_sizes(mode, psw_on, i32, pad):
    """DLRM's layout (examples/dlrm: 16-wide f32 rows, contiguous ids, 256 bags of 1-4 ids, a 2000-row table):
    embed.c's fast paths with their 16-wide row bodies and the look-ahead prefetch, and a table large enough that
    the weight gradient splits over the pool. Forward bits as CPU's (within one rounding where fbgemm fuses the
    per-sample weight's multiply-add), the gradient close."""
    w, ids, off, psw, grad = make_case(29 + mode, torch.float32, mode, pad, psw_on, False, False, i32, nw=2000, D=16, B=256)
    g = torch.Generator().manual_seed(7)
    lengths = torch.randint(1, 5, (256,), generator=g)
    off = (torch.cumsum(lengths, 0) - lengths).to(off.dtype)
    ids = torch.randint(0, 2000, (int(lengths.sum()),), generator=g).to(ids.dtype)
    if pad is not None:
        ids[::9] = pad
    psw = torch.rand(ids.shape, generator=g) + 0.5 if psw_on else None
    (t, tw, tp), (c, cw, cp) = (run(d, w, ids, off, psw, grad, mode, pad, False) for d in (DEV, "cpu"))
    if psw_on and pad is None:
        torch.testing.assert_close(t[0], c[0])
    else:
        assert torch.equal(t[0], c[0]), (t[0] - c[0]).abs().max()
    torch.testing.assert_close(tw, cw)
    if psw_on:
        torch.testing.assert_close(tp, cp)


@pytest.mark.parametrize("mode,psw_on,i32,pad", [(0, True, False, None), (1, False, True, 5), (0, False, False, 3),
                                                 (2, False, True, None)])
def test_embedding_bag_fast_paths_same_bits(mode, psw_on, i32, pad):
    """embed.c's fast bodies (contiguous ids, unit-column-stride f32 table) against its generic bodies on the same
    values (ids read through a stride-2 view; the table stored column-major): outputs, weight and per-sample-weight
    gradients bit for bit, on the device only (CPU differs by fbgemm's roundings)."""
    w, ids, off, psw, grad = make_case(41 + mode, torch.float32, mode, pad, psw_on, False, False, i32, nw=301, D=37,
                                       B=61)
    if pad is not None:
        ids[::7] = pad
    fast = run(DEV, w, ids, off, psw, grad, mode, pad, False)
    # the same ids through a stride-2 view made on the device (.to() would make a CPU view contiguous)
    spread = torch.stack([ids, torch.zeros_like(ids)], 1).to(DEV).reshape(-1)[::2]
    assert spread.stride(0) == 2 and torch.equal(spread.cpu(), ids)
    w_cm = w.t().contiguous().t()  # column-major table: run() keeps this layout on the device
    generic = run(DEV, w_cm, spread, off, psw, grad, mode, pad, False)
    for a, b in zip(fast[0], generic[0]):
        assert torch.equal(a, b)
    assert torch.equal(fast[1], generic[1])
    if psw_on:
        assert torch.equal(fast[2], generic[2])
