"""Fused eager (TORCH_TPU_FUSED_EAGER=1 / torch_tpu.set_fused_eager): ops are recorded and flushed as one
fused graph per device. Every test runs the same computation under strict eager and fused eager from the
same inputs/seeds and requires bit-identical results (torch.equal), plus agreement with PyTorch CPU where
the computation is deterministic. Flush points, trace reuse, error reporting and RNG streams are checked
through results and the trace counters in torch_tpu.metrics().
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_tpu

pytestmark = pytest.mark.skipif(not torch.tpu.is_available(), reason="no tpu device")
ROOT = Path(__file__).resolve().parents[1]


def _to(x, device):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    return x


def strict_and_fused(fn, *args):
    """fn on tpu copies of args, strict eager then fused eager; both results as CPU tensors."""
    strict = _to(fn(*_to(args, "tpu")), "cpu")
    with torch_tpu.fused_eager():
        fused = _to(fn(*_to(args, "tpu")), "cpu")
    return strict, fused


def assert_identical(a, b):
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_identical(x, y)
        return
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a, b) or (a.isnan() == b.isnan()).all() and torch.equal(a.nan_to_num(), b.nan_to_num()), (a, b)


def trace_counters():
    m = torch_tpu.metrics()
    return {k: m[k] for k in ("trace_flushes", "traced_ops", "trace_cache_hits", "trace_cache_misses",
                              "trace_fallbacks")}


@pytest.fixture(autouse=True)
def _strict_after():
    yield
    torch_tpu.set_fused_eager(False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_elementwise_chain(dtype):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(37, 53, generator=g).to(dtype)
    b = torch.randn(53, 37, generator=g).to(dtype).t()  # non-contiguous

    def fn(x, y):
        z = x * 2.5 + y
        w = torch.relu(z) - y.sin() * x.exp().clamp(max=3)
        w.mul_(0.5).add_(x)  # in place on a pending value
        return [w, (w / 3).tanh(), w.sum(1), torch.where(w > 0, x, y)]

    strict, fused = strict_and_fused(fn, a, b)
    assert_identical(strict, fused)
    expect = fn(a.float(), b.float())
    tol = {} if dtype == torch.float32 else dict(rtol=3e-2, atol=3e-2)
    for s, e in zip(fused, expect):
        torch.testing.assert_close(s.float(), e.float(), **tol)


def test_views_of_pending_values_stay_in_one_trace():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 9, 24, generator=g)
    w = torch.randn(24, 72, generator=g)

    def fn(x, w):
        qkv = x @ w                                 # [4, 9, 72]
        q, k, v = qkv.split(24, dim=2)              # slices of a pending value
        q = q.view(4, 9, 3, 8).transpose(1, 2)      # reshape + transpose views
        k = k.reshape(4, 9, 3, 8).permute(0, 2, 3, 1)
        att = (q @ k).softmax(-1)                   # [4, 3, 9, 9]
        v = v.view(4, 9, 3, 8).transpose(1, 2)
        y = (att @ v).transpose(1, 2).contiguous().view(4, 9, 24)
        return [y + x[:, :1, :].expand(4, 9, 24), qkv[1, 2], y[..., 5]]

    torch_tpu.reset_metrics()
    strict, fused = strict_and_fused(fn, x, w)
    assert_identical(strict, fused)
    for s, e in zip(fused, fn(x, w)):  # two chained matmuls + softmax: CPU kernels contract with FMA
        torch.testing.assert_close(s, e, rtol=1e-4, atol=1e-4)
    c = trace_counters()
    # every op of the fused run was recorded; the views did not force flushes before the .cpu() copies
    assert c["traced_ops"] >= 10 and c["trace_flushes"] <= 2, c


def test_freed_buffers_reused_inside_a_trace():
    x0 = torch.randn(1000)

    def fn(x):
        for i in range(30):  # each old x is freed and its block reused by a later op of the same trace
            y = x * (1.0 + i / 100)
            x = (y + 0.25).sin()
        return x

    strict, fused = strict_and_fused(fn, x0)
    assert_identical(strict, fused)
    torch.testing.assert_close(fused, fn(x0))


@pytest.mark.parametrize("transposed", [False, True])
def test_large_reduction_of_an_intermediate(transposed):
    # > 4 MiB: the host driver would evaluate a fused producer block by block inside the reduce
    x = torch.randn(1500, 1100, generator=torch.Generator().manual_seed(3))

    def fn(x):
        if transposed:
            x = x.t()
        return [(x * 1.5 + x.sin()).sum(0), (x * x).sum(1), (x - 1).mean()]

    strict, fused = strict_and_fused(fn, x)
    assert_identical(strict, fused)
    for s, e in zip(fused, fn(x)):
        torch.testing.assert_close(s, e, rtol=1e-4, atol=1e-3)


def test_dropout_and_rng_streams_match_strict():
    x = torch.randn(64, 33)

    def fn(x):
        torch.manual_seed(123)
        a = torch.nn.functional.dropout(x, 0.3, training=True)
        b = torch.rand(17, device=x.device)
        c = torch.nn.functional.dropout(a * 2, 0.5, training=True)
        return [a, b, c, torch.randn(5, device=x.device)]

    strict, fused = strict_and_fused(fn, x)
    assert_identical(strict, fused)


def test_training_steps_identical():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 31), torch.nn.GELU(), torch.nn.LayerNorm(31),
                                torch.nn.Dropout(0.1), torch.nn.Linear(31, 7))
    data = torch.randn(16, 20), torch.randint(0, 7, (16,))

    def train(opt_cls):
        m = copy.deepcopy(model).to("tpu")
        opt = opt_cls(m.parameters(), lr=0.05)
        torch.manual_seed(7)
        losses = []
        x, y = _to(data, "tpu")
        for _ in range(4):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        return [torch.stack(losses)] + [p.detach() for p in m.parameters()]

    for opt_cls in (torch.optim.SGD, torch.optim.AdamW):
        strict = _to(train(opt_cls), "cpu")
        with torch_tpu.fused_eager():
            fused = _to(train(opt_cls), "cpu")
        assert_identical(strict, fused)


def test_flush_points_and_trace_cache():
    x = torch.randn(300).to("tpu")
    torch_tpu.set_fused_eager(True)
    torch_tpu.reset_metrics()
    y = (x * 3).sin() + 1
    assert trace_counters()["trace_flushes"] == 0  # recorded, not run yet
    v = y.sum().item()                              # .item() flushes
    c = trace_counters()
    assert c["trace_flushes"] == 1 and c["traced_ops"] >= 4
    torch.testing.assert_close(v, ((x.cpu() * 3).sin() + 1).sum().item())
    # the same trace again: the fused executable comes from the cache
    y = (x * 3).sin() + 1
    assert y.sum().item() == v
    c2 = trace_counters()
    assert c2["trace_cache_hits"] >= 1 and c2["trace_fallbacks"] == 0
    # other flush points: synchronize, data-dependent ops, repr, copies to the host, switching off
    z = x * 2
    torch.tpu.synchronize()
    assert trace_counters()["trace_flushes"] == c2["trace_flushes"] + 1
    n = torch.nonzero(x > 0)
    assert n.shape[0] == int((x.cpu() > 0).sum())
    assert "tensor(" in repr(z[:3] + 1)
    w = z + 1
    torch_tpu.set_fused_eager(False)
    assert torch.equal(w.cpu(), x.cpu() * 2 + 1)
    assert not torch_tpu.fused_eager_enabled()


def test_argument_errors_stay_synchronous():
    a = torch.randn(3, 4, device="tpu")
    b = torch.randn(5, device="tpu")
    with torch_tpu.fused_eager():
        c = a + 1
        with pytest.raises(RuntimeError, match="size of tensor a"):
            a + b
        assert torch.equal(c.cpu(), a.cpu() + 1)  # the recorded work is not lost


def test_runtime_errors_name_the_fused_graph():
    x = torch.randn(10, 4, device="tpu")
    idx = torch.tensor([0, 3, 11], device="tpu")
    with torch_tpu.fused_eager():
        y = x * 2
        z = torch.index_select(y, 0, idx)
        with pytest.raises((RuntimeError, IndexError), match=r"fused graph \(.*index_select"):
            torch.tpu.synchronize()
        del z
    ok = torch.index_select(x, 0, idx[:2]).cpu()
    assert torch.equal(ok, x.cpu()[[0, 3]])


def test_context_manager_restores_previous_setting():
    assert not torch_tpu.fused_eager_enabled()
    with torch_tpu.fused_eager():
        assert torch_tpu.fused_eager_enabled()
        with torch_tpu.fused_eager(False):
            assert not torch_tpu.fused_eager_enabled()
        assert torch_tpu.fused_eager_enabled()
    assert not torch_tpu.fused_eager_enabled()


def test_environment_variable():
    code = ("import torch, torch_tpu; x = torch.arange(6.0, device='tpu'); y = (x * 2).sum().item(); "
            "print(torch_tpu.fused_eager_enabled(), y, torch_tpu.metrics()['trace_flushes'])")
    env = dict(os.environ, TORCH_TPU_FUSED_EAGER="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "30.0", "1"]
    env["TORCH_TPU_FUSED_EAGER"] = "yes"
    bad = subprocess.run([sys.executable, "-c", "import torch_tpu"], env=env, capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert bad.returncode != 0 and "TORCH_TPU_FUSED_EAGER" in bad.stderr


def test_trace_profile_alternates_fused_and_op_by_op(tmp_path):
    """TORCH_TPU_TRACE_PROFILE: after two warm-up runs a repeated trace runs fused and op by op in turn (same
    results every run), and the file written at exit counts the runs of each side (timings not checked)."""
    prof = tmp_path / "profile.txt"
    code = ("import torch, torch_tpu\n"
            "torch.manual_seed(0); x = torch.randn(37, 5); w = torch.randn(5)\n"
            "ref = torch.softmax(torch.relu(x * w + 1) * 2, 1).sum(0)\n"
            "xt, wt = x.to('tpu'), w.to('tpu')\n"
            "torch_tpu.set_fused_eager(True)\n"
            "outs = [torch.softmax(torch.relu(xt * wt + 1) * 2, 1).sum(0).cpu() for _ in range(8)]\n"
            "assert all(torch.equal(o, outs[0]) for o in outs)\n"
            "assert torch.allclose(outs[0], ref, rtol=1e-5, atol=1e-6)\n"
            "m = torch_tpu.metrics(); print(m['trace_flushes'], m['trace_fallbacks'])\n")
    env = dict(os.environ, TORCH_TPU_TRACE_PROFILE=str(prof))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["8", "0"]  # op-by-op profile runs are not counted as fallbacks
    lines = [ln for ln in prof.read_text().splitlines() if not ln.startswith("#")]
    assert len(lines) == 1, lines
    fields = lines[0].split(" ", 5)
    assert (fields[0], fields[2]) == ("3", "3") and "fused graph (" in fields[5] and "_softmax" in fields[5]


@pytest.mark.parametrize("name", ["mingpt", "llama"])
def test_examples_bit_identical(name):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import common  # examples/common.py
        example = common.import_example(name)
    finally:
        sys.path.pop(0)
    kw = dict(steps=4, tiny=True, seed=0, log=None)
    strict = example.train("tpu", **kw)
    torch_tpu.reset_metrics()
    with torch_tpu.fused_eager():
        fused = example.train("tpu", **kw)
    assert strict == fused  # every step's loss, bit for bit
    c = trace_counters()
    assert c["trace_fallbacks"] == 0 and c["traced_ops"] > 20 * c["trace_flushes"], c


def test_writes_into_slices_of_pending_values_stay_in_one_trace():
    x0 = torch.randn(9, 14, generator=torch.Generator().manual_seed(4))

    def fn(x):
        y = x * 2 - 1
        out = torch.zeros(9, 30, device=x.device)  # pending (a factory op); an unwritten torch.empty buffer
        # is external: writes into interleaved slices of it still flush (docs/execution_modes.md)
        torch.cat([y, x.exp()[:, :2]], dim=1, out=out[:, 3:19])   # cat into a slice of a buffer
        out[:, :3] = 0.5
        out[:, 19:] = y[:, :11].t().contiguous().t()
        out[:, 5:9] += y[:, :4]                                    # in place into a column block
        return [out, out.sum(1), out[:, 3:19] * x.sum()]

    torch_tpu.reset_metrics()
    strict, fused = strict_and_fused(fn, x0)
    assert_identical(strict, fused)
    for s, e in zip(fused, fn(x0)):
        torch.testing.assert_close(s, e, rtol=1e-5, atol=1e-5)
    assert trace_counters()["trace_flushes"] == 1  # the writes into slices did not flush


def test_freed_non_contiguous_results_read_by_reductions():
    # y has transposed strides (elementwise outputs follow their input's layout) and a reduction reads it:
    # it is written in its own layout even after it is freed, and the next iteration's y reusing its
    # block neither flushes nor changes a bit
    x0 = torch.randn(300, 200, generator=torch.Generator().manual_seed(6))

    def fn(x):
        sums = []
        for i in range(4):
            y = x.t() * (1.0 + i / 7)
            sums.append(y.sum(1))
            del y
        return sums

    torch_tpu.reset_metrics()
    strict, fused = strict_and_fused(fn, x0)
    assert_identical(strict, fused)
    for s, e in zip(fused, fn(x0)):
        torch.testing.assert_close(s, e, rtol=1e-5, atol=1e-4)
    assert trace_counters()["trace_flushes"] == 1


def test_long_trace_runs_in_64_op_pieces():
    """A trace runs once it holds 64 ops (the device starts while the host records the rest): 200 recorded
    elementwise ops flush 3 times before any sync, the 4th flush comes with the result; same values as strict
    eager and close to CPU."""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(29, 31, generator=g)

    def fn(x):
        for i in range(100):  # 2 ops each: mul, add
            x = x * 0.999 + (i % 7) * 1e-3
        return x

    strict = fn(a.to("tpu")).cpu()
    x = a.to("tpu")
    torch.tpu.synchronize()
    torch_tpu.set_fused_eager(True)
    torch_tpu.reset_metrics()
    y = fn(x)
    c = trace_counters()
    assert c["traced_ops"] >= 192 and c["trace_flushes"] == 3, c  # 3 full traces of 64, the rest pending
    fused = y.cpu()
    c = trace_counters()
    assert c["trace_flushes"] == 4 and c["traced_ops"] == 200 and c["trace_fallbacks"] == 0, c
    assert_identical(strict, fused)
    torch.testing.assert_close(fused, fn(a))
