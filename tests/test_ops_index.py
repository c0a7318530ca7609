"""Indexing and joining ops on the tpu device vs PyTorch CPU: index_select, gather,
scatter (src/value/reduce, scatter_add, scatter_reduce), advanced indexing (integer
and boolean indices, None/ellipsis, adjacent and separated index dims), index_put
(accumulate), masked_select/masked_scatter, nonzero/argwhere, take/put,
index_add/copy/fill/reduce, bincount, cat/stack, tril/triu, flip, roll,
repeat_interleave, tril/triu_indices, tensor printing — values, dtypes, out=, in-place, run-time index
errors (PyTorch's wording) and autograd."""
from __future__ import annotations

import pytest
import torch

DEV = "tpu"
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
ALL = FLOATS + [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]


def make(shape, dtype=torch.float32, seed=0, noncontig=False):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        x = torch.rand(shape, generator=g) > 0.5
    elif dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    else:
        lo = 0 if dtype == torch.uint8 else -4
        x = torch.randint(lo, 5, shape, generator=g, dtype=torch.int64).to(dtype)
    if noncontig and x.dim() >= 2:
        x = x.transpose(0, -1).contiguous().transpose(0, -1)
    return x


def idx(*vals, dtype=torch.int64):
    return torch.tensor(vals, dtype=dtype)


def rnd_index(shape, high, seed=0, neg=True):
    g = torch.Generator().manual_seed(seed)
    i = torch.randint(0, high, shape, generator=g)
    if neg and high > 0:
        flip = torch.rand(shape, generator=g) > 0.5
        i = torch.where(flip, i - high, i)
    return i


def same(got, want, **kw):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w, **kw)
        return
    assert isinstance(got, torch.Tensor) and got.device.type == DEV, type(got)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **kw)


def to_dev(v):
    if isinstance(v, torch.Tensor):
        return v.to(DEV)
    if isinstance(v, (list, tuple)):
        return type(v)(to_dev(e) for e in v)
    return v


def check(fn, *xs, **kw):
    """fn on CPU inputs vs fn on their tpu copies (tensors inside lists/tuples too)."""
    same(fn(*[to_dev(x) for x in xs]), fn(*xs), **kw)


def check_grad(fn, *xs, **kw):
    """Gradients of sum(fn(x) * w) w.r.t. the floating inputs, CPU vs tpu."""
    cpu = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in xs]
    dev = [x.detach().to(DEV).requires_grad_(x.is_floating_point()) for x in xs]
    out_c = fn(*cpu)
    w = make(out_c.shape, out_c.dtype, seed=7)
    (out_c * w).sum().backward()
    out_d = fn(*dev)
    (out_d * w.to(DEV)).sum().backward()
    for c, d in zip(cpu, dev):
        if c.requires_grad:
            same(d.grad, c.grad, **kw)


def raises(exc, match, fn):
    """fn() on tpu raises exc matching match, synchronously or at the next sync."""
    with pytest.raises(exc, match=match):
        r = fn()
        if isinstance(r, torch.Tensor):
            r.cpu()


# ------------------------------------------------------------------ index_select / gather


@pytest.mark.parametrize("dtype", ALL)
def test_index_select_dtypes(dtype):
    x = make((4, 5), dtype)
    check(lambda x, i: x.index_select(1, i), x, idx(0, 4, 2, 2))
    check(lambda x, i: torch.index_select(x, 0, i), x, idx(3, 0, dtype=torch.int32))


@pytest.mark.parametrize("shape,dim", [((7,), 0), ((3, 4, 5), -1), ((3, 4, 5), 1), ((2, 0, 3), 2), ((), 0)])
def test_index_select_shapes(shape, dim):
    x = make(shape, noncontig=True)
    n = x.shape[dim] if x.dim() else 1
    i = rnd_index((6,), n, neg=False) if n else torch.zeros(0, dtype=torch.long)
    if x.dim() == 0:
        i = idx(0)
    check(lambda x, i: x.index_select(dim, i), x, i)
    if x.dim():
        check(lambda x: x.index_select(dim, torch.zeros(0, dtype=torch.long, device=x.device)), x)


def test_index_select_out_and_grad():
    x, i = make((5, 3)), idx(4, 1, 1)
    out = torch.empty(3, 3, device=DEV)
    torch.index_select(x.to(DEV), 0, i.to(DEV), out=out)
    same(out, x.index_select(0, i))
    check_grad(lambda x: x.index_select(0, i.to(x.device)), x)
    check_grad(lambda x: torch.nn.functional.embedding(i.to(x.device), x), x)


def test_index_select_errors():
    x = torch.zeros(3, 4, device=DEV)
    raises(IndexError, "out of bounds for dimension 1 with size 4", lambda: x.index_select(1, idx(4).to(DEV)))
    raises(IndexError, "out of bounds", lambda: x.index_select(1, idx(-1).to(DEV)))
    raises(IndexError, "", lambda: x.index_select(2, idx(0).to(DEV)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.bool])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dtype, dim):
    x = make((4, 5, 3), dtype, noncontig=True)
    n = x.shape[dim]
    i = rnd_index((3, 2, 3), n, seed=dim)
    i = torch.where(i < 0, i + n, i)
    check(lambda x, i: torch.gather(x, dim, i), x, i)


def test_gather_edge_and_grad():
    check(lambda x, i: torch.gather(x, 0, i), make(()), idx(0).reshape(()))
    check(lambda x, i: torch.gather(x, 1, i), make((3, 4)), torch.zeros(3, 0, dtype=torch.long))
    x, i = make((4, 5)), idx([0, 4], [4, 4], [1, 0])
    out = torch.empty(3, 2, device=DEV)
    torch.gather(x.to(DEV), 1, i.to(DEV), out=out)
    same(out, torch.gather(x, 1, i))
    check_grad(lambda x: torch.gather(x, 1, i.to(x.device)), x)
    d = torch.zeros(3, 4, device=DEV)
    raises(IndexError, "index 4 is out of bounds for dimension 1 with size 4", lambda: d.gather(1, idx([4]).to(DEV)))
    raises(RuntimeError, "expected index \\[3, 5\\] to be no larger than self \\[3, 4\\] apart from dimension 0",
           lambda: d.gather(0, torch.zeros(3, 5, dtype=torch.long, device=DEV)))
    # as ATen: an empty index of any dtype is accepted (nothing read), a non-empty one must be int32/int64
    for dt in (torch.uint8, torch.int16, torch.bool):
        check(lambda x, i: torch.gather(x, 0, i), make((5,)), torch.zeros(0, dtype=dt))
        check(lambda x, i: x.scatter(1, i, 1.0), make((3, 4)), torch.zeros(3, 0, dtype=dt))
    raises(RuntimeError, "Expected dtype int32/int64 for index", lambda: d.gather(1, torch.zeros(3, 1, dtype=torch.uint8, device=DEV)))


# ------------------------------------------------------------------ scatter


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64, torch.int32, torch.bool])
def test_scatter_src_value(dtype):
    x, s = make((4, 6), dtype), make((3, 4), dtype, seed=1)
    i = idx([0, 5, 2, 1], [3, 3, 3, 3], [5, 4, 1, 0])  # duplicates: last write wins, as CPU
    check(lambda x, i, s: x.scatter(1, i, s), x, i, s)
    check(lambda x, i: x.scatter(1, i, 1), x, i)
    check(lambda x, i, s: x.clone().scatter_(1, i, s), x, i, s)
    check(lambda x, i: torch.scatter(x, 0, i[:, :3].clamp(max=3), True if dtype == torch.bool else 2), x, i)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64])
def test_scatter_add_and_reduce(dtype):
    x, s = make((4, 6), dtype), make((5, 6), dtype, seed=1)
    i = rnd_index((5, 6), 4, neg=False, seed=2)
    kw = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else {}
    check(lambda x, i, s: x.scatter_add(0, i, s), x, i, s, **kw)
    check(lambda x, i, s: x.clone().scatter_add_(0, i, s), x, i, s, **kw)
    check(lambda x, i, s: x.scatter(0, i, s, reduce="add"), x, i, s, **kw)
    check(lambda x, i, s: x.scatter(0, i, s, reduce="multiply"), x, i, s, **kw)
    check(lambda x, i: x.scatter(0, i, 3, reduce="multiply"), x, i, **kw)
    for red in ["sum", "prod", "mean", "amax", "amin"]:
        for inc in [True, False]:
            check(lambda x, i, s: x.scatter_reduce(0, i, s, red, include_self=inc), x, i, s, **kw)


def test_scatter_grad_and_errors():
    x, s = make((4, 6)), make((3, 4), seed=1)
    i = idx([0, 5, 2, 1], [3, 2, 1, 0], [5, 4, 1, 0])
    check_grad(lambda x, s: x.scatter(1, i.to(x.device), s), x, s)
    check_grad(lambda x, s: x.scatter_add(1, i.to(x.device), s), x, s)
    out = torch.empty(4, 6, device=DEV)
    torch.scatter(x.to(DEV), 1, i.to(DEV), s.to(DEV), out=out)
    same(out, torch.scatter(x, 1, i, s))
    d = torch.zeros(3, 4, device=DEV)
    raises(IndexError, "index 9 is out of bounds for dimension 1 with size 4",
           lambda: d.scatter(1, idx([9]).to(DEV), torch.ones(3, 1, device=DEV)))
    raises(RuntimeError, "no larger size than src",
           lambda: d.scatter(1, torch.zeros(3, 2, dtype=torch.long, device=DEV), torch.ones(3, 1, device=DEV)))
    raises(RuntimeError, "reduce argument must be either add or multiply",
           lambda: d.scatter(1, idx([1]).to(DEV), 2.0, reduce="foo"))


# ------------------------------------------------------------------ advanced indexing (reads)

X4 = (3, 4, 5, 6)
READS = {
    "int_first": lambda x, d: x[idx(2, 0, -1).to(d)],
    "int_2d": lambda x, d: x[idx([0, 1], [2, 2]).to(d)],
    "int_mid": lambda x, d: x[:, idx(3, 0, -4).to(d)],
    "int_last_ellipsis": lambda x, d: x[..., idx(5, 1).to(d)],
    "two_adjacent": lambda x, d: x[:, idx(0, 3).to(d), idx(4, -1).to(d)],
    "two_separated": lambda x, d: x[idx(0, 2).to(d), :, idx(4, -1).to(d)],
    "bcast": lambda x, d: x[idx([0], [2]).to(d), :, :, idx(1, 5, 0).to(d)],
    "three": lambda x, d: x[idx(0, 1).to(d), idx(1, 2).to(d), idx(3, 4).to(d)],
    "all_four": lambda x, d: x[idx(0).to(d), idx(1).to(d), idx(2).to(d), idx(5).to(d)],
    "int32": lambda x, d: x[:, idx(1, 3, dtype=torch.int32).to(d)],
    "slice_and_int": lambda x, d: x[1:, idx(0, 2).to(d), ::2],
    "none_newaxis": lambda x, d: x[None, idx(1).to(d)],
    "empty_index": lambda x, d: x[torch.zeros(0, dtype=torch.long, device=d)],
    "bool_full": lambda x, d: x[(x > 0.3)],
    "bool_lead2": lambda x, d: x[(x[:, :, 0, 0] > 0)],
    "bool_mid": lambda x, d: x[:, (x[0, :, :, 0] > 0)],
    "bool_1d": lambda x, d: x[torch.tensor([True, False, True], device=d)],
    "bool_and_int": lambda x, d: x[torch.tensor([True, False, True], device=d), idx(1, 3).to(d)],
    "bool_one_true_bcast": lambda x, d: x[torch.tensor([False, False, True], device=d), idx(1, 3).to(d)],
    "bool_none_true": lambda x, d: x[torch.zeros(3, dtype=torch.bool, device=d)],
    "uint8_mask": lambda x, d: x[torch.tensor([1, 0, 1], dtype=torch.uint8, device=d)],
}


@pytest.mark.parametrize("name", list(READS))
def test_index_read(name):
    fn = READS[name]
    x = make(X4, noncontig=True)
    if name == "uint8_mask":
        with pytest.warns(UserWarning):
            want = fn(x, "cpu")
        with pytest.warns(UserWarning):
            got = fn(x.to(DEV), DEV)
        same(got, want)
        return
    same(fn(x.to(DEV), DEV), fn(x, "cpu"))


@pytest.mark.parametrize("dtype", ALL)
def test_index_read_dtypes(dtype):
    x = make((5, 4), dtype)
    check(lambda x: x[idx(4, 0, 0).to(x.device), idx(1, 2, 3).to(x.device)], x)
    check(lambda x: x[x != 0] if dtype != torch.bool else x[x], x)


def test_index_read_grad_and_errors():
    x = make((4, 5))
    check_grad(lambda x: x[idx(0, 3, 0).to(x.device)], x)  # duplicates accumulate
    check_grad(lambda x: x[:, idx(1, 1).to(x.device)], x)
    check_grad(lambda x: x[x.detach() > 0], x)
    d = torch.zeros(3, 4, device=DEV)
    raises(IndexError, "index 5 is out of bounds for dimension 0 with size 4", lambda: d[:, idx(5).to(DEV)])
    raises(IndexError, "index 5 is out of bounds for dimension 0 with size 3", lambda: d[idx(5).to(DEV)])
    raises(IndexError, "index -7 is out of bounds for dimension 1 with size 4", lambda: d[idx(1).to(DEV), idx(-7).to(DEV)])
    raises(IndexError, "shape mismatch", lambda: d[idx(0, 1).to(DEV), idx(0, 1, 2).to(DEV)])
    raises(IndexError, "too many indices", lambda: d[idx(0).to(DEV), idx(0).to(DEV), idx(0).to(DEV)])


# ------------------------------------------------------------------ index_put


def put(x, indices, v, acc=False):
    """x[indices] = v (or +=, accumulating duplicates) through index_put_; None entries
    (full slices) go through __setitem__, which PyTorch turns into index_put_."""
    x = x.clone()
    if any(i is None for i in indices):
        key = tuple(slice(None) if i is None else i for i in indices)
        if acc:
            torch.ops.aten.index_put_(x, list(indices), v, True)
        else:
            x[key] = v
        return x
    x.index_put_(indices, v, accumulate=acc)
    return x


@pytest.mark.parametrize("acc", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.int8])
def test_index_put(acc, dtype):
    x = make(X4, dtype, noncontig=True)
    kw = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else {}
    i0, i1, i3 = idx(2, 0, 2), idx(1, 1, -1), idx(5, 5, 0)
    check(lambda x, i, v: put(x, (i,), v, acc), x, i0, make((3, 4, 5, 6), dtype, seed=1), **kw)
    check(lambda x, i, v: put(x, (i,), v, acc), x, i0, make((6,), dtype, seed=1), **kw)  # broadcast values
    check(lambda x, i, j, v: put(x, (i, j), v, acc), x, i0, i1, make((3, 5, 6), dtype, seed=2), **kw)
    check(lambda x, i, j, v: put(x, (None, i, None, j), v, acc), x, i1, i3, make((3, 3, 5), dtype, seed=3), **kw)
    check(lambda x, i, j, v: put(x, (i, None, None, j), v, acc), x, i0, i3, make((1, 4, 5), dtype, seed=4), **kw)
    check(lambda x, i, v: put(x, (i,), v, acc), x, i0, make((), dtype, seed=5), **kw)


@pytest.mark.parametrize("acc", [False, True])
def test_index_put_masks(acc):
    x = make(X4, noncontig=True)
    m = x[:, :, 0, 0] > 0
    n = int(m.sum())
    check(lambda x, m: put(x, (m,), torch.tensor(2.5, device=x.device), acc), x, m)
    check(lambda x, m, v: put(x, (m,), v, acc), x, m, make((n, 5, 6), seed=1))
    check(lambda x, m, v: put(x, (m,), v, acc), x, m, make((n, 1, 1), seed=1))
    m2 = x[0, :, :, 0] > 0
    check(lambda x, m, v: put(x, (None, m2.to(x.device)), v, acc), x, m2, make((n and int(m2.sum()), 6), seed=2))
    check(lambda x, m: put(x, (m,), torch.tensor(-1.0, device=x.device), acc), x, x > 0.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vals_t", [False, True])
def test_index_put_rows_one_index_vector(dtype, vals_t):
    """x[i] += v with one i64 index vector over the rows (embedding backward's shape): a strided
    index vector with duplicates and negative ids, contiguous and transposed values."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(37, 19, generator=g).to(dtype)
    ids = torch.randint(-37, 37, (2 * 53,), generator=g)[::2]  # non-contiguous, duplicates, negatives wrap
    v = torch.randn(19, 53, generator=g).to(dtype).t() if vals_t else torch.randn(53, 19, generator=g).to(dtype)
    for acc in (True, False):
        want = x.clone().index_put_((ids,), v, accumulate=acc)
        got = x.to(DEV).index_put_((ids.to(DEV),), v.to(DEV), accumulate=acc).cpu()
        if acc:  # bf16 rounds after every add, in an order that may differ from CPU
            torch.testing.assert_close(got, want, **({} if dtype == torch.float32 else dict(rtol=2e-2, atol=5e-2)))
        else:  # duplicates: some write wins; every row written equals one of its values
            for r in range(37):
                hits = [j for j in range(53) if int(ids[j]) % 37 == r]
                if hits:
                    assert any(torch.equal(got[r], v[j]) for j in hits)
                else:
                    assert torch.equal(got[r], x[r])
    bad = ids.clone()
    bad[5] = 37
    with pytest.raises(IndexError, match="index 37 is out of bounds for dimension 0 with size 37"):
        x.to(DEV).index_put_((bad.to(DEV),), v.to(DEV), accumulate=True).cpu()


def test_setitem_and_index_put_functional():
    x = make((5, 6))

    def f1(x):
        x = x.clone()
        x[x > 0] = 0.0
        x[idx(0, 2).to(x.device)] = 7.0
        x[:, idx(1, 3).to(x.device)] += 1.0
        x[idx(4, 4, 4).to(x.device), idx(0, 0, 0).to(x.device)] += 1.0  # non-accumulating: += is read-modify-write
        return x

    check(f1, x)
    check(lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True), x, idx(0, 0, 1), torch.ones(3, 6))
    check_grad(lambda x, v: torch.index_put(x, (idx(0, 2).to(x.device),), v), x, make((2, 6), seed=1))
    check_grad(lambda x, v: torch.index_put(x, (idx(0, 0).to(x.device),), v, accumulate=True), x, make((2, 6), seed=1))


def test_index_put_errors():
    d = torch.zeros(3, 4, device=DEV)
    raises(IndexError, "index 7 is out of bounds for dimension 0 with size 3", lambda: d.index_put_((idx(7).to(DEV),), torch.tensor(1.0, device=DEV)))
    raises(IndexError, "index -7 is out of bounds for dimension 1 with size 4",
           lambda: d.index_put_((idx(1).to(DEV), idx(-7).to(DEV)), torch.tensor(1.0, device=DEV)))
    raises(RuntimeError, "Index put requires the source and destination dtypes match",
           lambda: d.index_put_((idx(1).to(DEV),), torch.ones(4, dtype=torch.float64, device=DEV)))
    raises(RuntimeError, "shape mismatch: value tensor of shape \\[3\\] cannot be broadcast",
           lambda: d.index_put_((idx(1).to(DEV),), torch.ones(3, device=DEV)))

    def wrong_count():  # a mask selecting 12 elements, 5 values: PyTorch's "shape mismatch"
        d[torch.ones(3, 4, dtype=torch.bool, device=DEV)] = torch.ones(5, device=DEV)
        return d

    with pytest.raises((RuntimeError, IndexError)):  # tpu: IndexError at the next sync
        wrong_count().cpu()


# ------------------------------------------------------------------ masked_select / nonzero / masked_scatter


@pytest.mark.parametrize("dtype", ALL)
def test_masked_select(dtype):
    x = make((4, 5), dtype, noncontig=True)
    m = make((4, 5), torch.bool, seed=3)
    check(torch.masked_select, x, m)
    check(torch.masked_select, x, m[0])  # broadcast mask
    check(torch.masked_select, x[0], m)  # broadcast self
    check(torch.masked_select, x, torch.zeros(4, 5, dtype=torch.bool))
    check(torch.masked_select, make((), dtype), torch.tensor(True))
    out = torch.empty(0, dtype=dtype, device=DEV)
    torch.masked_select(x.to(DEV), m.to(DEV), out=out)
    same(out, torch.masked_select(x, m))


def test_masked_select_grad():
    x, m = make((4, 5)), make((4, 5), torch.bool, seed=3)
    check_grad(lambda x: torch.masked_select(x, m.to(x.device)), x)


@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 4), (2, 3, 4), (2, 0, 3)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool, torch.bfloat16])
def test_nonzero(shape, dtype):
    x = make(shape, dtype, noncontig=True)
    if dtype.is_floating_point:
        x = torch.where(x > 0, x, torch.zeros((), dtype=dtype))
    check(torch.nonzero, x)
    check(torch.argwhere, x)
    check(lambda x: torch.nonzero(x, as_tuple=True), x)
    if x.dim():
        check(lambda x: torch.where(x != 0), x)


def test_nonzero_specials():
    x = torch.tensor([0.0, -0.0, float("nan"), float("inf"), 1e-30])
    check(torch.nonzero, x)
    out = torch.empty(0, 1, dtype=torch.long, device=DEV)
    torch.nonzero(x.to(DEV), out=out)
    same(out, torch.nonzero(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_masked_scatter(dtype):
    x, m, s = make((4, 5), dtype), make((4, 5), torch.bool, seed=3), make((25,), dtype, seed=4)
    check(lambda x, m, s: x.masked_scatter(m, s), x, m, s)
    check(lambda x, m, s: x.clone().masked_scatter_(m, s.reshape(5, 5)), x, m, s)
    check(lambda x, m, s: x.masked_scatter(m, s), x, m[1], s)  # broadcast mask


def test_masked_scatter_grad():
    x, m, s = make((4, 5)), make((4, 5), torch.bool, seed=3), make((25,), seed=4)
    check_grad(lambda x, s: x.masked_scatter(m.to(x.device), s), x, s)


# ------------------------------------------------------------------ take / put / index_add / index_copy / index_fill


def test_take_put():
    x = make((4, 5), noncontig=True)
    i = rnd_index((3, 2), 20, seed=1)
    check(torch.take, x, i)
    check(torch.take, x, torch.zeros(0, dtype=torch.long))
    check_grad(lambda x: torch.take(x, i.to(x.device)), x)
    for acc in [False, True]:
        check(lambda x, i, s: x.clone().put_(i, s, accumulate=acc), x, idx(0, 19, -1, 3), make((4,), seed=2))
        check(lambda x, i, s: x.put(i, s, accumulate=acc), x, idx([0, 0], [3, 3]), make((2, 2), seed=2))
    d = torch.zeros(3, 4, device=DEV)
    raises(IndexError, "out of bounds", lambda: d.take(idx(12).to(DEV)))
    raises(IndexError, "out of bounds", lambda: d.put_(idx(12).to(DEV), torch.ones(1, device=DEV)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_add_copy_fill(dtype, dim):
    x = make((4, 5, 3), dtype, noncontig=True)
    n = x.shape[dim]
    i = idx(0, n - 1, 0, 1)  # duplicates
    sshape = list(x.shape)
    sshape[dim] = 4
    s = make(tuple(sshape), dtype, seed=1)
    kw = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else {}
    check(lambda x, i, s: x.index_add(dim, i, s), x, i, s, **kw)
    check(lambda x, i, s: x.clone().index_add_(dim, i, s, alpha=2), x, i, s, **kw)
    iu = idx(n - 1, 0)
    sshape[dim] = 2
    s2 = make(tuple(sshape), dtype, seed=2)
    check(lambda x, i, s: x.index_copy(dim, i, s), x, iu, s2)
    check(lambda x, i: x.index_fill(dim, i, 3), x, i)
    check(lambda x, i: x.clone().index_fill_(dim, i, torch.tensor(-2, dtype=dtype)), x, i)


def test_index_add_grad_and_errors():
    x, s = make((4, 3)), make((3, 3), seed=1)
    i = idx(0, 3, 0)
    check_grad(lambda x, s: x.index_add(0, i.to(x.device), s, alpha=0.5), x, s)
    check_grad(lambda x, s: x.index_copy(0, idx(2, 0, 1).to(x.device), s), x, s)
    check_grad(lambda x: x.index_fill(1, idx(1).to(x.device), 0.0), x)
    check(lambda x, s: x.index_add(0, idx(0).to(x.device), s), make(()), make(()))
    d = torch.zeros(3, 4, device=DEV)
    raises(IndexError, "index 3 is out of bounds for dimension 0 with size 3", lambda: d.index_add(0, idx(3).to(DEV), torch.ones(1, 4, device=DEV)))
    raises(IndexError, "index 3 is out of bounds for dimension 0 with size 3", lambda: d.index_fill(0, idx(3).to(DEV), 1.0))


# ------------------------------------------------------------------ cat / stack


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(dim):
    a, b = make((3, 4, 2), noncontig=True), make((3, 4, 2), seed=1)
    bb = b if dim != 1 else make((3, 1, 2), seed=2)
    check(lambda a, b: torch.cat([a, b, a], dim), a, bb)
    check(lambda a: torch.cat([a], dim), a)
    check(lambda a, b: torch.stack([a, b], dim), a, b)
    out = torch.empty(0, device=DEV)
    torch.cat([a.to(DEV), a.to(DEV)], dim, out=out)
    same(out, torch.cat([a, a], dim))


def test_cat_promotion_empty_and_many():
    a = make((2, 3))
    check(lambda a, b: torch.cat([a, b]), a, make((1, 3), torch.int32))
    check(lambda a, b: torch.cat([a, b]), make((2, 3), torch.int64), make((1, 3), torch.bool))
    check(lambda a, b: torch.cat([a, b]), make((2,), torch.bfloat16), make((2,), torch.float16))
    check(lambda a, b: torch.cat([b, a, b]), a, torch.zeros(0))  # legacy empty 1-D tensors are skipped
    check(lambda a, b: torch.cat([a, b]), a, torch.zeros(0, 3))
    check(lambda a: torch.cat([a, a], 1), torch.zeros(0, 3))
    xs = [make((2, 3), seed=s) for s in range(40)]
    check(lambda *xs: torch.cat(xs), *xs)
    check(lambda *xs: torch.stack(xs, 1), *xs)
    check_grad(lambda a, b: torch.cat([a, b, a], 1), a, make((2, 5), seed=1))
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 0"):
        torch.cat([a.to(DEV), torch.zeros(3, 4, device=DEV)])
    with pytest.raises(RuntimeError, match="Tensors must have same number of dimensions"):
        torch.cat([a.to(DEV), torch.zeros(3, 4, 5, device=DEV)])


# ------------------------------------------------------------------ tril / triu / flip / roll


@pytest.mark.parametrize("k", [0, 1, -1, 5, -5])
@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (2, 3, 4), (0, 3)])
def test_tril_triu(k, shape):
    x = make(shape, noncontig=True)
    check(lambda x: torch.tril(x, k), x)
    check(lambda x: torch.triu(x, k), x)
    check(lambda x: x.clone().tril_(k), x)
    check(lambda x: x.clone().triu_(k), x)


def test_tril_triu_dtypes_grad():
    for dt in [torch.int64, torch.bool, torch.bfloat16]:
        check(lambda x: torch.tril(x, -1), make((4, 5), dt))
    check_grad(lambda x: torch.triu(x, 1), make((4, 5)))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.tril(torch.zeros(3, device=DEV))


@pytest.mark.parametrize("dims", [[0], [-1], [0, 2], [0, 1, 2], []])
def test_flip(dims):
    x = make((3, 4, 5), noncontig=True)
    check(lambda x: torch.flip(x, dims), x)
    check(lambda x: torch.flip(x, dims), make((3, 4, 5), torch.int32))


def test_flip_grad_misc():
    check(lambda x: torch.flip(x, [0]), make(()))
    check(lambda x: torch.fliplr(x), make((3, 4)))
    check(lambda x: torch.flipud(x), make((3, 4)))
    check_grad(lambda x: torch.flip(x, [1]), make((3, 4)))


@pytest.mark.parametrize("shifts,dims", [(1, 0), (-2, 1), ((2, -7), (0, 2)), (7, None), (0, 0), (13, -1)])
def test_roll(shifts, dims):
    x = make((3, 4, 5), noncontig=True)
    if dims is None:
        check(lambda x: torch.roll(x, shifts), x)
    else:
        check(lambda x: torch.roll(x, shifts, dims), x)


def test_roll_grad_empty():
    check(lambda x: torch.roll(x, 2, 0), torch.zeros(0, 3))
    check_grad(lambda x: torch.roll(x, 2, 1), make((3, 4)))


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.parametrize("red", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(red, include_self):
    x, s, i = make((5, 4)), make((6, 4), seed=1), idx(0, 2, 0, 4, 4, 4)
    check(lambda x, i, s: x.index_reduce(0, i, s, red, include_self=include_self), x, i, s)
    check(lambda x, i, s: x.index_reduce(1, i[:3], s[:5, :3], red, include_self=include_self), x, i, s)
    xi, si = make((5, 4), torch.int64), make((6, 4), torch.int64, seed=1)
    check(lambda x, i, s: x.clone().index_reduce_(0, i, s, red, include_self=include_self), xi, i, si)


def test_bincount():
    b = idx(1, 1, 3, 0, 7)
    check(torch.bincount, b)
    check(lambda b: torch.bincount(b, minlength=12), b)
    check(lambda b: torch.bincount(b, minlength=3), torch.zeros(0, dtype=torch.long))
    check(lambda b: torch.bincount(b), idx(2, 2, dtype=torch.int32))
    for w in [torch.tensor([0.5, 0.25, 1, 2, 3]), torch.tensor([0.5, 0.25, 1, 2, 3], dtype=torch.float64), idx(1, 2, 3, 4, 5)]:
        check(lambda b, w: torch.bincount(b, w), b, w)
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(idx(-1).to(DEV))


# ------------------------------------------------------------------ repeat_interleave / tril_indices


def test_repeat_interleave():
    check(torch.repeat_interleave, idx(2, 0, 3, 1))
    check(torch.repeat_interleave, idx(0, 0))
    check(lambda r: torch.repeat_interleave(r), idx(1, 2, dtype=torch.int32))
    x = make((4, 3))
    check(lambda x, r: torch.repeat_interleave(x, r, dim=0), x, idx(2, 0, 3, 1))
    check(lambda x, r: torch.repeat_interleave(x, r, dim=1, output_size=5), x, idx(2, 0, 3))
    check(lambda x: torch.repeat_interleave(x, 2, dim=1), x)
    check_grad(lambda x: torch.repeat_interleave(x, idx(1, 2, 0, 1).to(x.device), dim=0), x)


@pytest.mark.parametrize("args", [(4, 5, 0), (4, 5, 1), (5, 3, -1), (3, 3, -5), (3, 3, 7), (0, 3, 0)])
def test_tri_indices(args):
    same(torch.tril_indices(*args, device=DEV), torch.tril_indices(*args))
    same(torch.triu_indices(*args, device=DEV), torch.triu_indices(*args))


# ------------------------------------------------------------------ printing


@pytest.mark.parametrize(
    "make_t",
    [
        lambda: torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),
        lambda: torch.randn(200, 300, generator=torch.Generator().manual_seed(0)),
        lambda: torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 0.0, 1e-8, 1e8]),
        lambda: torch.tensor([1, -2, 300]),
        lambda: torch.tensor([True, False]),
        lambda: torch.randn(4, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16),
        lambda: torch.randn(4, generator=torch.Generator().manual_seed(0)).to(torch.float16),
        lambda: torch.arange(12.0).reshape(3, 4).t(),
        lambda: torch.tensor(3.5),
        lambda: torch.zeros(0, 3),
        lambda: torch.arange(2000),
        lambda: torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64),
    ],
)
def test_print(make_t):
    t = make_t()
    got = repr(t.to(DEV))
    assert "device='tpu:0'" in got
    assert _strip_dev(got) == _strip_dev(repr(t))
    assert _strip_dev(str(t.to(DEV))) == _strip_dev(str(t))


def _strip_dev(s: str) -> str:
    import re

    s = re.sub(r",?\s*device='tpu:0'", "", s)
    return re.sub(r"\s+", " ", s).replace(", )", ")").replace(" )", ")").strip()


def test_cpu_index_tensors_are_moved_like_cuda():
    x = torch.arange(12.0).view(3, 4)
    xt = x.to("tpu")
    idx = torch.tensor([2, 0])
    mask = torch.tensor([True, False, True])
    torch.testing.assert_close(xt[idx].cpu(), x[idx])
    torch.testing.assert_close(xt[mask].cpu(), x[mask])
    torch.testing.assert_close(xt[:, idx].cpu(), x[:, idx])
    y, yt = x.clone(), xt.clone()
    y[idx] = -1.0
    yt[idx] = -1.0
    torch.testing.assert_close(yt.cpu(), y)


def test_out_variant_meta_errors_raise():
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        torch.arange(0, 5, 0, device="tpu")


def test_gather_scatter_accept_int32_index():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, generator=g)
    i = torch.tensor([[0, 1], [2, 3], [1, 1]], dtype=torch.int32)
    src = torch.ones(3, 2)
    for f in (lambda a, i, s: torch.gather(a, 1, i), lambda a, i, s: torch.zeros_like(a).scatter(1, i, s),
              lambda a, i, s: torch.zeros_like(a).scatter_add(1, i, s)):
        torch.testing.assert_close(f(x.to("tpu"), i.to("tpu"), src.to("tpu")).cpu(), f(x, i, src))
    with pytest.raises(RuntimeError, match="int32/int64"):
        torch.gather(x.to("tpu"), 1, i.to(torch.int16).to("tpu"))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("last", [False, True])
def test_embedding_bag_offsets_must_start_at_zero(mode, last):
    """PyTorch's CPU kernel raises when offsets[0] != 0; tpu raises the same RuntimeError (at the next sync,
    as every data-dependent error) instead of dropping the ids before the first offset. Valid offsets still
    match CPU, and the device stays usable."""
    import torch.nn.functional as F

    w = make((11, 5), seed=3)
    ids = rnd_index((13,), 11, seed=4, neg=False)
    psw = make((13,), seed=5) if mode == "sum" else None
    # with include_last_offset the last offset is the end of the last bag (13 = all ids; ids after an earlier
    # end go into the last bag on tpu as in PyTorch's CPU reference path: test_ops_misc's last_offset_tail)
    for offs, bad in (([0, 3, 7, 13] if last else [0, 3, 7, 7], None), ([2, 3, 7, 12], 2), ([5, 9], 5), ([-1, 4], -1)):
        o = torch.tensor(offs)
        args = dict(mode=mode, include_last_offset=last)
        if bad is None:
            ref = F.embedding_bag(ids, w, o, per_sample_weights=psw, **args)
            got = F.embedding_bag(ids.to(DEV), w.to(DEV), o.to(DEV),
                                  per_sample_weights=None if psw is None else psw.to(DEV), **args)
            torch.testing.assert_close(got.cpu(), ref)
            continue
        msg = rf"offsets\[0\] has to be 0, i.e., the first sequence in the mini-batch has to start from position 0. However, got {bad}"
        with pytest.raises(RuntimeError, match=msg):
            F.embedding_bag(ids, w, o, per_sample_weights=psw, **args)
        with pytest.raises(RuntimeError, match=msg):
            F.embedding_bag(ids.to(DEV), w.to(DEV), o.to(DEV),
                            per_sample_weights=None if psw is None else psw.to(DEV), **args).cpu()
    x = torch.arange(6.0).to(DEV)
    assert (x + 1).cpu().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
