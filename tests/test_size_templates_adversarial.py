"""Size templates (torch.compile(dynamic=True)) against graphs whose IR depends on their sizes by more than
c + k*m: the template learns such a value from sizes where it happens to fit, so it must find out at an unseen
size that the value changed, and capture instead of instantiating a graph that computes something else.

Three places decide by size, each checked again at every instantiated size (docs/execution_modes.md):
- a lowering: median's row element (K - 1) // 2, adaptive pooling's longest window, the Philox counters a
  random op reserves (whole blocks of 4): declared with lw_size_decide, re-evaluated by tpu_capture_decode;
- the FX graph's Python arithmetic on sizes (Dynamo's `x.shape[1] // 2`);
- PyTorch's shape functions: the sizes of a node's result that are no polynomial of the input sizes (a pooling's
  or a strided convolution's (H - k) // s + 1), read from the FX graph's symbolic shapes.
Every case is driven so that the template is ready (two predicted captures in a row) while the decision has one
value, then called at a size where it has another; before these checks each of them was instantiated there and
computed a wrong result (median, slice, pooling) or reused another op's random numbers (dropout).
The other cases cross size thresholds that are decided on the concrete instantiated graph (host kernels and
the compiler's plan: GEMM blocking, row-kernel lane steps, strided softmax rows): instantiated, bit-identical to
eager, and (verify mode) equal to the capture made at the same size.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu import _compile

pytestmark = pytest.mark.skipif(not hasattr(torch_tpu._C, "_capture_size_check"), reason="no size templates")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _g(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed + 7 * sum(shape)))


def _drive(f, sizes, make, *, verify=False, monkeypatch=None, rng=False, grad=False, cpu=True, atol=1e-5):
    """Runs compiled f (dynamic) and eager f at each size; every output (and input gradient) of the compiled
    function must equal eager tpu bit for bit and PyTorch CPU within atol. Returns the metrics."""
    if monkeypatch is not None:
        monkeypatch.setattr(_compile, "VERIFY_SIZE_TEMPLATES", verify)
    compiled = torch.compile(f, backend="tpu", dynamic=True)
    torch_tpu.reset_metrics()
    for size in sizes:
        host = make(size)
        results = []
        for fn in (compiled, f):
            args = [a.to("tpu").requires_grad_(grad) if isinstance(a, torch.Tensor) else a for a in host]
            if rng:
                torch.manual_seed(1234)
            out = fn(*args)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            if grad:
                sum(o.float().square().sum() for o in outs).backward()
                outs += [a.grad for a in args if isinstance(a, torch.Tensor)]
            results.append([o.detach().cpu() for o in outs])
        got, eager = results
        for a, b in zip(got, eager):
            assert a.shape == b.shape, (size, a.shape, b.shape)
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"size {size}: {m}")
        if cpu and not rng:
            cargs = [a.clone().requires_grad_(grad) if isinstance(a, torch.Tensor) else a for a in host]
            out = f(*cargs)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            if grad:
                sum(o.float().square().sum() for o in outs).backward()
                outs += [a.grad for a in cargs if isinstance(a, torch.Tensor)]
            for a, b in zip(got, outs):
                torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=atol, msg=lambda m: f"size {size} vs CPU: {m}")
    return torch_tpu.metrics()


def _refused_with(m, text):
    reasons = m["compile_size_refused"]
    assert any(text in r for r in reasons), reasons
    assert m["compile_size_mismatch"] == {}, m["compile_size_mismatch"]


# ------------------------------------------------------------------ decisions that change at an unseen size

def test_lowering_decision_median_row_element():
    """median picks element (K - 1) // 2 of each sorted row: 2 at K = 5 and 6, 3 at K = 7."""
    sizes = [(3, 5), (4, 5), (4, 6), (5, 5), (5, 6), (3, 7), (6, 9)]
    m = _drive(lambda x: torch.median(x, dim=1), sizes, lambda s: (_g(*s),))
    assert m["compile_size_template"]["predicted"] == 2, m["compile_size_template"]
    _refused_with(m, "a size decision changes at these sizes: floor division (6, 2) is 3, the template's 2")
    assert m["compile_size_instantiated"] == 0


def test_graph_arithmetic_floordiv_slice():
    """Dynamo computes x.shape[1] // 2 in Python and slices to it: 2 at 4 and 5 columns, 3 at 6."""
    sizes = [(3, 4), (4, 4), (4, 5), (5, 4), (5, 5), (3, 6), (6, 9)]
    m = _drive(lambda x: x[:, : x.shape[1] // 2] * 2, sizes, lambda s: (_g(*s),))
    _refused_with(m, "a size the graph computes changes at these sizes: floordiv (floordiv) is 3, the template's 2")
    assert m["compile_size_instantiated"] == 0


# batch 2..5 with H, W in {8, 9}: the pooled size (H - 2) // 2 + 1 is 4 at all of them, 5 at H = 10
_POOL_SIZES = [(b, 3, h, w) for b in (2, 3, 4, 5) for h in (8, 9) for w in (9, 8)] + [(2, 3, 10, 9), (3, 3, 11, 13)]


@pytest.mark.parametrize("name,f", [
    ("max_pool2d", lambda x: F.max_pool2d(x, 2)),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 2)),
])
def test_shape_function_pooled_size(name, f):
    m = _drive(f, _POOL_SIZES, lambda s: (_g(*s),), grad=True)
    assert m["compile_size_instantiated"] > 0  # the sizes where (H - 2) // 2 + 1 stays 4
    _refused_with(m, f"'s size (s53//2) is 5, the template's 4")


def test_lowering_decision_adaptive_window():
    """adaptive_avg_pool2d to 2x2 gathers windows of the longest length: 3 at H, W in {5, 6}, 4 at 7."""
    sizes = [(b, 3, h, w) for b in (2, 3, 4, 5) for h in (5, 6) for w in (6, 5)] + [(2, 3, 7, 6), (3, 3, 9, 11)]
    m = _drive(lambda x: F.adaptive_avg_pool2d(x, 2), sizes, lambda s: (_g(*s),), grad=True)
    assert m["compile_size_instantiated"] > 0
    _refused_with(m, "a size decision changes at these sizes: adaptive pooling window (7, 2) is 4, the template's 3")


def test_lowering_decision_rng_blocks():
    """Dropout of [n, 3] reserves ceil(3n / 16) blocks of 4 Philox counters: 1 block for n = 2..5, 2 at n = 6.
    A template that reserved 1 block at n = 6 would hand the second dropout counters the first one reads."""
    def f(x):
        return F.dropout(x, 0.5, True), F.dropout(x, 0.5, True)

    sizes = [(2, 3), (3, 3), (4, 3), (5, 3), (6, 3), (7, 3), (11, 3)]
    m = _drive(f, sizes, lambda s: (_g(*s),), rng=True)
    # the counters (ceil(3n / 4)) are no c + k*m at the sampled sizes: never an instance, every size captured
    assert m["compile_size_instantiated"] == 0 and m["compile_size_template"].get("not_instance", 0) > 0


# ------------------------------------------------------------------ thresholds decided on the concrete graph

@pytest.mark.parametrize("verify", [False, True])
def test_gemm_sizes_cross_blocking(verify, monkeypatch):
    """linear over a dynamic K: the host GEMM's blocking (kc, k > 256 on AVX2) and the plan are chosen for
    the instantiated graph's concrete sizes."""
    w = _g(300, 5)

    def f(x, w):
        return torch.tanh(x @ w[: x.shape[1]]) .sum(1)

    sizes = [(4, 7), (5, 9), (6, 7), (7, 10), (3, 12), (4, 290), (9, 300)]
    m = _drive(f, sizes, lambda s: (_g(*s), w), verify=verify, monkeypatch=monkeypatch, atol=1e-4)
    assert m["compile_size_instantiated"] >= 2, m["compile_size_template"]
    if verify:
        assert m["compile_size_verified"] >= 2 and m["compile_size_mismatch"] == {}


@pytest.mark.parametrize("verify", [False, True])
def test_row_kernels_cross_lane_steps(verify, monkeypatch):
    """softmax / log_softmax / layer_norm over rows of 5..40 (16-lane steps of the row kernels), a softmax
    over a strided dim (8 rows at once) and a mean over the dynamic dim, forward and backward."""
    def f(x):
        return torch.softmax(x, -1) + torch.log_softmax(x, 1).mean(1, keepdim=True) + F.layer_norm(x, x.shape[-1:])

    sizes = [(2, 3, 5), (3, 3, 6), (2, 4, 5), (4, 5, 7), (3, 2, 9), (2, 3, 17), (5, 9, 40), (3, 4, 33), (4, 3, 64)]
    m = _drive(f, sizes, lambda s: (_g(*s),), verify=verify, monkeypatch=monkeypatch, grad=True, atol=1e-4)
    assert m["compile_size_instantiated"] >= 1, m["compile_size_template"]
    if verify:
        assert m["compile_size_verified"] >= 1 and m["compile_size_mismatch"] == {}


def test_attention_bmm_embedding_cat_split(monkeypatch):
    """A small attention block over a dynamic sequence (SDPA, the fused kernel), an embedding lookup, cat and
    split, training: instantiated, the same bits as eager and as a capture at the same size."""
    emb = _g(50, 8)

    def f(idx, emb, wq):
        h = F.embedding(idx, emb)                                  # [B, T, 8]
        q = (h @ wq).view(h.shape[0], h.shape[1], 2, 4).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).reshape(h.shape)
        top, bottom = torch.cat([a, h], -1).split([8, 8], -1)
        return (top * bottom).sum(-1)

    wq = _g(8, 8)
    sizes = [(2, 5), (3, 5), (2, 7), (3, 7), (4, 6), (5, 9), (2, 13)]

    def make(s):
        idx = torch.randint(0, 50, s, generator=torch.Generator().manual_seed(sum(s)))
        return idx, emb, wq

    monkeypatch.setattr(_compile, "VERIFY_SIZE_TEMPLATES", True)
    compiled = torch.compile(f, backend="tpu", dynamic=True)
    torch_tpu.reset_metrics()
    for s in sizes:
        idx, e, w = make(s)
        c = _g(*s, seed=1)
        outs = []
        for fn in (compiled, f):
            et, wt = e.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
            y = fn(idx.to("tpu"), et, wt)
            (y * c.to("tpu")).sum().backward()
            outs.append([y.detach().cpu(), et.grad.cpu(), wt.grad.cpu()])
        for a, b in zip(*outs):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        ec, wc = e.clone().requires_grad_(), w.clone().requires_grad_()
        y = f(idx, ec, wc)
        (y * c).sum().backward()
        for a, b in zip(outs[0], [y.detach(), ec.grad, wc.grad]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    m = torch_tpu.metrics()
    assert m["compile_size_instantiated"] >= 1 and m["compile_size_verified"] >= 1, m["compile_size_template"]
    assert m["compile_size_mismatch"] == {}


@pytest.mark.parametrize("name,f,sizes,reason", [
    # k = T // 3 from Dynamo's arithmetic: refused where it changes
    ("topk", lambda x: x.topk(x.shape[1] // 3, 1).values,
     [(2, 6), (3, 6), (3, 7), (4, 6), (4, 7), (2, 8), (3, 9), (5, 12)], "floordiv (floordiv) is 3, the template's 2"),
    # shift % T: the slice bound T - 5 comes out below 2 at T = 3 (the varying-field guard)
    ("roll", lambda x: torch.roll(x, 5, 1), [(3, 6), (4, 7), (4, 6), (5, 8), (5, 9), (3, 3), (6, 4), (2, 11)],
     "a varying field below 2"),
    # x[:, :6] is Min(6, T) wide: learned at T >= 7, then T = 4 and 5
    ("clamped_slice", lambda x: x[:, :6] * 2, [(3, 7), (4, 8), (4, 7), (5, 9), (5, 10), (3, 4), (6, 5)], None),
    # chunk(3) of T: ceil(T / 3) wide chunks (PyTorch's shape function)
    ("chunk", lambda x: torch.cat(x.chunk(3, 1)[::-1], 1), [(2, 6), (3, 6), (3, 7), (4, 6), (4, 7), (2, 8), (3, 9), (5, 12)],
     None),
])
def test_other_size_dependent_graphs_stay_exact(name, f, sizes, reason):
    """Size-dependent graphs found safe: every size is exact (bit-identical to eager, close to CPU); where the
    template was ready at a size whose decision differs, it refused with the reason."""
    m = _drive(f, sizes, lambda s: (_g(*s),))
    if reason is not None:
        assert any(reason in r for r in m["compile_size_refused"]), m["compile_size_refused"]
    assert m["compile_size_mismatch"] == {}
