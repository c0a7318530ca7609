"""C shape rules (tpu_lowering_t.shapes, lower/misc.c) used by the glue instead of PyTorch's Python meta
functions: the embedding_bag family's results on tpu must have exactly the sizes, strides and dtypes the
meta function gives (run here on meta tensors), for new sizes on every call; arguments outside a rule
still raise PyTorch's error (the meta function runs for them)."""
from __future__ import annotations

import pytest
import torch

DEV = "tpu"
aten = torch.ops.aten


def meta_of(t):
    return t.to("meta") if isinstance(t, torch.Tensor) else t


def same_layout(got, want):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.device.type == DEV
        assert (g.shape, g.stride(), g.dtype) == (w.shape, w.stride(), w.dtype), (g.shape, g.stride(), g.dtype, w)


def bags(n_ids, n_bags, nw, idt, odt, g, last=False):
    idx = torch.randint(0, nw, (n_ids,), generator=g, dtype=torch.int64).to(idt)
    cuts = torch.sort(torch.randint(0, n_ids + 1, (n_bags,), generator=g)).values
    if n_bags:
        cuts[0] = 0
    off = torch.cat([cuts, torch.tensor([n_ids])]) if last else cuts
    return idx, off.to(odt)


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("wdt", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("idt,odt", [(torch.int64, torch.int64), (torch.int32, torch.int32), (torch.int32, torch.int64)])
def test_embedding_bag_layouts(mode, wdt, idt, odt):
    g = torch.Generator().manual_seed(mode * 7 + len(str(idt)))
    nw, D = 13, 5
    w = torch.randn(nw, D, generator=g).to(wdt)
    wt = w.to(DEV)
    for step, (n_ids, n_bags) in enumerate([(17, 4), (23, 4), (9, 3), (0, 2), (31, 1), (6, 0), (40, 7)]):
        last = step % 2 == 1 and n_bags > 0
        idx, off = bags(n_ids, n_bags, nw, idt, odt, g, last)
        psw = torch.randn(n_ids, generator=g).to(wdt) if mode == 0 and step % 3 == 0 else None
        pad = 3 if step % 4 == 2 else -1
        args = (idx, off, False, mode, False, psw, last, pad)
        for op in (aten._embedding_bag, aten._embedding_bag_forward_only):
            got = op(wt, *[a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args])
            same_layout(got, op(meta_of(w), *[meta_of(a) for a in args]))
        out, o2b, bsz, mi = aten._embedding_bag(wt, idx.to(DEV), off.to(DEV), False, mode, False,
                                                psw.to(DEV) if psw is not None else None, last, pad)
        grad = torch.randn(out.shape, generator=g).to(wdt)
        bargs = (idx, off, o2b.cpu(), bsz.cpu(), mi.cpu(), nw, False, mode, False, None, pad)
        same_layout(aten._embedding_bag_backward(grad.to(DEV), *[a.to(DEV) if isinstance(a, torch.Tensor) else a
                                                                for a in bargs]),
                    aten._embedding_bag_backward(meta_of(grad), *[meta_of(a) for a in bargs]))
        dargs = (idx, o2b.cpu(), bsz.cpu(), mi.cpu(), nw + step, False, mode, None, pad)
        same_layout(aten._embedding_bag_dense_backward(grad.to(DEV), *[a.to(DEV) if isinstance(a, torch.Tensor)
                                                                      else a for a in dargs]),
                    aten._embedding_bag_dense_backward(meta_of(grad), *[meta_of(a) for a in dargs]))
        if mode == 0:
            pargs = (w, idx, off, o2b.cpu(), mode, pad)
            same_layout(aten._embedding_bag_per_sample_weights_backward(
                grad.to(DEV), *[a.to(DEV) if isinstance(a, torch.Tensor) else a for a in pargs]),
                aten._embedding_bag_per_sample_weights_backward(meta_of(grad), *[meta_of(a) for a in pargs]))


def test_embedding_bag_values_new_sizes():
    """a new id count per call (the rule's case) still computes CPU's values, forward and backward"""
    g = torch.Generator().manual_seed(5)
    bag = torch.nn.EmbeddingBag(11, 6, mode="sum")
    bag_t = torch.nn.EmbeddingBag(11, 6, mode="sum").to(DEV)
    bag_t.load_state_dict(bag.state_dict())
    for n_ids in (7, 12, 19, 3, 26):
        idx, off = bags(n_ids, 4, 11, torch.int64, torch.int64, g)
        psw = torch.randn(n_ids, generator=g)
        want = bag(idx, off, per_sample_weights=psw)
        got = bag_t(idx.to(DEV), off.to(DEV), per_sample_weights=psw.to(DEV))
        torch.testing.assert_close(got.cpu(), want)
        want.sum().backward()
        got.sum().backward()
        torch.testing.assert_close(bag_t.weight.grad.cpu(), bag.weight.grad)


def test_outside_rule_raises_pytorch_error():
    """arguments a rule declines go to the meta function, which raises PyTorch's error"""
    w = torch.randn(5, 3)
    idx, off = torch.tensor([0, 1, 2]), torch.tensor([0, 2])
    for bad in [dict(idx=idx.float()), dict(off=off.float()), dict(w=w.long()), dict(psw=torch.ones(2))]:
        a = dict(w=w, idx=idx, off=off, psw=None)
        a.update(bad)
        with pytest.raises(RuntimeError) as cpu_err:
            aten._embedding_bag(meta_of(a["w"]), meta_of(a["idx"]), meta_of(a["off"]), False, 0, False,
                                meta_of(a["psw"]), False, -1)
        with pytest.raises(RuntimeError) as tpu_err:
            aten._embedding_bag(a["w"].to(DEV), a["idx"].to(DEV), a["off"].to(DEV), False, 0, False,
                                a["psw"].to(DEV) if a["psw"] is not None else None, False, -1)
        assert str(tpu_err.value).split("\n")[0] == str(cpu_err.value).split("\n")[0]


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_embedding_dense_backward_layouts(dt):
    """nn.Embedding's backward at a new token count each call: sizes/strides/dtype as meta, values as CPU"""
    g = torch.Generator().manual_seed(3)
    for n_tok, nw, pad in [(7, 11, -1), (13, 11, 2), (1, 4, -1), (0, 5, -1), (29, 11, 0)]:
        grad = torch.randn(n_tok, 6, generator=g).to(dt)
        idx = torch.randint(0, nw, (n_tok,), generator=g)
        got = aten.embedding_dense_backward(grad.to(DEV), idx.to(DEV), nw, pad, False)
        same_layout(got, aten.embedding_dense_backward(meta_of(grad), meta_of(idx), nw, pad, False))
        if dt == torch.float32:  # (bf16 sums: CPU accumulates in bf16, tpu in f32; values are test_ops_nn's)
            torch.testing.assert_close(got.cpu(), aten.embedding_dense_backward(grad, idx, nw, pad, False))
