"""The StableHLO printer kept honest: every graph the host driver runs for these ops is
printed as StableHLO, compiled with jax's XLA on the CPU and run on the same inputs; its
outputs must match the host driver's (exact for integer/bool/movement results, a few ulp
for floating math: see stablehlo_oracle._TOL for why).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("jax", reason="jax/jaxlib is the StableHLO oracle (installed by `make venv`)")

from stablehlo_oracle import check_records, recorded  # noqa: E402

DEV = "tpu"


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def rn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=_g(seed)).to(dtype).to(DEV)


def ri(lo, hi, *shape, dtype=torch.int64, seed=0):
    return torch.randint(lo, hi, shape, generator=_g(seed)).to(dtype).to(DEV)


def _with_specials(x):
    c = x.cpu().clone().flatten()
    if c.numel() >= 6 and c.dtype.is_floating_point:
        c[0], c[1], c[2], c[3] = float("nan"), float("inf"), -float("inf"), -0.0
    return c.reshape(x.shape).to(DEV)


# ---- op-level cases: name -> function run on tpu tensors (its graphs are checked)
def _eltwise_float(dt):
    def f():
        x = _with_specials(rn(7, 13, dtype=dt, seed=1))
        y = rn(7, 13, dtype=dt, seed=2)
        p = rn(7, 13, dtype=dt, seed=3).abs() + 0.1
        outs = [x + y, x - 2.5 * y, x * y, x / y, torch.remainder(x, y), torch.fmod(x, y),
                torch.floor_divide(x, y), torch.maximum(x, y), torch.minimum(x, y),
                torch.clamp(x, -0.5, 0.7), torch.where(x > y, x, y), x.neg(), x.abs(), x.sign(),
                torch.exp(y), torch.log(p), torch.sqrt(p), torch.rsqrt(p), torch.tanh(x), torch.sigmoid(y),
                torch.sin(y), torch.cos(y), torch.floor(x), torch.ceil(x), torch.round(x), torch.trunc(x),
                torch.erf(y), torch.expm1(y), torch.log1p(p), torch.atan2(x, y), torch.pow(p, y),
                torch.isnan(x), torch.isinf(x), torch.isfinite(x), x == y, x != y, x < y, x <= y, x >= y,
                torch.reciprocal(p), F.gelu(y), F.silu(y), F.relu(x), F.softplus(y), F.leaky_relu(x, 0.1)]
        return outs
    return f


def _eltwise_int(dt):
    def f():
        lo = 0 if dt == torch.uint8 else -50
        a = ri(lo, 50, 5, 11, dtype=dt, seed=4)
        b = ri(1, 7, 5, 11, dtype=dt, seed=5)
        if dt != torch.uint8:
            b = b * ri(0, 2, 5, 11, dtype=dt, seed=6).mul(2).sub(1)
        outs = [a + b, a - b, a * b, torch.div(a, b, rounding_mode="floor"), torch.div(a, b, rounding_mode="trunc"),
                torch.remainder(a, b), torch.fmod(a, b), torch.maximum(a, b), torch.minimum(a, b),
                a & b, a | b, a ^ b, ~a, a == b, a < b, a > b, a.abs() if dt != torch.uint8 else a,
                torch.clamp(a, 3, 20), a.to(torch.float32), a.to(torch.bool), a.sign()]
        if dt != torch.uint8:
            outs += [a.neg()]
        return outs
    return f


def _converts():
    x = _with_specials(rn(6, 9, seed=7) * 100)
    xf = rn(6, 9, seed=8) * 100
    outs = [xf.to(torch.int32), xf.to(torch.int64), xf.to(torch.int8), xf.to(torch.uint8), x.to(torch.bool),
            x.to(torch.bfloat16), x.to(torch.float16), x.to(torch.float64), ri(-300, 300, 6, 9).to(torch.bfloat16),
            ri(-300, 300, 6, 9).to(torch.int8), ri(0, 2, 6, 9).to(torch.bool).to(torch.float32)]
    return outs


def _reductions(dt):
    def f():
        x = rn(5, 7, 9, dtype=dt, seed=9)
        return [x.sum(), x.sum(1), x.mean((0, 2)), x.amax(2), x.amin(0), x.prod(1), x.max(1).values,
                x.argmax(2), x.argmin(0), torch.logsumexp(x, 1), x.var(1), x.std(0), x.norm(dim=2),
                (x > 0).all(1), (x > 0).any(2), x.cumsum(1), x.cumprod(2), torch.cummax(x, 1).values,
                torch.cummax(x, 1).indices]
    return f


def _argreduce_ties():
    x = ri(0, 3, 6, 10, seed=10).to(torch.float32)  # many ties: first occurrence wins
    y = x.clone().cpu(); y[1, 4] = float("nan"); y[1, 7] = float("nan"); y = y.to(DEV)
    return [x.argmax(1), x.argmin(0), y.argmax(1), y.argmin(1), ri(-5, 5, 4, 9, seed=11).argmax(1)]


def _matmul(dt):
    def f():
        a, b = rn(7, 13, dtype=dt, seed=12), rn(13, 5, dtype=dt, seed=13)
        bb1, bb2 = rn(3, 7, 13, dtype=dt, seed=14), rn(3, 13, 5, dtype=dt, seed=15)
        w, bias = rn(6, 13, dtype=dt, seed=16), rn(6, dtype=dt, seed=17)
        return [a @ b, torch.bmm(bb1, bb2), F.linear(a, w, bias), torch.einsum("bij,bjk->bik", bb1, bb2),
                a.t() @ a, torch.matmul(rn(13, dtype=dt), b)]
    return f


def _norms_softmax(dt):
    def f():
        x = rn(4, 6, 10, dtype=dt, seed=18)
        w, b = rn(10, dtype=dt, seed=19), rn(10, dtype=dt, seed=20)
        return [F.softmax(x, -1), F.log_softmax(x, 1), F.layer_norm(x, (10,), w, b),
                F.rms_norm(x, (10,), w, eps=1e-6), F.group_norm(rn(2, 6, 5, dtype=dt), 3),
                F.batch_norm(rn(4, 6, 5, dtype=dt), None, None, training=True)]
    return f


def _movement():
    x = rn(4, 5, 6, seed=21)
    idx = ri(0, 5, 7, seed=22)
    return [x.permute(2, 0, 1).contiguous(), x[:, 1:4:2, ::3].contiguous(), x.flip(1), torch.cat([x, x * 2], 1),
            torch.stack([x, x], 0), F.pad(x, (1, 2, 0, 3)), F.pad(x, (-1, 2)), x.reshape(20, 6).t().contiguous(),
            x.index_select(1, idx), x.expand(3, 4, 5, 6).contiguous(), torch.roll(x, 2, 1), x.repeat(2, 1, 1),
            torch.tril(rn(5, 7)), torch.triu(rn(5, 7), 1), torch.arange(11, device=DEV) * 3,
            torch.zeros(3, 4, device=DEV), torch.full((2, 3), 7.0, device=DEV), x.diagonal(0, 1, 2).contiguous()]


def _indexing():
    x = rn(6, 8, seed=23)
    gi = ri(0, 8, 6, 5, seed=24)
    si = torch.stack([torch.randperm(8, generator=_g(k))[:5] for k in range(6)]).to(DEV)
    src = rn(6, 5, seed=25)
    rows = ri(-6, 6, 4, seed=26)
    vals = rn(4, 8, seed=27)
    m = x > 0
    y = x.clone(); y[rows] = vals
    z = x.clone(); z.index_put_((ri(0, 6, 9, seed=28), ri(0, 8, 9, seed=29)), rn(9, seed=30), accumulate=True)
    return [torch.gather(x, 1, gi), x.scatter(1, si, src), x.scatter_add(1, gi, src), torch.take_along_dim(x, gi, 1),
            x[rows], x[:, ri(0, 8, 3, seed=31)], y, z, torch.where(m, x, 0.0),
            x.scatter_reduce(1, gi, src, "amax"), x.scatter_reduce(1, gi, src, "prod"),
            F.embedding(ri(0, 6, 3, 4, seed=32), x), F.one_hot(ri(0, 5, 7, seed=33), 5)]


def _sorting():
    x = _with_specials(rn(5, 9, seed=34))
    t = ri(0, 4, 5, 9, seed=35).to(torch.float32)  # ties: stable order
    return [torch.sort(x, 1).values, torch.sort(x, 1).indices, torch.sort(t, dim=1, stable=True).indices,
            torch.sort(t, dim=0, descending=True, stable=True).indices, torch.argsort(t, dim=1, stable=True),
            torch.topk(rn(5, 9, seed=36), 3, 1).values, torch.topk(rn(5, 9, seed=36), 3, 1).indices,
            torch.sort(ri(-9, 9, 4, 7, seed=37), dim=1, stable=True).values, torch.kthvalue(rn(4, 7, seed=38), 2, 1).values]


def _conv_pool(dt):
    def f():
        x = rn(2, 4, 9, 11, dtype=dt, seed=39)
        w, b = rn(6, 4, 3, 3, dtype=dt, seed=40), rn(6, dtype=dt, seed=41)
        wg = rn(6, 2, 3, 2, dtype=dt, seed=42)
        wt = rn(4, 3, 3, 3, dtype=dt, seed=43)
        return [F.conv2d(x, w, b, padding=1), F.conv2d(x, w, stride=2, dilation=(1, 2)), F.conv2d(x, wg, groups=2, padding=(1, 0)),
                F.conv1d(rn(2, 4, 13, dtype=dt), rn(5, 4, 3, dtype=dt), padding=2),
                F.conv_transpose2d(x, wt, stride=2, padding=1, output_padding=1),
                F.max_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 2), F.adaptive_avg_pool2d(x, (3, 4)),
                F.max_pool2d(x, 2, return_indices=True)[1], F.adaptive_max_pool2d(x, (4, 3)),
                F.interpolate(x, scale_factor=2, mode="nearest"), F.interpolate(x, size=(5, 7), mode="bilinear", align_corners=False)]
    return f


def _sdpa(dt):
    def f():
        q, k, v = rn(2, 4, 7, 8, dtype=dt, seed=44), rn(2, 4, 9, 8, dtype=dt, seed=45), rn(2, 4, 9, 6, dtype=dt, seed=46)
        mask = rn(7, 9, seed=47) > -0.5
        kg, vg = rn(2, 2, 9, 8, dtype=dt, seed=48), rn(2, 2, 9, 6, dtype=dt, seed=49)
        return [F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                F.scaled_dot_product_attention(q, k[:, :, :7], v[:, :, :7], is_causal=True),
                F.scaled_dot_product_attention(q, kg, vg, enable_gqa=True, scale=0.3)]
    return f


def _random():
    torch.tpu.manual_seed(1234)
    x = rn(6, 7, seed=64)
    return [torch.rand(5, 9, device=DEV), torch.randn(4, 7, device=DEV), torch.rand(3, 5, device=DEV, dtype=torch.bfloat16),
            torch.randn(9, device=DEV, dtype=torch.float16), torch.rand(2, 5, device=DEV, dtype=torch.float64),
            torch.randn(3, 3, device=DEV, dtype=torch.float64), torch.randint(0, 1000, (4, 6), device=DEV),
            torch.randint(-2**40, 2**40, (7,), device=DEV), F.dropout(x, 0.3), torch.empty(11, device=DEV).uniform_(-2, 3),
            torch.empty(5, device=DEV).normal_(1.0, 0.5), torch.bernoulli(torch.full((13,), 0.4, device=DEV))]


def _linalg():
    m = rn(3, 5, 5, seed=80, dtype=torch.float64)
    spd = m @ m.transpose(1, 2) + 5 * torch.eye(5, device=DEV, dtype=torch.float64)
    a32 = rn(6, 6, seed=81) + 6 * torch.eye(6, device=DEV)
    b32 = rn(6, 4, seed=82)
    return [torch.linalg.cholesky(spd), torch.linalg.cholesky_ex(spd.float()).L,
            torch.linalg.solve_triangular(a32.triu(), b32, upper=True),
            torch.linalg.solve_triangular(a32.tril(), b32, upper=False, unitriangular=True),
            torch.linalg.solve_triangular(a32, b32.t(), upper=True, left=False)]


def _histc_search():
    out = []
    for dt in (torch.float32, torch.float64, torch.bfloat16):
        x = rn(7, 9, dtype=dt, seed=60)
        big = torch.full((5,), 2.0**24 + 2, dtype=torch.float64).to(dt).to(DEV)  # the widening's next_after
        out += [torch.histc(x, 5), torch.histc(x, 4, -1, 1), torch.histc(big, 3), torch.histc(-big, 3)]
    b, v = torch.sort(rn(37, seed=61)).values, _with_specials(rn(5, 9, seed=62))
    bn, vn = torch.sort(ri(-3, 4, 3, 11, seed=63), 1).values, ri(-4, 5, 3, 6, seed=64)
    return out + [torch.searchsorted(b, v), torch.searchsorted(b, v, right=True), torch.bucketize(v, b, out_int32=True),
                  torch.searchsorted(bn, vn), torch.searchsorted(bn, vn, side="right"),
                  torch.isin(ri(0, 400, 300, seed=65), ri(0, 400, 301, seed=66))]  # isin's bisection (> 65536 pairs)


def _backward():
    x = rn(3, 4, 8, 8, seed=50).requires_grad_()
    w = rn(5, 4, 3, 3, seed=51).requires_grad_()
    q = rn(2, 2, 5, 4, seed=52).requires_grad_()
    kv = rn(2, 2, 6, 4, seed=53).requires_grad_()
    y = F.conv2d(x, w, padding=1, stride=2)
    a = F.scaled_dot_product_attention(q, kv, kv, is_causal=False)
    loss = y.square().mean() + F.max_pool2d(x, 2).sum() + a.sum() + F.log_softmax(x, 1).mean()
    xo = rn(2, 4, 9, 11, seed=54).requires_grad_()  # odd sizes: strided windows skip input rows
    wg = rn(6, 2, 3, 2, seed=55).requires_grad_()
    wt = rn(4, 3, 3, 3, seed=56).requires_grad_()
    loss = loss + F.conv2d(xo, wg, stride=2, groups=2, dilation=(2, 1)).square().sum()
    loss = loss + F.conv_transpose2d(xo, wt, stride=2, padding=1, output_padding=1).sin().sum()
    loss = loss + F.avg_pool2d(xo, 3, 2, ceil_mode=True).sum() + F.adaptive_max_pool2d(xo, (4, 5)).cos().sum()
    loss.backward()
    return [x.grad, w.grad, q.grad, kv.grad, xo.grad, wg.grad, wt.grad]


def _embedding_bag(dt):
    """embedding_bag sum / mean / max (the EMBEDDING_BAG(_BWD) custom targets), forward and backward: offsets with
    an empty bag (repeated offset) and one at the end, per_sample_weights, padding_idx, include_last_offset,
    scale_grad_by_freq, i32 ids, 2-D ids (fixed-length bags), a transposed (non-contiguous) table, no ids, no bags,
    a 259-id mean bag (bf16 rounds the count to 260, as PyTorch)"""
    def f():
        w = rn(11, 7, dtype=dt, seed=90).requires_grad_()
        wt = rn(7, 11, dtype=dt, seed=91).requires_grad_()
        ids = ri(0, 11, 23, seed=92)
        ids = torch.where(ids == 4, 3, ids)  # a padding id 3 among others
        off = torch.tensor([0, 3, 3, 9, 17, 23], device=DEV)  # bag 1 empty, the last empty (offset N)
        psw = rn(23, dtype=dt, seed=93).requires_grad_()
        outs = [F.embedding_bag(ids, w, off, mode="sum"), F.embedding_bag(ids, w, off, mode="mean"),
                F.embedding_bag(ids, w, off, mode="sum", per_sample_weights=psw),
                F.embedding_bag(ids, w, off, mode="mean", padding_idx=3),
                F.embedding_bag(ids, w, off, mode="sum", padding_idx=3, per_sample_weights=psw),
                F.embedding_bag(ids, w, off, mode="sum", include_last_offset=True),
                F.embedding_bag(ids, w, off, mode="mean", include_last_offset=True, padding_idx=3),
                F.embedding_bag(ids.int(), wt.t(), off.int(), mode="sum", scale_grad_by_freq=True),
                F.embedding_bag(ids, w, off, mode="mean", scale_grad_by_freq=True, padding_idx=3),
                F.embedding_bag(ri(0, 11, 4, 5, seed=94), w, mode="mean"),
                F.embedding_bag(ids, w, off, mode="max"),
                F.embedding_bag(ids, w, off, mode="max", padding_idx=3),  # bag 1 and the last empty: max_indices 0
                F.embedding_bag(ids.int(), wt.t(), off.int(), mode="max", include_last_offset=True),
                F.embedding_bag(ri(0, 11, 4, 5, seed=96), w, mode="max", padding_idx=2),
                F.embedding_bag(ids[:0], w, off[:2] * 0, mode="mean"),  # no ids: two empty bags
                F.embedding_bag(ids[:4], w, off[:1], mode="sum", include_last_offset=True),  # no bags
                F.embedding_bag(ri(0, 11, 259, seed=97), w, off[:1], mode="mean")]  # bf16: the count 259 rounds
        loss = sum((o.float() * rn(*o.shape, seed=95 + k)).sum() for k, o in enumerate(outs))
        loss.backward()
        return outs + [w.grad, wt.grad, psw.grad]
    return f



def _embedding_renorm():
    """embedding_renorm_ reads and rewrites only the named rows (index_select, index_put) in the table's own dtype."""
    out = []
    for dt in (torch.float32, torch.bfloat16):
        w = (rn(20, 5, seed=67) * 3).to(dt)
        torch.embedding_renorm_(w, ri(0, 20, 6, seed=68), 1.0, 2.0)
        out.append(w)
    return out


CASES = {
    "eltwise_f32": _eltwise_float(torch.float32),
    "eltwise_bf16": _eltwise_float(torch.bfloat16),
    "eltwise_f16": _eltwise_float(torch.float16),
    "eltwise_f64": _eltwise_float(torch.float64),
    "eltwise_i64": _eltwise_int(torch.int64),
    "eltwise_i32": _eltwise_int(torch.int32),
    "eltwise_i8": _eltwise_int(torch.int8),
    "eltwise_u8": _eltwise_int(torch.uint8),
    "converts": _converts,
    "reductions_f32": _reductions(torch.float32),
    "reductions_bf16": _reductions(torch.bfloat16),
    "argreduce_ties": _argreduce_ties,
    "matmul_f32": _matmul(torch.float32),
    "matmul_bf16": _matmul(torch.bfloat16),
    "norms_softmax_f32": _norms_softmax(torch.float32),
    "norms_softmax_bf16": _norms_softmax(torch.bfloat16),
    "movement": _movement,
    "indexing": _indexing,
    "sorting": _sorting,
    "conv_pool_f32": _conv_pool(torch.float32),
    "conv_pool_bf16": _conv_pool(torch.bfloat16),
    "sdpa_f32": _sdpa(torch.float32),
    "sdpa_bf16": _sdpa(torch.bfloat16),
    "random": _random,
    "linalg": _linalg,
    "backward": _backward,
    "histc_search": _histc_search,
    "embedding_renorm": _embedding_renorm,
    "embedding_bag_f32": _embedding_bag(torch.float32),
    "embedding_bag_bf16": _embedding_bag(torch.bfloat16),
    "embedding_bag_f64": _embedding_bag(torch.float64),
}


@pytest.mark.parametrize("name", list(CASES))
def test_op_graphs(name):
    with recorded() as recs:
        CASES[name]()
    check_records(recs)


# ---- the examples: every graph one training step runs (forward, backward, optimizer), op by op
# in strict eager mode, in f32 and under bf16 autocast.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
EXAMPLE_KW = {"mingpt": {}, "llama": {}, "qwen": {}, "resnet": {"lr": 0.01, "batch": 4}, "unet": {}, "dlrm": {}}


@pytest.mark.slow
@pytest.mark.parametrize("amp", [False, True], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", list(EXAMPLE_KW))
def test_example_step_graphs(name, amp):
    import common  # examples/common.py
    example = common.import_example(name)
    with recorded() as recs:
        example.train(DEV, steps=1, tiny=True, seed=0, log=None, amp=amp, **EXAMPLE_KW[name])
    stats = check_records(recs, min_graphs=10)
    assert stats["checked"] >= 10, stats


@pytest.mark.parametrize("name", ["mingpt", "llama"])
def test_fused_eager_step_graphs(name):
    """Fused eager: the whole graphs a training step flushes (forward, backward and optimizer ops fused,
    after the compiler passes) print as StableHLO that XLA runs to the host driver's results."""
    import common  # examples/common.py
    import torch_tpu
    example = common.import_example(name)
    with torch_tpu.fused_eager(), recorded() as recs:
        example.train(DEV, steps=1, tiny=True, seed=0, log=None, **EXAMPLE_KW[name])
    fused = [r for r in recs if r["op"].startswith("fused graph")]
    assert len(fused) >= 1 and sum(r["text"].count("stablehlo.") for r in fused if r["text"]) > 200, \
        [r["op"] for r in recs]
    check_records(recs)


@pytest.mark.parametrize("precision", ["high", "medium"])
def test_matmul_precision_graphs(precision):
    """float32 matmul precision "high" (3-pass bf16) / "medium" (1-pass bf16) is printed as the
    explicit bf16 splits the host's GEMM and conv kernels compute."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        with recorded() as recs:
            a, b = rn(9, 70, seed=70), rn(70, 11, seed=71)
            x, w = rn(2, 3, 7, 7, seed=72).requires_grad_(), rn(4, 3, 3, 3, seed=73).requires_grad_()
            y = [a @ b, torch.bmm(rn(2, 5, 33, seed=74), rn(2, 33, 6, seed=75)), F.conv2d(x, w, padding=1)]
            y[2].square().sum().backward()
    finally:
        torch.set_float32_matmul_precision(old)
    check_records(recs)
    assert any('"stablehlo.convert"' in r["text"] and "bf16" in r["text"] and "dot_general" in r["text"] for r in recs)


def test_scalars_are_arguments():
    """Runtime scalars are trailing rank-0 arguments: two scalar values, one module."""
    x = rn(5, 3, seed=60)
    with recorded() as recs:
        x * 0.25
        x * 3.5
    check_records(recs, min_graphs=2)
    assert recs[0]["text"] == recs[1]["text"]
    assert len(recs[0]["scalars"]) >= 1


def test_oracle_catches_a_wrong_output():
    """The comparison is live: a recorded output changed beyond the tolerance (a high bf16
    mantissa bit, the low bit of an integer) fails."""
    import numpy as np
    with recorded() as recs:
        rn(4, 5, seed=62, dtype=torch.bfloat16).exp()
        ri(0, 9, 6, seed=63) * 3
    check_records(recs, min_graphs=2)
    for r in recs:
        dtype, shape, data = r["outputs"][0]
        raw = bytearray(data)
        raw[0] ^= 0x40 if dtype == "bfloat16" else 0x01  # 64 bf16 ulps / one integer step
        bad = dict(r, outputs=[(dtype, shape, bytes(raw))])
        with pytest.raises(AssertionError):
            check_records([bad])
    assert np is not None


def test_dump_ir_stablehlo_files_compile_with_xla(tmp_path):
    """TORCH_TPU_DUMP_IR's .stablehlo.mlir files (read at the first compile: a subprocess) are
    modules XLA accepts."""
    import os
    import subprocess
    from stablehlo_oracle import _compile
    script = ("import torch, torch_tpu, torch.nn.functional as F\n"
              "x = torch.randn(4, 3, 8, 8).to('tpu')\n"
              "w = torch.randn(5, 3, 3, 3).to('tpu')\n"
              "y = F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 2).flatten(1).log_softmax(1)\n"
              "print(float(y.sum().cpu()))\n")
    env = dict(os.environ, TORCH_TPU_DUMP_IR=str(tmp_path / "dump"), TORCH_TPU_CACHE_DIR="0")
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    files = sorted((tmp_path / "dump").glob("*.stablehlo.mlir"))
    assert len(files) >= 4, files
    for f in files:
        text = f.read_text()
        assert not text.startswith("//"), (f.name, text)  # the printer expressed the graph
        _compile(text)


def test_recording_off_records_nothing():
    x = rn(4, seed=61)
    torch.tpu.synchronize()
    (x + 1).cpu()
    import torch_tpu
    assert torch_tpu._C._debug_take_graphs() == []
