"""Graph capture and replay (torch_tpu._C._capture_begin / _capture_end / CaptureHandle.run), the building
block of torch.compile(backend="tpu"): the captured ops run as one fused graph; a replay with new inputs must
equal (bit for bit) running the same ops eagerly on those inputs.
"""
from __future__ import annotations

import pytest
import torch

import torch_tpu

pytestmark = pytest.mark.skipif(not torch.tpu.is_available(), reason="no tpu device")
C = torch_tpu._C


def mlp_step(x, t, w1, b1, w2):
    """Forward + hand-written backward of a 2-layer MLP with MSE loss."""
    h = x @ w1 + b1
    a = torch.relu(h)
    y = a @ w2
    diff = y - t
    loss = (diff * diff).mean()
    dy = diff * (2.0 / diff.numel())
    dw2 = a.t() @ dy
    dh = (dy @ w2.t()) * (h > 0)
    dw1 = x.t() @ dh
    db1 = dh.sum(0)
    return [loss, dw1, db1, dw2]


def params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(13, 29, generator=g).to("tpu"), torch.randn(29, generator=g).to("tpu"),
            torch.randn(29, 5, generator=g).to("tpu")]


def batch(seed):
    g = torch.Generator().manual_seed(100 + seed)
    return torch.randn(17, 13, generator=g).to("tpu"), torch.randn(17, 5, generator=g).to("tpu")


def test_mlp_forward_backward_replay_matches_eager():
    w = params()
    x, t = batch(0)
    C._capture_begin(0)
    outs = mlp_step(x, t, *w)
    handle, reason = C._capture_end([x, t], outs, w)
    assert handle is not None, reason
    assert handle.num_ops >= 10 and handle.num_outputs == 4
    # the captured run itself produced the eager results
    eager0 = mlp_step(x, t, *w)
    for a, b in zip(outs, eager0):
        assert torch.equal(a.cpu(), b.cpu())
    for seed in (1, 2):
        x2, t2 = batch(seed)
        got = handle.run([x2, t2])
        want = mlp_step(x2, t2, *w)
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride()
            assert torch.equal(a.cpu(), b.cpu())
        # and against PyTorch CPU
        ref = mlp_step(*[v.cpu() for v in (x2, t2, *w)])
        for a, b in zip(got, ref):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-4, atol=1e-5)


def test_autograd_dropout_replay_draws_like_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Dropout(0.25),
                                torch.nn.Linear(24, 3)).to("tpu")
    ps = list(model.parameters())
    x = torch.randn(9, 12).to("tpu")

    def step(x):
        loss = model(x).square().mean()
        grads = torch.autograd.grad(loss, ps)
        return [loss.detach(), *grads]

    C._capture_begin(0)
    outs = step(x)
    handle, reason = C._capture_end([x], outs, ps)
    assert handle is not None, reason
    x2 = torch.randn(9, 12).to("tpu")
    torch.manual_seed(5)
    r1 = handle.run([x2])
    r2 = handle.run([x2])
    torch.manual_seed(5)
    e1 = step(x2)
    e2 = step(x2)
    for a, b in zip(r1, e1):
        assert torch.equal(a.cpu(), b.cpu())
    for a, b in zip(r2, e2):
        assert torch.equal(a.cpu(), b.cpu())
    assert not torch.equal(r1[0].cpu(), r2[0].cpu())  # dropout masks differ per call, as in eager


def test_in_place_update_of_an_input_is_replayed_into_the_new_input():
    x = torch.randn(6, 7).to("tpu")
    C._capture_begin(0)
    x.mul_(2).add_(1)
    y = x.sin()
    handle, reason = C._capture_end([x], [x, y])
    assert handle is not None, reason
    x2 = torch.randn(6, 7)
    x2_dev = x2.to("tpu")
    out = handle.run([x2_dev])
    assert out[0] is x2_dev
    assert torch.equal(x2_dev.cpu(), x2 * 2 + 1)
    torch.testing.assert_close(out[1].cpu(), (x2 * 2 + 1).sin())


def test_not_replayable_reasons():
    x = torch.randn(5).to("tpu")
    other = torch.randn(5).to("tpu")
    C._capture_begin(0)
    y = x * 2
    _ = y.sum().item()  # a flush while capturing
    z = y + 1
    handle, reason = C._capture_end([x], [z])
    assert handle is None and "flushed" in reason
    assert torch.equal(z.cpu(), x.cpu() * 2 + 1)  # the work still ran

    C._capture_begin(0)
    z = x * other
    handle, reason = C._capture_end([x], [z])
    assert handle is None and "neither an input nor a constant" in reason
    assert torch.equal(z.cpu(), x.cpu() * other.cpu())

    C._capture_begin(0)
    z = x * 3
    fresh = torch.empty(5, device="tpu")  # no captured op writes it
    handle, reason = C._capture_end([x], [z, fresh])
    assert handle is None and "output 1" in reason


def test_outputs_may_be_views():
    x = torch.randn(6, 4).to("tpu")
    C._capture_begin(0)
    y = (x * 3).sum(0, keepdim=True)
    x.add_(1)
    handle, reason = C._capture_end([x], [y.view(4), y, x.t(), x[2:]])
    assert handle is not None, reason
    x2 = torch.randn(6, 4)
    x2_dev = x2.to("tpu")
    flat, y2, xt, tail = handle.run([x2_dev])
    assert flat.shape == (4,) and xt.shape == (4, 6) and tail.shape == (4, 4)
    assert flat.untyped_storage().data_ptr() == y2.untyped_storage().data_ptr()  # views share storage, as in eager
    torch.testing.assert_close(y2.cpu(), (x2 * 3).sum(0, keepdim=True))
    assert torch.equal(flat.cpu(), y2.cpu().view(4))
    assert torch.equal(xt.cpu(), (x2 + 1).t()) and torch.equal(tail.cpu(), (x2 + 1)[2:])


def test_replay_checks_inputs():
    x = torch.randn(4, 3).to("tpu")
    C._capture_begin(0)
    y = x + 1
    handle, reason = C._capture_end([x], [y])
    assert handle is not None, reason
    with pytest.raises(RuntimeError, match="input 0"):
        handle.run([torch.randn(3, 4).to("tpu")])
    with pytest.raises(RuntimeError, match="expected 1 inputs"):
        handle.run([x, x])
    with pytest.raises(RuntimeError, match="not capturing"):
        C._capture_end([x], [y])
    C._capture_begin(0)
    with pytest.raises(RuntimeError, match="already capturing"):
        C._capture_begin(0)
    C._capture_end([], [])


def test_writes_into_slices_of_pending_values_are_captured():
    """cat/copy_/out= into a box of a tensor a captured op wrote (slice assignment, cat into a slice of a
    preallocated buffer, a strided column block) stay in the capture; the replay matches eager bit for bit."""
    def fn(x, w):
        y = x @ w                               # pending [6, 10]
        buf = torch.zeros(6, 16, device=x.device)  # pending too (a factory op)
        torch.cat([y[:, :3], x[:, :2]], dim=1, out=buf[:, 4:9])   # cat into a column block
        buf[1:4, 10:] = y[1:4, :6].sin()        # slice assignment
        y[:, 7:].mul_(2)                        # in place on a strided view of a pending value
        return [buf * 1.5, y.sum(0), buf[:, 4:9].t() + 1]

    g = torch.Generator().manual_seed(5)
    w = torch.randn(5, 10, generator=g).to("tpu")
    x = torch.randn(6, 5, generator=g).to("tpu")
    C._capture_begin(0)
    outs = fn(x, w)
    handle, reason = C._capture_end([x], outs, [w])
    assert handle is not None, reason
    x2 = torch.randn(6, 5, generator=g).to("tpu")
    got = handle.run([x2])
    want = fn(x2, w)  # strict eager
    for a, b in zip(got, want):
        assert torch.equal(a.cpu(), b.cpu())
    ref = fn(x2.cpu(), w.cpu())
    for a, b in zip(got, ref):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5)


def _dead_input_graph():
    """A graph whose first input dies at its first step (a.sum()) and whose big output is written after."""
    g = torch.Generator().manual_seed(11)
    n = 64 * 1024 + 3                               # f32: a 256 KiB class block
    a, b = torch.randn(n, generator=g), torch.randn(n, generator=g)
    fn = lambda a, b: [a.sum(), b * a.sum().neg()]  # noqa: E731
    x, y = a.to("tpu"), b.to("tpu")
    C._capture_begin(0)
    outs = fn(x, y)
    handle, reason = C._capture_end([x, y], outs)
    assert handle is not None, reason
    return handle, fn, a, b


def test_donated_input_is_freed_after_its_last_reader():
    """run(inputs, donate=True) takes the list's references (the list is emptied): an input nobody else holds is
    freed right after the run's last step that reads it, so an output written later may take its block: the
    run's peak is as op by op execution has it (not inputs + outputs), and the values are eager's."""
    handle, fn, a, b = _dead_input_graph()
    want = [t.cpu() for t in fn(a.to("tpu"), b.to("tpu"))]  # strict eager
    y = b.to("tpu")
    x = a.to("tpu")
    x_ptr = x.data_ptr()
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    args = [x, y]
    del x
    got = handle.run(args, True)
    assert args == []
    torch.tpu.synchronize()
    # the 4-byte sum is allocated (512 B block) before x dies; the product takes x's block after
    assert torch.tpu.max_memory_allocated() - before <= 512
    assert got[1].data_ptr() == x_ptr
    for t, w in zip(got, want):
        assert torch.equal(t.cpu(), w)
    torch.testing.assert_close(got[1].cpu(), b * -a.sum(), rtol=1e-5, atol=1e-5)


def test_held_input_is_not_donated():
    """An input someone else still references (a Python variable, another view of its storage, or a plain run
    without donate) keeps its memory and its values."""
    handle, fn, a, b = _dead_input_graph()
    want = [t.cpu() for t in fn(a.to("tpu"), b.to("tpu"))]
    y = b.to("tpu")
    for case in ("variable", "view", "no donate"):
        x = a.to("tpu")
        keep = x if case == "variable" else x[1:] if case == "view" else None
        args = [x, y]
        del x
        torch.tpu.synchronize()
        before = torch.tpu.memory_allocated()
        torch.tpu.reset_peak_memory_stats()
        got = handle.run(args, case != "no donate")
        torch.tpu.synchronize()
        assert torch.tpu.max_memory_allocated() - before >= b.numel() * 4  # the product got a block of its own
        for t, w in zip(got, want):
            assert torch.equal(t.cpu(), w)
        if keep is not None:
            assert torch.equal(keep.cpu(), a if case == "variable" else a[1:])
        del args, got, keep


def test_donated_input_taken_twice():
    """A graph may take one tensor twice (a saved value and its detached alias, which the forward's replay returned
    as one tensor): handed over only in the list, it is freed once after the later of its two last readers. Two
    tensors on one storage (a value and a real detached alias) are never freed: each holds the storage, so neither
    is the only way to reach its memory."""
    g = torch.Generator().manual_seed(12)
    n = 64 * 1024 + 3                                # f32: a 256 KiB class block
    a, b = torch.randn(n, generator=g), torch.randn(n, generator=g)
    fn = lambda a, a2, b: [a.sum(), b * a2.sum().neg()]  # noqa: E731
    x, y = a.to("tpu"), b.to("tpu")
    C._capture_begin(0)
    outs = fn(x, x, y)
    handle, reason = C._capture_end([x, x, y], outs)
    assert handle is not None, reason
    want = [t.cpu() for t in fn(a.to("tpu"), a.to("tpu"), b.to("tpu"))]  # strict eager
    with pytest.raises(RuntimeError):  # too few inputs: refused, nothing freed (the first donating run)
        handle.run([a.to("tpu")], True)
    for case in ("same tensor", "detached alias", "same tensor"):
        x = a.to("tpu")
        x_ptr = x.data_ptr()
        args = [x, x if case == "same tensor" else x.detach(), y]
        del x
        torch.tpu.synchronize()
        before = torch.tpu.memory_allocated()
        torch.tpu.reset_peak_memory_stats()
        got = handle.run(args, True)
        assert args == []
        torch.tpu.synchronize()
        if case == "same tensor":
            assert torch.tpu.max_memory_allocated() - before <= 512 and got[1].data_ptr() == x_ptr
        else:
            assert torch.tpu.max_memory_allocated() - before >= b.numel() * 4
        for t, w in zip(got, want):
            assert torch.equal(t.cpu(), w)
        del got
