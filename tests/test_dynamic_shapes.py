"""Dynamic shapes under torch.compile(backend="tpu", dynamic=True): what a new batch / sequence length costs, counted.

- Dynamo and AOTAutograd compile once: a new size reuses the FX graphs (0 recompiles);
- each new size is one capture per graph segment (the graph run op by op while recording) and one host executable
  compiled for it (trace_cache_misses; trace_cache_hits when an earlier test compiled the same graph); a size seen before replays with no capture and no compile;
- the size template (tpurt.h tpu_capture_size_check) says whether each capture's executable graph is the instance
  the earlier sizes predicted: for minGPT and Llama every size after the batch and the sequence length have each
  varied once is predicted exactly; a graph with a size-dependent non-integer constant is refused with its reason
  (and still runs per size, as before);
- outputs and gradients at every size equal eager tpu bit for bit and are close to PyTorch CPU;
- once a segment's template predicted two captures in a row, a new size is instantiated from it (graph and bindings
  with the sizes substituted, compiled for that size) instead of captured: 0 captures, the same bits as eager, and
  (VERIFY_SIZE_TEMPLATES) the instantiated graph and bindings equal what a capture records at that size;
  TORCH_TPU_SIZE_TEMPLATES=0 turns that off; a graph the template refuses keeps capturing.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import compile_models  # tests/compile_models.py
import torch_tpu

pytestmark = pytest.mark.skipif(not hasattr(torch_tpu._C, "_capture_size_check"), reason="no size templates")

EXACT = dict(rtol=0, atol=0, equal_nan=True)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _step(fn, module, loss_fn, x):
    module.zero_grad(set_to_none=True)
    out = fn(*x)
    loss = loss_fn(out)
    loss.backward()
    return out, loss, {n: p.grad for n, p in module.named_parameters() if p.grad is not None}


def _check_step(out_c, loss_c, grads_c, eager_step, cpu_step, name: str) -> None:
    """The compiled step's output, loss and gradients: eager tpu's bits, and PyTorch CPU's within tolerance
    (ResNet: its loss only, as tests/test_compile.py; its gradients and output are compared with eager tpu)."""
    (out_e, loss_e, grads_e), (out_cpu, loss_cpu, grads_cpu) = eager_step, cpu_step
    torch.testing.assert_close(out_c.cpu(), out_e.cpu(), **EXACT)
    torch.testing.assert_close(loss_c.cpu(), loss_e.cpu(), **EXACT)
    assert grads_c.keys() == grads_e.keys() == grads_cpu.keys()
    for n in grads_c:
        torch.testing.assert_close(grads_c[n].cpu(), grads_e[n].cpu(), **EXACT, msg=lambda s: f"{n}: {s}")
        if name != "resnet":
            torch.testing.assert_close(grads_c[n].cpu(), grads_cpu[n], rtol=1e-3, atol=1e-5, msg=lambda s: f"{n}: {s}")
    if name != "resnet":
        torch.testing.assert_close(out_c.cpu(), out_cpu.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(loss_c.cpu(), loss_cpu.detach(), rtol=1e-3 if name == "resnet" else 1e-4, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("name,sizes,captured,varying", [
    # (batch, seq); the sequence stays below the causal-mask buffer's length (`mask[:T]` specializes at T == block)
    # minGPT's backward also takes B*T and 4*B as size inputs: a coincidence at the first three sizes keeps a
    # field ambiguous until the fourth (generalized three times)
    ("mingpt", [(4, 12), (6, 12), (5, 9), (3, 7), (8, 11)], 2, 3),
    # Llama's forward takes CPU scalars (not captured; runs op by op): only its backward is captured
    ("llama", [(4, 8), (6, 8), (5, 6), (3, 7), (2, 5)], 1, 2),
])
def test_new_sizes_counted_and_predicted(name: str, sizes, captured: int, varying: int) -> None:
    model, _, _ = compile_models.build(name)
    eager = model.to("tpu")
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, backend="tpu", dynamic=True)
    cpu_model, _, _ = compile_models.build(name)
    torch_tpu.reset_metrics()
    frames = None
    for i, (batch, seq) in enumerate(sizes):
        _, inputs, loss_fn = compile_models.build(name, batch=batch, seq=seq)
        x = compile_models.to(inputs, "tpu")
        before = torch_tpu.metrics()
        out_c, loss_c, grads_c = _step(compiled, compiled_model, loss_fn, x)
        torch.tpu.synchronize()
        m = torch_tpu.metrics()
        # one capture and one host executable per captured segment for each new size: compiled, or found in the
        # compilation cache when an earlier test of this process compiled the same graph (same model and size)
        assert m["compile_captures"] - before["compile_captures"] == captured, m
        got = lambda k: m[k] - before[k]  # noqa: E731
        assert got("trace_cache_misses") + got("trace_cache_hits") == captured, m
        _check_step(out_c, loss_c, grads_c, _step(eager, eager, loss_fn, x),
                    _step(cpu_model, cpu_model, loss_fn, inputs), name)
        frames = m["compile_frames"] if frames is None else frames
    m = torch_tpu.metrics()
    # Dynamo compiled the model's frame(s) at the first size only
    assert m["compile_recompiles"] == 0 and m["compile_frames"] == frames, torch_tpu.recompile_reasons()
    # first size: the template's first sample; the batch, then the sequence length vary for the first time
    # (learned); from then on each captured graph is exactly the instance the template predicted (no size here is
    # instantiated: that needs two predicted captures in a row before a new size)
    n = len(sizes)
    assert m["compile_size_template"] == {"first": captured, "generalized": varying * captured,
                                          "predicted": (n - 1 - varying) * captured}, m["compile_size_not_generic"]
    assert m["compile_size_not_generic"] == {} and m["compile_size_instantiated"] == 0
    # a size seen before: no capture, no host compile
    torch_tpu.reset_metrics()
    _, inputs, loss_fn = compile_models.build(name, batch=sizes[2][0], seq=sizes[2][1])
    _step(compiled, compiled_model, loss_fn, compile_models.to(inputs, "tpu"))
    torch.tpu.synchronize()
    m = torch_tpu.metrics()
    assert (m["compile_captures"], m["trace_cache_misses"], m["compile_replays"]) == (0, 0, captured), m


LEARN = {  # sizes after which both models' templates are ready (two predicted captures in a row)
    "mingpt": [(4, 12), (6, 12), (5, 9), (3, 7), (8, 11), (7, 10)],
    "llama": [(4, 8), (6, 8), (5, 6), (3, 7), (2, 5)],
    "resnet": [(4, None), (6, None), (5, None), (3, None)],  # (batch, -): BatchNorm's n / (n - 1) is a size field
}
NEW = {"mingpt": [(2, 6), (9, 13), (5, 5), (6, 3)], "llama": [(7, 4), (3, 3), (8, 6), (2, 2)],
       "resnet": [(8, None), (2, None), (7, None)]}


@pytest.mark.slow
@pytest.mark.parametrize("verify", [False, True])
@pytest.mark.parametrize("name,captured", [("mingpt", 2), ("llama", 1), ("resnet", 2)])
def test_new_sizes_instantiated(name: str, captured: int, verify: bool, monkeypatch) -> None:
    """After learning, a new batch / sequence length is instantiated from the size template: no capture (no
    recording run), one host compile per segment (test_new_size_compiles_one_executable counts it), outputs and gradients bit-identical to eager tpu and close to
    PyTorch CPU. verify: each such size is captured too and the instantiated graph and bindings must equal the
    captured ones exactly."""
    from torch_tpu import _compile
    monkeypatch.setattr(_compile, "VERIFY_SIZE_TEMPLATES", verify)
    model, _, _ = compile_models.build(name)
    eager = model.to("tpu")
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, backend="tpu", dynamic=True)
    cpu_model, _, _ = compile_models.build(name)
    for batch, seq in LEARN[name]:  # (eager too: BatchNorm's running statistics follow every step)
        _, inputs, loss_fn = compile_models.build(name, batch=batch, seq=seq)
        _step(compiled, compiled_model, loss_fn, compile_models.to(inputs, "tpu"))
        _step(eager, eager, loss_fn, compile_models.to(inputs, "tpu"))
    torch.tpu.synchronize()
    for batch, seq in NEW[name]:
        _, inputs, loss_fn = compile_models.build(name, batch=batch, seq=seq)
        x = compile_models.to(inputs, "tpu")
        torch_tpu.reset_metrics()
        out_c, loss_c, grads_c = _step(compiled, compiled_model, loss_fn, x)
        torch.tpu.synchronize()
        m = torch_tpu.metrics()
        assert m["compile_size_instantiated"] == captured, (m["compile_size_refused"], m["compile_size_not_generic"])
        assert m["compile_recompiles"] == 0 and m["trace_cache_misses"] + m["trace_cache_hits"] == (captured if verify else 0)
        if verify:
            assert m["compile_captures"] == captured and m["compile_size_verified"] == captured, m["compile_size_mismatch"]
        else:
            assert m["compile_captures"] == 0, m  # (compiles also counts the eager loss's ops at this size)
        _check_step(out_c, loss_c, grads_c, _step(eager, eager, loss_fn, x),
                    _step(cpu_model, cpu_model, loss_fn, inputs), name)
        for (n, bc), be in zip(compiled_model.named_buffers(), eager.buffers()):  # BatchNorm running statistics
            torch.testing.assert_close(bc.cpu(), be.cpu(), **EXACT, msg=lambda s: f"{n}: {s}")
    # an instantiated size seen again replays: no capture, no compile
    torch_tpu.reset_metrics()
    _, inputs, loss_fn = compile_models.build(name, batch=NEW[name][0][0], seq=NEW[name][0][1])
    _step(compiled, compiled_model, loss_fn, compile_models.to(inputs, "tpu"))
    torch.tpu.synchronize()
    m = torch_tpu.metrics()
    assert (m["compile_captures"], m["compile_size_instantiated"], m["compile_replays"]) == (0, 0, captured), m


def test_size_templates_off(monkeypatch) -> None:
    """TORCH_TPU_SIZE_TEMPLATES=0: every new size captures (read when the graph is compiled); an invalid value fails
    naming the variable."""
    from torch_tpu import _env
    monkeypatch.setenv("TORCH_TPU_SIZE_TEMPLATES", "yes")
    with pytest.raises(ValueError, match="TORCH_TPU_SIZE_TEMPLATES"):
        _env.size_templates_enabled()
    monkeypatch.setenv("TORCH_TPU_SIZE_TEMPLATES", "0")

    def f(x, w):
        return torch.tanh(x @ w).sum(0)

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    w = _g(7, 4).to("tpu")
    torch_tpu.reset_metrics()
    with torch.no_grad():
        for batch in (3, 6, 11, 4, 9, 5):
            x = _g(batch, 7, seed=batch).to("tpu")
            torch.testing.assert_close(compiled(x, w).cpu(), f(x, w).cpu(), **EXACT)
    m = torch_tpu.metrics()
    assert m["compile_captures"] == 6 and m["compile_size_instantiated"] == 0, m


def _g(*shape, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g)


def test_size_template_refuses_a_size_dependent_float() -> None:
    """Attention over a dynamic head dimension E scales by 1 / sqrt(E): a float constant of the size that is no
    integer and no 1 / n, so no capture after the first is a template instance; the reason is recorded and every
    size still captures and runs correctly on its own (the per-size path)."""
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    torch_tpu.reset_metrics()
    with torch.no_grad():
        for e in (5, 7, 10, 13):
            q, k, v = (_g(2, 3, 4, e, seed=s) for s in range(3))
            got = compiled(q.to("tpu"), k.to("tpu"), v.to("tpu"))
            torch.testing.assert_close(got.cpu(), f(q.to("tpu"), k.to("tpu"), v.to("tpu")).cpu(), **EXACT)
            torch.testing.assert_close(got.cpu(), f(q, k, v), rtol=1e-5, atol=1e-6)
    m = torch_tpu.metrics()
    assert m["compile_captures"] == 4 and m["trace_cache_misses"] + m["trace_cache_hits"] == 4, m
    assert m["compile_size_template"] == {"first": 1, "not_instance": 3}, m
    assert m["compile_size_instantiated"] == 0  # not an instance: never instantiated, every size captures
    reasons = m["compile_size_not_generic"]
    assert len(reasons) == 3 and all("size-dependent constant" in r for r in reasons), reasons


def test_size_template_takes_integer_size_constants() -> None:
    """A mean over the dynamic dimension scales by 1 / N (an exact reciprocal of a size) and an MSE loss by
    1 / numel: size constants templated like dims."""
    def f(x, w):
        y = torch.tanh(x @ w)
        return y.mean(0) + F.mse_loss(y, y.flip(0))

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    w = _g(7, 4).to("tpu")
    torch_tpu.reset_metrics()
    with torch.no_grad():
        for batch in (3, 6, 11, 4, 9):
            x = _g(batch, 7, seed=batch).to("tpu")
            got = compiled(x, w)
            torch.testing.assert_close(got.cpu(), f(x, w).cpu(), **EXACT)
            torch.testing.assert_close(got.cpu(), f(x.cpu(), w.cpu()), rtol=1e-5, atol=1e-5)
    m = torch_tpu.metrics()
    # the last size: two predicted captures in a row, so it is instantiated from the template, not captured
    assert m["compile_size_template"] == {"first": 1, "generalized": 1, "predicted": 2}, m
    assert m["compile_size_not_generic"] == {} and m["compile_size_instantiated"] == 1


def test_new_size_compiles_one_executable() -> None:
    """The ops a capture records at a new size are lowered (their bindings and checks) but not compiled one by
    one: the only host compile of a new size is the captured graph's executable (or, from the fourth size on, the
    executable instantiated from the size template: no capture)."""
    def f(x, w, b):
        return (torch.sigmoid(x @ w + b) * x[:, :6]).sum(-1)

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    w, b = _g(9, 6).to("tpu"), _g(6).to("tpu")
    with torch.no_grad():
        for batch in (5, 7, 10, 13, 6):
            x = _g(batch, 9, seed=batch)
            before = torch_tpu.metrics()
            got = compiled(x.to("tpu"), w, b)
            m = torch_tpu.metrics()
            if batch != 5:  # the first call also compiles what Dynamo's guards and wrappers run
                new = ("compile_size_instantiated",) if batch == 6 else ("compile_captures",)
                assert m[new[0]] - before[new[0]] == 1, m
                assert m["compile_captures"] + m["compile_size_instantiated"] - before["compile_captures"] - \
                    before["compile_size_instantiated"] == 1, m
                assert m["compiles"] - before["compiles"] == 1, m
            torch.testing.assert_close(got.cpu(), f(x.to("tpu"), w, b).cpu(), **EXACT)
            torch.testing.assert_close(got.cpu(), f(x, w.cpu(), b.cpu()), rtol=1e-5, atol=1e-5)


def test_batch_norm_running_variance_is_a_size_field() -> None:
    """BatchNorm in training mode updates its running variance with n / (n - 1): a float constant of the size that
    the template takes as a field (as ResNet's forward needs), so later batch sizes are predicted."""
    bn = torch.nn.BatchNorm1d(5).to("tpu")
    ref = torch.nn.BatchNorm1d(5)
    f = torch.compile(lambda x: torch.relu(bn(x)), backend="tpu", dynamic=True)
    torch_tpu.reset_metrics()
    with torch.no_grad():
        for batch in (6, 9, 4, 7):
            x = _g(batch, 5, seed=batch)
            got = f(x.to("tpu"))
            torch.testing.assert_close(got.cpu(), torch.relu(ref(x)), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(bn.running_var.cpu(), ref.running_var, rtol=1e-6, atol=1e-7)
    m = torch_tpu.metrics()
    assert m["compile_captures"] == 4, m
    assert m["compile_size_template"] == {"first": 1, "generalized": 1, "predicted": 2}, m["compile_size_not_generic"]


def test_size_template_refuses_other_aliasing() -> None:
    """The template only instantiates calls shaped like its samples: two inputs that share storage (where the
    samples had separate tensors) are refused (the reason counted) and captured, not taken as a sample
    (`other_structure`); the next call with separate tensors at a new size is instantiated again. (A size or field
    below 2 is refused too: csrc/tpurt/tests/test_trace.c and test_symshape.c.)"""
    def f(x, y):
        return (torch.tanh(x) * 2 + y).sum(0)

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    with torch.no_grad():
        for batch in (5, 8, 6, 9):  # first, generalized, predicted, predicted: ready
            compiled(_g(batch, 6, seed=batch).to("tpu"), _g(batch, 6, seed=batch + 1).to("tpu"))
        base = _g(2 * 7, 6).to("tpu")
        torch_tpu.reset_metrics()
        got = compiled(base[:7], base[7:])
        m = torch_tpu.metrics()
        assert m["compile_captures"] == 1 and m["compile_size_instantiated"] == 0, m
        assert m["compile_size_template"] == {"other_structure": 1} and m["compile_recompiles"] == 0, m
        assert any("aliasing" in r for r in m["compile_size_refused"]), m["compile_size_refused"]
        torch.testing.assert_close(got.cpu(), f(base[:7], base[7:]).cpu(), **EXACT)
        x, y = _g(10, 6, seed=3), _g(10, 6, seed=4)
        torch_tpu.reset_metrics()
        got = compiled(x.to("tpu"), y.to("tpu"))
        m = torch_tpu.metrics()
        assert m["compile_captures"] == 0 and m["compile_size_instantiated"] == 1, m
        torch.testing.assert_close(got.cpu(), f(x.to("tpu"), y.to("tpu")).cpu(), **EXACT)
        torch.testing.assert_close(got.cpu(), f(x, y), rtol=1e-5, atol=1e-5)


def test_size_template_text_and_bad_use() -> None:
    t = torch_tpu._C.SizeTemplate()
    assert str(t) == ""
    with pytest.raises(TypeError):
        torch_tpu._C._capture_size_check(t, None, [3])
    with pytest.raises(RuntimeError, match="no capture checked yet"):
        torch_tpu._C._capture_instantiate(t, [3], 0)
