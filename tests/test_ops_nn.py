"""nn ops (lower/nn.c) on the tpu device vs PyTorch CPU: softmax / log_softmax, nll_loss
(1-D, 2-D, 2d), cross_entropy (ignore_index, label smoothing, probabilities, weights), mse,
binary cross entropy, smooth L1, huber, layer norm, dropout, embedding backward — forward,
out= and autograd, dtypes f32/f64/bf16/f16, empty and 0-dim shapes, non-contiguous views."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

DEV = "tpu"
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def close(actual: torch.Tensor, expected: torch.Tensor, **kw) -> None:
    assert actual.device.type == DEV, actual.device
    torch.testing.assert_close(actual.cpu(), expected, **kw)


def rand(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(shape) * scale).to(dtype)


def grads_of(fn, *inputs):
    """(output, grads) of fn on tpu copies and cpu copies of `inputs` (float tensors get grads)."""
    res = []
    for dev in (DEV, "cpu"):
        xs = [x.detach().to(dev).requires_grad_(x.is_floating_point()) for x in inputs]
        out = fn(*xs)
        # the same upstream gradient on both devices (made on the CPU: f32 linspace may differ
        # by an ulp because PyTorch's CPU kernel is compiled with FMA contraction and ours is not)
        g = torch.ones_like(out) if out.dim() == 0 else torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(out.dtype).to(dev)
        out.backward(g)
        res.append((out.detach(), [x.grad for x in xs if x.requires_grad]))
    return res


def check_grads(fn, *inputs, atol=None, rtol=None):
    (o_t, g_t), (o_c, g_c) = grads_of(fn, *inputs)
    kw = {} if atol is None else {"atol": atol, "rtol": rtol}
    close(o_t, o_c, **kw)
    for a, b in zip(g_t, g_c):
        close(a, b, **kw)


# ------------------------------------------------------------------ softmax


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,dim", [((), 0), ((7,), 0), ((3, 5), 1), ((3, 5), 0), ((2, 3, 4), -2),
                                       ((2, 0, 3), -1), ((0,), 0), ((4, 33), -1)])
@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax])
def test_softmax_forward(fn, shape, dim, dtype):
    x = rand(*shape, dtype=dtype, scale=3)
    if dtype in (torch.bfloat16, torch.float16):
        # we compute in f32 and round once (correctly rounded); PyTorch's CPU log_softmax for
        # reduced dtypes is off by an ulp in places, so compare with the f64 result instead
        close(fn(x.to(DEV), dim), fn(x.double(), dim).to(dtype))
    else:
        close(fn(x.to(DEV), dim), fn(x, dim))


@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_softmax_backward(fn, dtype):
    x = rand(4, 6, 5, dtype=dtype, scale=2)
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}  # see test_softmax_forward
    check_grads(lambda t: fn(t, dim=1), x, **tol)
    check_grads(lambda t: fn(t.transpose(0, 2), dim=-1), x, **tol)  # non-contiguous input


def test_softmax_noncontiguous_and_inf():
    x = rand(6, 8, scale=3)
    x[2] = float("-inf")
    x[3, :4] = float("-inf")
    xt = x.t()
    for fn in (torch.softmax, torch.log_softmax):
        close(fn(xt.to(DEV), 1), fn(xt, 1), equal_nan=True)
        close(fn(x.to(DEV)[:, ::2], 1), fn(x[:, ::2], 1), equal_nan=True)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 64, 100])
@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax])
def test_softmax_row_lengths(fn, n):
    """Row lengths around the host kernels' 8- and 16-lane steps (vector body and padded tail), masked
    (-inf) entries, differences from the max in exp's denormal range (-103 .. -87) and below it, a fully
    -inf row (NaN) and a +inf entry, forward and backward (f32, last dim and a strided dim)."""
    g = torch.Generator().manual_seed(n)
    x = torch.randn(6, n, generator=g) * 3
    x[1, n // 2:] = float("-inf")  # a masked tail (n = 1: the whole row)
    x[2] = -torch.linspace(0, 110, n)  # x - max down to -110: denormal exps and below
    x[3] = float("-inf")
    x[4, n - 1] = float("inf")
    for t in (x, x.t().contiguous().t()):  # contiguous rows, then the dim strided
        close(fn(t.to(DEV), 1), fn(t, 1), equal_nan=True)
    xf = x[[0, 2, 5]]  # finite rows for the gradients
    check_grads(lambda t: fn(t, dim=1), xf)
    check_grads(lambda t: fn(t.t(), dim=0), xf.t().contiguous())


@pytest.mark.parametrize("inner", [1, 7, 8, 9, 17])
@pytest.mark.parametrize("n", [1, 5, 33])
@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax])
def test_softmax_middle_dim(fn, n, inner):
    """Softmax over a middle dim of a contiguous tensor (the host runs 8 adjacent rows at once, one vector
    lane each, the last group of inner % 8 padded): masked (-inf) and fully -inf rows, forward and backward."""
    g = torch.Generator().manual_seed(100 * n + inner)
    x = torch.randn(3, n, inner, generator=g) * 3
    x[0, n // 2:, 0] = float("-inf")
    x[1, :, inner - 1] = float("-inf")
    close(fn(x.to(DEV), 1), fn(x, 1), equal_nan=True)
    check_grads(lambda t: fn(t, dim=1), x[2:].clone())
    check_grads(lambda t: fn(t, dim=1), x[2:].clone().expand(2, n, inner).contiguous())


def test_softmax_dtype_arg_and_half_to_float():
    x = rand(3, 7, dtype=torch.bfloat16)
    close(F.softmax(x.to(DEV), -1, dtype=torch.float32), F.softmax(x, -1, dtype=torch.float32))
    # the aten op with half_to_float=True (CUDA's path): f32 result computed from bf16 input
    y = torch.ops.aten._softmax(x.to(DEV), 1, True)
    assert y.dtype == torch.float32
    close(y, torch.softmax(x.float(), 1))
    y = torch.ops.aten._log_softmax(x.to(DEV), 1, True)
    close(y, torch.log_softmax(x.float(), 1))
    # backward with input_dtype f16 and f32 grads: an f16 grad_input (PyTorch's meta rule)
    g, yh = rand(3, 7), torch.softmax(rand(3, 7), 1)
    gi = torch.ops.aten._softmax_backward_data(g.to(DEV), yh.to(DEV), 1, torch.float16)
    assert gi.dtype == torch.float16
    close(gi, (yh.double() * (g.double() - (g.double() * yh.double()).sum(1, keepdim=True))).half())


def test_softmax_out_and_errors():
    x = rand(3, 4)
    out = torch.empty(3, 4, device=DEV)
    torch.ops.aten._softmax.out(x.to(DEV), 0, False, out=out)
    close(out, torch.softmax(x, 0))
    with pytest.raises(IndexError, match="Dimension out of range"):
        torch.softmax(x.to(DEV), 2)


# ------------------------------------------------------------------ nll_loss / cross_entropy


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_nll_loss(reduction, weighted, dtype):
    x = torch.log_softmax(rand(7, 5), 1).to(dtype)
    t = torch.tensor([0, 4, -100, 2, 1, 4, 3])
    w = torch.rand(5).to(dtype) + 0.1 if weighted else None
    fn = lambda a: F.nll_loss(a, t.to(a.device), weight=None if w is None else w.to(a.device), reduction=reduction)
    check_grads(fn, x)
    # 1-D input (no batch), ignore_index inside the class range
    fn1 = lambda a: F.nll_loss(a, torch.tensor(3, device=a.device), reduction=reduction)
    check_grads(fn1, x[1])
    fn2 = lambda a: F.nll_loss(a, t.clamp(min=0).to(a.device), ignore_index=4, reduction=reduction)
    check_grads(fn2, x)


def test_nll_loss_all_ignored_and_empty():
    x = torch.log_softmax(rand(3, 4), 1)
    t = torch.full((3,), -100)
    close(F.nll_loss(x.to(DEV), t.to(DEV)), F.nll_loss(x, t), equal_nan=True)  # 0 / 0
    close(F.nll_loss(x.to(DEV), t.to(DEV), reduction="sum"), F.nll_loss(x, t, reduction="sum"))
    e, te = torch.empty(0, 4), torch.empty(0, dtype=torch.long)
    for red in ("none", "mean", "sum"):
        close(F.nll_loss(e.to(DEV), te.to(DEV), reduction=red), F.nll_loss(e, te, reduction=red), equal_nan=True)


def test_nll_loss_forward_total_weight():
    x = torch.log_softmax(rand(5, 3), 1)
    t = torch.tensor([0, 2, 1, 1, -100])
    w = torch.rand(3)
    for red in range(3):
        for xx, tt in ((x, t), (x[0], t[0])):
            got = torch.ops.aten.nll_loss_forward(xx.to(DEV), tt.to(DEV), w.to(DEV), red, -100)
            exp = torch.ops.aten.nll_loss_forward(xx, tt, w, red, -100)
            close(got[0], exp[0])
            close(got[1], exp[1])


@pytest.mark.parametrize("bad", [5, -1, -7])
def test_nll_loss_target_out_of_bounds(bad):
    x = torch.log_softmax(rand(4, 5), 1).to(DEV)
    t = torch.tensor([0, 1, bad, 2], device=DEV)
    with pytest.raises(IndexError):
        F.nll_loss(x, t).item()
    with pytest.raises(IndexError):
        F.nll_loss(x, t, reduction="none").cpu()
    with pytest.raises(IndexError):
        torch.ops.aten.nll_loss_backward(torch.ones((), device=DEV), x, t, None, 1, -100,
                                         torch.ones((), device=DEV)).cpu()
    assert (torch.ones(2, device=DEV) + 1).sum().item() == 4  # still usable


def test_nll_loss_errors():
    x = torch.log_softmax(rand(4, 5), 1).to(DEV)
    with pytest.raises(RuntimeError, match="size mismatch"):
        torch.ops.aten.nll_loss_forward(x, torch.zeros(3, dtype=torch.long, device=DEV), None, 1, -100)
    with pytest.raises(RuntimeError, match="weight tensor should be defined"):
        F.nll_loss(x, torch.zeros(4, dtype=torch.long, device=DEV), weight=torch.ones(3, device=DEV))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_loss2d(reduction):
    x = torch.log_softmax(rand(2, 4, 3, 5), 1)
    t = torch.randint(0, 4, (2, 3, 5))
    t[0, 1, 2] = -100
    w = torch.rand(4) + 0.5
    check_grads(lambda a: F.nll_loss(a, t.to(a.device), weight=w.to(a.device), reduction=reduction), x)
    got = torch.ops.aten.nll_loss2d_forward(x.to(DEV), t.to(DEV), None, {"none": 0, "mean": 1, "sum": 2}[reduction], -100)
    exp = torch.ops.aten.nll_loss2d_forward(x, t, None, {"none": 0, "mean": 1, "sum": 2}[reduction], -100)
    close(got[0], exp[0])
    close(got[1], exp[1])


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy(reduction, smoothing, weighted):
    x = rand(6, 5, scale=2)
    t = torch.tensor([1, 0, 4, -100, 2, 4])
    w = torch.rand(5) + 0.2 if weighted else None
    fn = lambda a: F.cross_entropy(a, t.to(a.device), weight=None if w is None else w.to(a.device),
                                   reduction=reduction, label_smoothing=smoothing)
    check_grads(fn, x)
    fn3 = lambda a: F.cross_entropy(a, t.clamp(min=0).reshape(2, 3).to(a.device), ignore_index=2,
                                    reduction=reduction, label_smoothing=smoothing)
    check_grads(fn3, x.reshape(2, 3, 5).transpose(1, 2).contiguous())


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_probabilities(reduction, smoothing):
    x = rand(4, 5, scale=2)
    p = torch.softmax(rand(4, 5), 1)
    w = torch.rand(5) + 0.2
    check_grads(lambda a, q: F.cross_entropy(a, q, reduction=reduction, label_smoothing=smoothing), x, p)
    check_grads(lambda a, q: F.cross_entropy(a, q, weight=w.to(a.device), reduction=reduction), x, p)


def test_cross_entropy_bf16():
    x = rand(8, 10, dtype=torch.bfloat16, scale=2)
    t = torch.randint(0, 10, (8,))
    check_grads(lambda a: F.cross_entropy(a, t.to(a.device)), x, atol=1e-3, rtol=2e-2)


# ------------------------------------------------------------------ pointwise losses


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_mse_loss(reduction, dtype):
    a, b = rand(4, 6, dtype=dtype), rand(4, 6, dtype=dtype)
    check_grads(lambda x, y: F.mse_loss(x, y, reduction=reduction), a, b)
    check_grads(lambda x, y: F.mse_loss(x.t(), y.t(), reduction=reduction), a, b)  # transposed views
    check_grads(lambda x: F.mse_loss(x, torch.zeros((), dtype=dtype, device=x.device), reduction=reduction), rand(3, dtype=dtype))


def test_mse_loss_out_and_scalar():
    a, b = rand(5), rand(5)
    out = torch.empty((), device=DEV)
    torch.ops.aten.mse_loss.out(a.to(DEV), b.to(DEV), 2, out=out)
    close(out, F.mse_loss(a, b, reduction="sum"))
    close(F.mse_loss(a[0].to(DEV), b[0].to(DEV)), F.mse_loss(a[0], b[0]))
    close(F.mse_loss(torch.empty(0, device=DEV), torch.empty(0, device=DEV)), torch.tensor(float("nan")), equal_nan=True)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_binary_cross_entropy(reduction, weighted, dtype):
    x = torch.rand(5, 4).to(dtype) * 0.98 + 0.01
    x[0, 0], x[0, 1] = 0.0, 1.0  # log clamped at -100
    t = torch.rand(5, 4).to(dtype)
    w = torch.rand(4).to(dtype) if weighted else None
    fn = lambda a: F.binary_cross_entropy(a, t.to(a.device), weight=None if w is None else w.to(a.device),
                                          reduction=reduction)
    check_grads(fn, x)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_smooth_l1_loss(reduction, beta):
    a, b = rand(6, 5), rand(6, 5)
    b[0, 0] = a[0, 0]  # d == 0
    b[1, 1] = a[1, 1] - beta  # d == beta
    check_grads(lambda x, y: F.smooth_l1_loss(x, y, reduction=reduction, beta=beta), a, b)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("delta", [0.3, 1.0, 2.0])
def test_huber_loss(reduction, delta):
    a, b = rand(6, 5), rand(6, 5, scale=2)
    b[1, 1] = a[1, 1] - delta
    check_grads(lambda x, y: F.huber_loss(x, y, reduction=reduction, delta=delta), a, b)


# ------------------------------------------------------------------ layer norm


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape,nshape", [((4, 7), (7,)), ((2, 3, 8), (8,)), ((2, 3, 4), (3, 4)), ((5,), (5,)),
                                          ((0, 6), (6,))])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
def test_layer_norm(dtype, shape, nshape, affine):
    x = rand(*shape, dtype=dtype, scale=2) + 0.5
    w = (torch.rand(*nshape) + 0.5).to(dtype) if affine != "none" else None
    b = rand(*nshape, dtype=dtype) if affine == "both" else None
    tol = {} if dtype in (torch.float32, torch.float64) else {"atol": 2e-2, "rtol": 2e-2}
    if dtype == torch.float32:
        tol = {"atol": 1e-4, "rtol": 1e-4}
    inputs = [t for t in (x, w, b) if t is not None]

    def fn(*ts):
        xx = ts[0]
        ww = ts[1] if w is not None else None
        bb = ts[2] if b is not None else None
        return F.layer_norm(xx, nshape, ww, bb, eps=1e-5)
    check_grads(fn, *inputs, **({} if not tol else {"atol": tol["atol"], "rtol": tol["rtol"]}))


@pytest.mark.parametrize("n", [15, 16, 17, 33, 128, 200])
def test_layer_norm_row_lengths(n):
    """Row lengths around the row kernels' 16-element steps and the statistics' 16-element runs (one pass
    in double about the row's first element): an offset mean, a constant row, weight and bias, f32."""
    g = torch.Generator().manual_seed(n)
    x = torch.randn(5, n, generator=g) * 2 + 1000.0  # variance far below mean^2
    x[1] = 3.0  # constant row: variance 0
    x[2, 0] = 1050.0  # the shift (first element) far from the mean
    w, b = torch.rand(n, generator=g) + 0.5, torch.randn(n, generator=g)
    check_grads(lambda t, ww, bb: F.layer_norm(t, (n,), ww, bb), x, w, b, atol=1e-4, rtol=1e-4)
    check_grads(lambda t: F.layer_norm(t, (n,)), x[[0, 2, 3, 4]] - 1000.0, atol=1e-4, rtol=1e-4)


def test_layer_norm_outputs_and_partial_grads():
    x, w, b = rand(3, 4, 5), torch.rand(5) + 0.5, rand(5)
    got = torch.ops.aten.native_layer_norm(x.to(DEV), [5], w.to(DEV), b.to(DEV), 1e-5)
    exp = torch.ops.aten.native_layer_norm(x, [5], w, b, 1e-5)
    for g, e in zip(got, exp):
        assert g.shape == e.shape and g.dtype == e.dtype
        close(g, e, atol=1e-5, rtol=1e-5)
    # only some inputs require grad: the backward's output_mask has False entries (absent outputs)
    for req in ((True, False, False), (False, True, False), (False, False, True), (False, True, True)):
        res = []
        for dev in (DEV, "cpu"):
            ts = [t.detach().to(dev).requires_grad_(r) for t, r in zip((x, w, b), req)]
            F.layer_norm(ts[0], [5], ts[1], ts[2]).pow(2).sum().backward()
            res.append([t.grad for t in ts])
        for a, c in zip(*res):
            assert (a is None) == (c is None)
            if a is not None:
                close(a, c, atol=1e-4, rtol=1e-4)
    grads = torch.ops.aten.native_layer_norm_backward(
        torch.ones(3, 4, 5, device=DEV), x.to(DEV), [5], got[1], got[2], w.to(DEV), b.to(DEV), [False, True, False])
    assert grads[0] is None and grads[2] is None and grads[1].shape == (5,)


def test_layer_norm_noncontiguous_and_errors():
    x = rand(6, 5)
    check_grads(lambda t: F.layer_norm(t.t(), [6]), x, atol=1e-4, rtol=1e-4)
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.layer_norm(x.to(DEV), [4])
    with pytest.raises(RuntimeError, match="weight"):
        F.layer_norm(x.to(DEV), [5], weight=torch.ones(4, device=DEV))


# ------------------------------------------------------------------ dropout


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_dropout_train(dtype):
    x = (torch.rand(64, 128) + 0.5).to(dtype).to(DEV)
    p = 0.3
    out, mask = torch.ops.aten.native_dropout(x, p, True)
    assert mask.dtype == torch.bool and out.dtype == dtype
    frac = mask.float().mean().item()
    assert abs(frac - (1 - p)) < 0.03, frac
    expected = (x.cpu() * mask.cpu()).to(dtype) * (1 / (1 - p))
    close(out, expected.to(dtype))
    # autograd: grad = mask * scale
    xg = x.detach().requires_grad_()
    torch.manual_seed(0)
    y = F.dropout(xg, p)
    y.backward(torch.ones_like(y))
    m = y.detach().cpu() != 0
    close(xg.grad, (m.to(dtype) * (1 / (1 - p))).to(dtype))


def test_dropout_edge_cases_and_reproducibility():
    x = torch.rand(1000, device=DEV) + 1
    close(F.dropout(x, 0.5, training=False), x.cpu())
    close(F.dropout(x, 0.0), x.cpu())
    close(F.dropout(x, 1.0), torch.zeros(1000))
    out, mask = torch.ops.aten.native_dropout(x, 1.0, True)
    assert not mask.any().item() and (out == 0).all().item()
    out, mask = torch.ops.aten.native_dropout(x, 0.2, False)
    assert mask.all().item()
    close(out, x.cpu())
    torch.manual_seed(123)
    a = F.dropout(x, 0.5).cpu()
    b = F.dropout(x, 0.5).cpu()
    torch.manual_seed(123)
    c = F.dropout(x, 0.5).cpu()
    assert torch.equal(a, c) and not torch.equal(a, b)
    e = torch.empty(0, 3, device=DEV)
    assert F.dropout(e, 0.5).shape == (0, 3)
    s = torch.tensor(2.0, device=DEV)
    out, mask = torch.ops.aten.native_dropout(s, 0.5, True)
    assert out.shape == () and mask.shape == ()


def test_dropout_backward_op():
    g, m = rand(5, 6), torch.rand(5, 6) > 0.5
    close(torch.ops.aten.native_dropout_backward(g.to(DEV), m.to(DEV), 2.0),
          torch.ops.aten.native_dropout_backward(g, m, 2.0))


# ------------------------------------------------------------------ embedding backward


@pytest.mark.parametrize("padding_idx", [None, 0, 3, -1])
@pytest.mark.parametrize("scale_grad_by_freq", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_backward(padding_idx, scale_grad_by_freq, dtype):
    w = rand(7, 4, dtype=dtype)
    idx = torch.tensor([[1, 3, 3, 0], [6, 1, 3, 2]])
    fn = lambda ww: F.embedding(idx.to(ww.device), ww, padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq)
    fn32 = lambda ww: F.embedding(idx.int().to(ww.device), ww, padding_idx=padding_idx)
    if dtype == torch.float32:
        check_grads(fn, w)
        check_grads(fn32, w)
        return
    # reduced dtypes: rows accumulate in f32 and round once (CPU accumulates in bf16), so
    # the reference is the f32 gradient rounded to bf16
    for f in (fn, fn32):
        (o_t, g_t), _ = grads_of(f, w)
        o_c, g_c = grads_of(f, w.float())[1]
        close(o_t, o_c.to(dtype))
        close(g_t[0], g_c[0].to(dtype))


def test_embedding_dense_backward_op():
    g = rand(2, 3, 4)
    idx = torch.tensor([[0, 2, 2], [5, 1, 2]])
    for pad in (-1, 2):
        close(torch.ops.aten.embedding_dense_backward(g.to(DEV), idx.to(DEV), 6, pad, False),
              torch.ops.aten.embedding_dense_backward(g, idx, 6, pad, False))
    bad = torch.tensor([[0, 2, 9], [5, 1, 2]])
    with pytest.raises(IndexError):
        torch.ops.aten.embedding_dense_backward(g.to(DEV), bad.to(DEV), 6, -1, False).cpu()
