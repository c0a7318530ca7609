"""torch.compile(backend="tpu"): compiled vs eager on tpu (outputs, gradients, mutated state) and vs PyTorch CPU.

- the backend is registered by `import torch` (entry point) and listed by Dynamo;
- op-level graphs (odd sizes, non-contiguous, bf16, in-place on inputs): compiled == eager tpu bit for bit (the
  graph calls the same ATen ops, hence the same lowerings), and close to PyTorch CPU;
- every example model (examples/<name>/, reduced configs as in tests/compile_models.py): forward, loss, gradients
  and buffers of the compiled model == eager tpu, loss close to CPU; the same under bf16 autocast (two models);
- mutations: BatchNorm running statistics (train mode, and under no_grad), in-place ops on graph inputs, optimizer
  steps compiled with torch.compile (SGD with momentum, AdamW);
- unsupported ops: strict mode raises naming the node and the op; otherwise a warning names it and the op runs
  eagerly;
- dynamic shapes: dynamic=True gives 0 recompiles for new batch / sequence lengths; with automatic dynamic shapes
  one recompile, then none;
- recompile diagnostics: each recompile records which input changed, in torch_tpu.metrics() and
  torch_tpu.recompile_reasons();
- graph capture (when the runtime has it): later calls replay the captured graph, with results equal to eager.
"""
from __future__ import annotations

import contextlib
import copy
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounterWithBackend

import compile_models  # tests/compile_models.py
import torch_tpu
from torch_tpu import _compile

pytestmark = pytest.mark.skipif(not torch.tpu.is_available(), reason="no tpu device")

EXACT = dict(rtol=0, atol=0, equal_nan=True)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(_cpu(v) for v in x)
    return x


def _leaves(args, device, grad):
    """Copies of the CPU args on `device`; floating tensors that `grad` selects become leaves requiring grad."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            t = a.to(device)
            if grad and t.is_floating_point():
                t = t.detach().requires_grad_(True)
            out.append(t)
        else:
            out.append(a)
    return out


def _flat(out):
    return [o for o in (out if isinstance(out, (list, tuple)) else [out]) if isinstance(o, torch.Tensor)]


def _run(fn, args, device, grad, compile_backend=None):
    """(outputs, input gradients) of fn on copies of args; with a backend, through torch.compile."""
    leaves = _leaves(args, device, grad)
    f = torch.compile(fn, backend=compile_backend) if compile_backend else fn
    out = f(*leaves)
    grads = []
    if grad:
        total = sum(o.float().sum() for o in _flat(out) if o.requires_grad)
        total.backward()
        grads = [t.grad for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]
    return _cpu(out), _cpu(grads), _cpu(leaves)


# ----------------------------------------------------------------------------------------------- registration

def test_backend_registered_and_listed() -> None:
    assert "tpu" in torch._dynamo.list_backends()
    assert torch._dynamo.lookup_backend("tpu") is _compile.tpu_backend


def test_backend_usable_right_after_import_torch() -> None:
    code = ("import torch\n"
            "f = torch.compile(lambda x: x * 2 + 1, backend='tpu')\n"
            "print(f(torch.arange(3.0, device='tpu')).cpu().tolist())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[1.0, 3.0, 5.0]"


def test_unknown_option_raises() -> None:
    f = torch.compile(lambda x: x + 1, backend="tpu", options={"fast": True})
    with pytest.raises(Exception, match="unknown option"):
        f(torch.ones(3, device="tpu"))


# ----------------------------------------------------------------------------------------------- op-level graphs

@contextlib.contextmanager
def _compiled_graphs():
    """Collects every CompiledGraph the tpu backend builds inside the block."""
    graphs = []
    orig = _compile.CompiledGraph.__init__

    def spy(self, gm, kind, opts):
        orig(self, gm, kind, opts)
        graphs.append(self)

    _compile.CompiledGraph.__init__ = spy
    try:
        yield graphs
    finally:
        _compile.CompiledGraph.__init__ = orig


def _g(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g).to(dtype)


def _conv_bn(x, w, gamma, beta):
    y = F.conv2d(x, w, padding=1, stride=2)
    y = F.batch_norm(y, None, None, gamma, beta, training=True)
    return F.max_pool2d(F.relu(y), 2)


OP_GRAPHS = {
    # name: (fn, CPU args, gradients?)
    "elementwise_chain": (lambda x, y: torch.sigmoid(x * y + 0.5).tanh() - x.exp() / (1 + y.abs()),
                          (_g(5, 7), _g(5, 7, seed=1)), True),
    "linear_gelu_layernorm": (lambda x, w, b: F.layer_norm(F.gelu(F.linear(x, w, b)), (9,)),
                              (_g(6, 13), _g(9, 13), _g(9)), True),
    "softmax_logsoftmax": (lambda x: x.softmax(-1) * x.log_softmax(0), (_g(7, 11),), True),
    "reductions": (lambda x: (x.sum(0), x.mean(1, keepdim=True), x.amax(1), x.var(0), x.norm()), (_g(9, 5),), True),
    "noncontiguous_views_cat": (lambda x, y: torch.cat([x.t(), y[:, 1:4].t() * 2], 0)[::2] + 1,
                                (_g(7, 5), _g(7, 9)), True),
    "matmul_bmm_broadcast": (lambda a, b, c: (a @ b).relu() @ c.transpose(-1, -2), (_g(3, 5, 7), _g(7, 6), _g(3, 4, 6)),
                             True),
    "index_gather_scatter": (lambda x, i: x[i].sum(0) + x.gather(0, i[:, None].expand(-1, 6)).mean(0),
                             (_g(8, 6), torch.tensor([3, 0, 7, 3, 5])), True),
    "conv_batchnorm_pool": (_conv_bn, (_g(2, 3, 11, 9), _g(4, 3, 3, 3), _g(4), _g(4)), True),
    "attention_causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                         (_g(2, 3, 7, 8), _g(2, 3, 7, 8), _g(2, 3, 7, 8)), True),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t), (_g(6, 5), torch.tensor([0, 4, 2, 2, 1, 3])), True),
    "bfloat16_linear_silu": (lambda x, w: F.silu(x @ w.t()).float().sum(-1),
                             (_g(5, 12, dtype=torch.bfloat16), _g(7, 12, dtype=torch.bfloat16)), True),
    "half_softmax": (lambda x: (x * 0.3).softmax(-1), (_g(4, 10, dtype=torch.float16),), False),
    "integer_and_compare": (lambda a, b: ((a * 3 + b) % 7, (a > b).sum(), torch.where(a > 0, a, -b)),
                            (torch.arange(-6, 9), torch.arange(15) % 4), False),
    "interpolate_nearest_bilinear": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest")[..., :7, :7]
                                     + F.interpolate(x, size=(7, 7), mode="bilinear", align_corners=False),
                                     (_g(2, 3, 5, 4),), True),
}


@pytest.mark.parametrize("name", list(OP_GRAPHS))
def test_op_graph_compiled_matches_eager_and_cpu(name: str) -> None:
    fn, args, grad = OP_GRAPHS[name]
    eager = _run(fn, args, "tpu", grad)
    for _ in range(2):  # the second call replays the captured graphs where the runtime could capture them
        compiled = _run(fn, args, "tpu", grad, compile_backend="tpu")
        torch.testing.assert_close(compiled[0], eager[0], **EXACT)
        torch.testing.assert_close(compiled[1], eager[1], **EXACT)
    cpu = _run(fn, args, "cpu", grad)
    low = any(a.dtype in (torch.bfloat16, torch.float16) for a in args if isinstance(a, torch.Tensor))
    tol = dict(rtol=2e-2, atol=2e-2) if low else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(compiled[0], cpu[0], **tol)
    torch.testing.assert_close(compiled[1], cpu[1], **tol)


def test_inplace_on_graph_inputs_is_applied() -> None:
    def f(x, y):
        x.mul_(2).add_(y)
        y[1:3] = 0.5
        return (x * y).sum()

    args = (_g(4, 5), _g(4, 5, seed=3))
    eager = _run(f, args, "tpu", False)
    compiled = _run(f, args, "tpu", False, compile_backend="tpu")
    cpu = _run(f, args, "cpu", False)
    torch.testing.assert_close(compiled[0], eager[0], **EXACT)
    torch.testing.assert_close(compiled[2], eager[2], **EXACT)  # the mutated inputs
    torch.testing.assert_close(compiled[2], cpu[2], rtol=1e-5, atol=1e-6)


# Input mutations the re-inplacing pass (_compile._reinplace) must keep exact: reads of the old value after an
# update, chains of updates, updates through views, an update whose result is also returned, a mutated input that
# is read again after it is overwritten, foreach updates.
MUTATIONS = {
    "read_after_update": lambda x, y: (x.mul_(2), y.add_(x), (x + y).sum())[-1],
    "chain_then_read": lambda x, y: (x.mul_(0.5).add_(y).sub_(1.0), x * y)[-1],
    "old_value_saved_before": lambda x, y: (x.clone(), x.mul_(3))[0] + x,
    "view_of_input_read_later": lambda x, y: (x.t(), x.add_(y))[0].sum(0),
    "update_through_slice": lambda x, y: (x[1:3].mul_(2), x.add_(1), x.sum())[-1],
    "result_returned": lambda x, y: x.mul_(y),
    "foreach_lists": lambda x, y: (torch._foreach_mul_([x, y], 0.5), torch._foreach_add_([x, y], [y.sin(), x.cos()]),
                                   x.sum() + y.sum())[-1],
    "expand_broadcast_operand": lambda x, y: x.add_(y[0]).exp_().sum(),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_input_mutations_reinplaced_exactly(name: str) -> None:
    """Compiled == eager bit for bit (outputs and the mutated inputs, over two calls): captured and replayed (the
    functional graph), and op by op with and without re-inplacing."""
    fn = MUTATIONS[name]
    args = (_g(4, 5), _g(4, 5, seed=3))
    eager = _run(fn, args, "tpu", False)
    for options in ({}, {"capture": False}, {"capture": False, "reinplace": False}):
        torch._dynamo.reset()
        f = torch.compile(fn, backend="tpu", options=options)
        for _ in range(2):
            leaves = _leaves(args, "tpu", False)
            out = f(*leaves)
            torch.testing.assert_close(_cpu(out), eager[0], **EXACT)
            torch.testing.assert_close(_cpu(leaves), eager[2], **EXACT)


def test_reinplace_removes_optimizer_copies() -> None:
    """Run op by op, the compiled AdamW / SGD step writes parameters and state in place (no copy_ back into its
    inputs), with results bit-identical to the same step without re-inplacing and to the captured step."""
    torch.manual_seed(3)
    base = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3))
    xs = [_g(6, 12, seed=s).to("tpu") for s in range(3)]

    def train(make_opt, options):
        torch._dynamo.reset()
        model = copy.deepcopy(base).to("tpu")
        opt = make_opt(model.parameters())

        def backend(gm, example_inputs):
            return _compile.tpu_backend(gm, example_inputs, options=options)

        step = torch.compile(opt.step, backend=backend)
        with _compiled_graphs() as graphs:
            _train(model, opt, step, xs)
        copies = sum(1 for g in graphs for n in (g.gm_inplace or g.gm).graph.nodes
                     if n.target is torch.ops.aten.copy_.default)
        state = [v.cpu() for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
        return [p.detach().cpu() for p in model.parameters()] + state, copies, sum(g.reinplaced for g in graphs)

    for make_opt in (lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.01, capturable=True),
                     lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-4)):
        on, copies_on, rewritten = train(make_opt, {"capture": False})
        off, copies_off, _ = train(make_opt, {"capture": False, "reinplace": False})
        captured, _, _ = train(make_opt, {})
        assert copies_off > 0 and copies_on == 0 and rewritten > 0, (copies_on, copies_off, rewritten)
        for a, b, c in zip(on, off, captured):
            torch.testing.assert_close(a, b, **EXACT)
            torch.testing.assert_close(a, c, **EXACT)


def test_reinplaced_copy_made_only_for_op_by_op_runs() -> None:
    """The re-inplaced copy of a graph (_reinplace) is made at its first op-by-op run, never for a graph whose
    calls are all captured (a warm start's compile path skipped copying, rewriting and generating its code)."""
    def update(x, y):
        x.mul_(0.5).add_(y)
        return (x * y).sum()

    for options, expect_copy in (({}, False), ({"capture": False}, True)):
        torch._dynamo.reset()
        with _compiled_graphs() as graphs:
            f = torch.compile(update, backend=lambda gm, ex: _compile.tpu_backend(gm, ex, options=options))
            x, y = _g(4, 5).to("tpu"), _g(4, 5, seed=3).to("tpu")
            assert all(g.gm_inplace is None and g.reinplaced == 0 for g in graphs)
            for _ in range(2):
                f(x, y)
        assert len(graphs) == 1
        made = graphs[0].gm_inplace is not None
        if hasattr(torch_tpu._C, "_capture_begin"):
            assert made == expect_copy and (graphs[0].reinplaced > 0) == expect_copy, (options, graphs[0].reinplaced)
        ref_x = _g(4, 5)
        for _ in range(2):
            ref_x.mul_(0.5).add_(_g(4, 5, seed=3))
        torch.testing.assert_close(x.cpu(), ref_x, **EXACT)


@pytest.mark.skipif(not hasattr(torch_tpu._C, "_capture_begin"), reason="the runtime has no graph capture yet")
def test_capture_walks_the_graph_without_generating_its_code() -> None:
    """A capture runs the FX graph node by node (_NodeWalk: getitem of a multi-output op, a tensor constant read
    with get_attr, values freed after their last use) without generating its Python code; results equal eager's,
    captured and replayed; a graph run op by op runs its generated code."""
    def f(x, w):
        v, i = torch.max(x @ w, dim=1)
        return (v * torch.tensor([0.5, 2.0, -1.0, 3.0, 0.25], device=x.device)).sum() + i.sum()

    x, w = _g(5, 7).to("tpu"), _g(7, 3, seed=2).to("tpu")
    expected = f(x, w).cpu()
    for options, walked in (({}, True), ({"capture": False}, False)):
        torch._dynamo.reset()
        with _compiled_graphs() as graphs:
            c = torch.compile(f, backend=lambda gm, ex: _compile.tpu_backend(gm, ex, options=options))
            with torch.no_grad():
                for _ in range(2):
                    torch.testing.assert_close(c(x, w).cpu(), expected, **EXACT)
        (g,) = graphs
        seg = g._segment
        assert isinstance(seg._walk, _compile._NodeWalk) == walked  # (Dynamo's debug logs may generate it anyway)


def _compiled_step_graphs(name: str, hints: bool) -> tuple[list, list[torch.Tensor]]:
    """An example model's compiled training step (model and AdamW step compiled), two steps: (its CompiledGraphs,
    the loss, parameters and their gradients, and the optimizer state after the steps)."""
    torch._dynamo.reset()
    hints_before = _compile.META_HINTS
    _compile.META_HINTS = hints
    try:
        with _compiled_graphs() as graphs:
            model, inputs, loss_fn = compile_models.build(name)
            model = model.to("tpu")
            x = compile_models.to(inputs, "tpu")
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)
            fwd, step = torch.compile(model, backend="tpu"), torch.compile(opt.step, backend="tpu")
            for _ in range(2):
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(fwd(*x))
                loss.backward()
                step()
    finally:
        _compile.META_HINTS = hints_before
    state = [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
    return graphs, [loss.detach(), *model.parameters(), *(p.grad for p in model.parameters()), *state]


@pytest.mark.skipif(not hasattr(torch_tpu._C, "_meta_hint"), reason="the glue has no meta hints")
@pytest.mark.parametrize("name", [n if n == "mingpt" else pytest.param(n, marks=pytest.mark.slow)
                                  for n in compile_models.EXAMPLES])
def test_meta_hints_are_the_meta_functions_results(name: str) -> None:
    """A capture hands the glue each node's FakeTensor results instead of running the op's meta function again
    (_meta_hint_of): for every hinted node of the model's forward, backward and AdamW graphs, those are exactly what
    the op's Meta kernel gives on tensors of the traced layouts (sizes, strides, dtype). (tests/test_cache.py: the
    same step in a process without hints is bit-identical.)"""
    used = torch_tpu._C._meta_hints_used()
    graphs, _ = _compiled_step_graphs(name, True)
    assert len(graphs) == 3
    assert torch_tpu._C._meta_hints_used() > used, "no capture used a hint"
    checked = 0
    for g in graphs:
        for node in g.gm.graph.nodes:
            h = _compile._meta_hint_of(node)
            if h is None:
                continue

            def meta(a):
                v = a.meta["val"]
                if not isinstance(v, torch.Tensor):
                    return v
                dev = "meta" if v.device.type == "tpu" else v.device
                return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=dev)

            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), meta)
            with torch.no_grad():
                out = node.target(*args, **kwargs)
            outs = out if isinstance(out, (list, tuple)) else [out]
            flat = [t for r in h[1] for t in r]
            got = [t for o in outs for t in (o if isinstance(o, (list, tuple)) else [o])]
            assert len(got) == len(flat), node.format_node()
            for f, t in zip(flat, got):
                assert (tuple(f.shape), tuple(f.stride()), f.dtype) == (tuple(t.shape), tuple(t.stride()), t.dtype), \
                    node.format_node()
            checked += 1
    assert checked > 50, checked


def test_decomposition_table_same_as_from_the_full_core_table() -> None:
    """decompositions() reads PyTorch's explicit core table only (the full one turns every CIA registration into
    an OpOverload: ~0.25 s); the ops and functions must be those the full public table gives."""
    full = {op: fn for op, fn in _compile._core_decompositions(full=True).items()
            if isinstance(op, torch._ops.OpOverload) and not _compile.op_supported(op)}
    table = _compile.decompositions()
    assert set(table) == set(full) and all(table[op] is full[op] for op in full)
    assert table, "no decompositions at all: the filter is broken"


# ----------------------------------------------------------------------------------------------- example models

def _example_gate(name: str) -> None:
    model, inputs, loss = compile_models.build(name)
    try:
        loss(model.to("tpu")(*compile_models.to(inputs, "tpu"))).backward()
    except NotImplementedError as exc:
        pytest.skip(f"{name} does not run on tpu eagerly yet: {exc}")


@pytest.mark.slow
@pytest.mark.parametrize("name", compile_models.EXAMPLES)
def test_example_model_compiled_matches_eager(name: str) -> None:
    _example_gate(name)
    model, inputs, loss = compile_models.build(name)
    eager = model.to("tpu")
    compiled_model = copy.deepcopy(eager)  # keeps tied weights tied
    compiled = torch.compile(compiled_model, backend="tpu")
    cpu_model, _, cpu_loss_fn = compile_models.build(name)
    x = compile_models.to(inputs, "tpu")
    torch_tpu.reset_metrics()
    for _ in range(2):  # the second call runs the already compiled (or captured) graphs
        for m in (eager, compiled_model, cpu_model):
            m.zero_grad(set_to_none=True)
        out_c = compiled(*x)
        loss_c = loss(out_c)
        loss_c.backward()
        out_e = eager(*x)
        loss_e = loss(out_e)
        loss_e.backward()
        torch.testing.assert_close(out_c.cpu(), out_e.cpu(), **EXACT)
        torch.testing.assert_close(loss_c.cpu(), loss_e.cpu(), **EXACT)
        for (pname, pc), pe in zip(compiled_model.named_parameters(), eager.parameters()):
            assert (pc.grad is None) == (pe.grad is None), pname
            if pc.grad is not None:
                torch.testing.assert_close(pc.grad.cpu(), pe.grad.cpu(), **EXACT, msg=lambda m: f"{pname}: {m}")
        for (bname, bc), be in zip(compiled_model.named_buffers(), eager.buffers()):
            torch.testing.assert_close(bc.cpu(), be.cpu(), **EXACT, msg=lambda m: f"{bname}: {m}")
        loss_cpu = cpu_loss_fn(cpu_model(*inputs))
        torch.testing.assert_close(loss_c.cpu(), loss_cpu.detach(), rtol=1e-3, atol=0)
    assert torch_tpu.metrics()["compile_unsupported_ops"] == {}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mingpt", "resnet"])
def test_example_model_autocast_bf16_compiled_matches_eager(name: str) -> None:
    _example_gate(name)
    model, inputs, loss = compile_models.build(name)
    eager = model.to("tpu")
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, backend="tpu")
    x = compile_models.to(inputs, "tpu")
    for _ in range(2):
        for m in (eager, compiled_model):
            m.zero_grad(set_to_none=True)
        with torch.autocast("tpu", dtype=torch.bfloat16):
            out_c = compiled(*x)
            loss_c = loss(out_c.float())
        loss_c.backward()
        with torch.autocast("tpu", dtype=torch.bfloat16):
            out_e = eager(*x)
            loss_e = loss(out_e.float())
        loss_e.backward()
        assert out_c.dtype == out_e.dtype == torch.bfloat16
        torch.testing.assert_close(out_c.cpu(), out_e.cpu(), **EXACT)
        for (pname, pc), pe in zip(compiled_model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(pc.grad.cpu(), pe.grad.cpu(), **EXACT, msg=lambda m: f"{pname}: {m}")


# ----------------------------------------------------------------------------------------------- mutations

def _bn_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 6, 3, bias=False), nn.BatchNorm2d(6), nn.ReLU(), nn.Flatten(),
                         nn.Linear(6 * 5 * 5, 4, bias=False), nn.BatchNorm1d(4))


def test_batchnorm_running_stats_train_eval_and_no_grad() -> None:
    eager = _bn_net().to("tpu")
    mod = copy.deepcopy(eager)
    compiled = torch.compile(mod, backend="tpu")
    xs = [_g(5, 3, 7, 7, seed=s).to("tpu") for s in range(3)]
    for x in xs:  # train mode, with gradients
        compiled(x).square().mean().backward()
        eager(x).square().mean().backward()
    with torch.no_grad():  # train mode without gradients: the inference graph updates the stats in place
        compiled(xs[0])
        eager(xs[0])
    for (name, bc), be in zip(mod.named_buffers(), eager.buffers()):
        torch.testing.assert_close(bc.cpu(), be.cpu(), **EXACT, msg=lambda m: f"{name}: {m}")
    assert int(mod[1].num_batches_tracked) == 4
    mod.eval()
    eager.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled(xs[1]).cpu(), eager(xs[1]).cpu(), **EXACT)
    for (name, pc), pe in zip(mod.named_parameters(), eager.parameters()):
        torch.testing.assert_close(pc.grad.cpu(), pe.grad.cpu(), **EXACT, msg=lambda m: f"{name}: {m}")


def _train(model: nn.Module, opt: torch.optim.Optimizer, step, xs) -> None:
    for x in xs:
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        step()


def test_optimizer_step_compiled_sgd_momentum_bit_identical() -> None:
    eager = _bn_net().to("tpu")
    mod = copy.deepcopy(eager)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    opt_c = torch.optim.SGD(mod.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    xs = [_g(5, 3, 7, 7, seed=s).to("tpu") for s in range(4)]
    _train(eager, opt_e, opt_e.step, xs)
    _train(torch.compile(mod, backend="tpu"), opt_c, torch.compile(opt_c.step, backend="tpu"), xs)
    for (name, pc), pe in zip(mod.named_parameters(), eager.parameters()):
        torch.testing.assert_close(pc.cpu(), pe.cpu(), **EXACT, msg=lambda m: f"{name}: {m}")
        torch.testing.assert_close(opt_c.state[pc]["momentum_buffer"].cpu(), opt_e.state[pe]["momentum_buffer"].cpu(),
                                   **EXACT)
    for bc, be in zip(mod.buffers(), eager.buffers()):
        torch.testing.assert_close(bc.cpu(), be.cpu(), **EXACT)


def test_optimizer_step_compiled_adamw() -> None:
    """AdamW under torch.compile keeps its step count as a float32 tensor (torch.optim's _get_value returns the
    tensor while compiling), so the bias corrections are computed in float32 rather than in Python float64: the
    compiled step differs from eager by rounding, exactly as it does on the CPU (checked below with aot_eager)."""
    torch.manual_seed(1)
    base = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3))
    xs = [_g(6, 12, seed=s) for s in range(5)]

    def train(device: str, backend: str | None) -> list[torch.Tensor]:
        torch._dynamo.reset()
        model = copy.deepcopy(base).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
        fwd = torch.compile(model, backend=backend) if backend else model
        step = torch.compile(opt.step, backend=backend) if backend else opt.step
        _train(fwd, opt, step, [x.to(device) for x in xs])
        return [p.detach().cpu() for p in model.parameters()]

    eager_tpu, compiled_tpu = train("tpu", None), train("tpu", "tpu")
    eager_cpu, compiled_cpu = train("cpu", None), train("cpu", "aot_eager")
    for ct, et, cc, ec in zip(compiled_tpu, eager_tpu, compiled_cpu, eager_cpu):
        torch.testing.assert_close(ct, et, rtol=0, atol=1e-6)
        torch.testing.assert_close(cc, ec, rtol=0, atol=1e-6)  # PyTorch's own compiled optimizer, same size
        torch.testing.assert_close(ct, cc, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_addcmul_addcdiv_with_value_bit_identical(dtype) -> None:
    """Dynamo traces t.addcmul_(a, b, value=v) as prims.fma(a * b, v, t) (and addcdiv_ with a / b); the backend turns
    the pair back into the op eager mode runs (_undo_dynamo_fma), so compiled results keep eager's bits (they
    differed by an ulp in ~20% of the elements): plain tensors and slices, where the update lands in a view."""
    def f(x, y, z):
        x = x.clone()
        x.addcmul_(y, z, value=0.5)
        x[:, 1:].addcdiv_(y[:, :-1], z[:, 1:].abs() + 1, value=-0.25)
        x[1:].addcmul_(x[:-1].clone(), z[1:], value=3)
        return x

    x, y, z = (_g(16, 19, seed=s).to(dtype) for s in (1, 2, 3))
    eager = f(x.to("tpu"), y.to("tpu"), z.to("tpu")).cpu()
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="tpu")(x.to("tpu"), y.to("tpu"), z.to("tpu")).cpu()
    torch.testing.assert_close(compiled, eager, **EXACT)
    if dtype == torch.float32:
        torch.testing.assert_close(eager, f(x, y, z), **EXACT)  # and CPU's


def test_optimizer_step_compiled_rmsprop_single_tensor_bit_identical() -> None:
    """torch.optim's single-tensor RMSprop (square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)): compiled
    steps equal eager's bit for bit (through _undo_dynamo_fma)."""
    def run(compiled: bool) -> tuple[torch.Tensor, torch.Tensor]:
        torch._dynamo.reset()
        p = nn.Parameter(_g(37, 23, seed=4).to("tpu"))
        opt = torch.optim.RMSprop([p], lr=0.01, momentum=0.9, foreach=False)
        step = torch.compile(opt.step, backend="tpu") if compiled else opt.step
        for s in range(3):
            p.grad = _g(37, 23, seed=10 + s).to("tpu")
            step()
        return p.detach().cpu(), opt.state[p]["square_avg"].cpu()

    for c, e in zip(run(True), run(False)):
        torch.testing.assert_close(c, e, **EXACT)


# ----------------------------------------------------------------------------------------------- unsupported ops

_CANDIDATES = ("special_airy_ai", "special_bessel_j0", "special_spherical_bessel_j0", "special_scaled_modified_bessel_k1")


def _unsupported_unary():
    """A unary op the tpu device has no lowering (nor core decomposition) for, or skip."""
    for name in _CANDIDATES:
        op = getattr(torch.ops.aten, name).default
        if not _compile.op_supported(op) and op not in _compile.decompositions():
            return op
    pytest.skip(f"every candidate op is lowered now: {_CANDIDATES}")


def test_strict_mode_raises_naming_node_and_op() -> None:
    op = _unsupported_unary()
    f = torch.compile(lambda x: op(x.sin()) + 1, backend="tpu", options={"strict": True})
    with pytest.raises(Exception) as info:
        f(torch.rand(5, device="tpu"))
    chain, exc = [], info.value
    while exc is not None:  # Dynamo wraps backend errors in BackendCompilerFailed(inner_exception=...)
        chain.append(exc)
        exc = exc.__cause__ or getattr(exc, "inner_exception", None)
    nie = [e for e in chain if isinstance(e, NotImplementedError)]
    assert nie, chain
    message = str(nie[0])
    assert _compile._schema_name(op) in message and "node '" in message and "strict" in message


def test_strict_mode_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    op = _unsupported_unary()
    monkeypatch.setenv("TORCH_TPU_COMPILE_STRICT", "1")
    f = torch.compile(lambda x: op(x) * 2, backend="tpu")
    with pytest.raises(Exception, match=_compile._schema_name(op).replace(".", r"\.")):
        f(torch.rand(5, device="tpu"))
    monkeypatch.setenv("TORCH_TPU_COMPILE_STRICT", "yes")
    torch._dynamo.reset()
    with pytest.raises(Exception, match="TORCH_TPU_COMPILE_STRICT"):
        torch.compile(lambda x: x * 2, backend="tpu")(torch.rand(5, device="tpu"))


def test_unsupported_op_warns_and_runs_eagerly(allow_cpu_fallback: None) -> None:
    op = _unsupported_unary()
    _compile._warned_ops.discard(_compile._schema_name(op))

    def f(x):
        return op(x.sin() * 2).cos() + x

    x = torch.rand(6, 5)
    torch_tpu.reset_metrics()
    compiled = torch.compile(f, backend="tpu")
    with pytest.warns(RuntimeWarning, match=_compile._schema_name(op).replace(".", r"\.")):
        got = compiled(x.to("tpu"))
    torch.testing.assert_close(got.cpu(), f(x), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(compiled(x.to("tpu")).cpu(), got.cpu(), **EXACT)
    m = torch_tpu.metrics()
    assert m["compile_unsupported_ops"] == {_compile._schema_name(op): 1}
    if hasattr(torch_tpu._C, "_capture_begin"):  # the graph was split: the supported segments are replayed
        assert m["compile_captures"] == 2 and m["compile_replays"] == 2, m


def test_unsupported_op_without_fallback_raises_when_reached() -> None:
    op = _unsupported_unary()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = torch.compile(lambda x: op(x) + 1, backend="tpu")
        with pytest.raises(NotImplementedError, match=_compile._schema_name(op).split(".")[0]):
            f(torch.rand(4, device="tpu")).cpu()


# ----------------------------------------------------------------------------------------------- dynamic shapes

@pytest.mark.slow
@pytest.mark.parametrize("name,shapes", [
    # (a sequence as long as the causal mask buffer would specialize: `mask[:T]` clamps at T == block)
    ("mingpt", [(4, 12), (3, 12), (5, 9), (2, 7)]),
    ("llama", [(4, 8), (3, 8), (5, 6), (2, 7)]),
    ("resnet", [(4, None), (3, None), (6, None)]),
])
def test_dynamic_true_no_recompile_for_new_batch_or_seq(name: str, shapes) -> None:
    model, _, _ = compile_models.build(name)
    model = model.to("tpu")
    counter = CompileCounterWithBackend("tpu")
    compiled = torch.compile(model, backend=counter, dynamic=True)
    frames = None
    for batch, seq in shapes:
        _, inputs, loss = compile_models.build(name, batch=batch, seq=seq)
        x = compile_models.to(inputs, "tpu")
        out = compiled(*x)
        loss(out).backward()
        torch.testing.assert_close(out.cpu(), model(*x).cpu(), **EXACT)
        if frames is None:
            frames = counter.frame_count
            torch_tpu.reset_metrics()
    assert torch_tpu.metrics()["compile_recompiles"] == 0, torch_tpu.recompile_reasons()
    assert counter.frame_count == frames


def test_automatic_dynamic_recompiles_once() -> None:
    counter = CompileCounterWithBackend("tpu")

    def f(x, w):
        return F.gelu(x @ w).sum(-1)

    compiled = torch.compile(f, backend=counter)
    w = _g(8, 5).to("tpu")
    torch_tpu.reset_metrics()
    for batch in (3, 4, 7, 11):
        x = _g(batch, 8).to("tpu")
        torch.testing.assert_close(compiled(x, w).cpu(), f(x, w).cpu(), **EXACT)
    assert counter.frame_count == 2  # the first change marks the batch dimension dynamic
    assert torch_tpu.metrics()["compile_recompiles"] == 1


# ----------------------------------------------------------------------------------------------- diagnostics

def test_recompile_reason_names_the_changed_size_and_dtype() -> None:
    def scale_sum(x):
        return (x * 2).sum(0)

    f = torch.compile(scale_sum, backend="tpu", dynamic=False)
    f(_g(4, 8).to("tpu"))
    torch_tpu.reset_metrics()
    f(_g(6, 8).to("tpu"))
    m = torch_tpu.metrics()
    assert m["compile_recompiles"] == 1
    (r,) = torch_tpu.recompile_reasons()
    assert "scale_sum" in r["function"]
    assert "size mismatch at index 0" in r["reason"] and "expected 4, actual 6" in r["reason"], r
    assert r["changed"] == ["L['x']: shape [4, 8] -> [6, 8]"]
    assert "L['x']: shape [4, 8] -> [6, 8]" in m["recompile_reasons"][0]
    f(_g(6, 8).to("tpu", torch.float64))
    r = torch_tpu.recompile_reasons()[-1]
    assert r["changed"] == ["L['x']: dtype float32 -> float64"], r
    assert torch_tpu.metrics()["compile_recompiles"] == 2
    f(_g(8, 6).to("tpu").t())  # same shape, transposed strides
    r = torch_tpu.recompile_reasons()[-1]
    assert any("stride [8, 1] -> [1, 6]" in c for c in r["changed"]), r


def test_metrics_count_graphs_and_calls() -> None:
    torch_tpu.reset_metrics()
    f = torch.compile(lambda x: (x.exp() + 1).sum(), backend="tpu")
    x = torch.rand(5, device="tpu", requires_grad=True)
    for _ in range(3):
        f(x).backward()
    m = torch_tpu.metrics()
    assert m["compile_frames"] == 1 and m["compile_graphs"] == 2  # forward + backward
    assert m["compile_calls"] == 6
    assert m["compile_calls"] == m["compile_interpreted_calls"] + m["compile_replays"]
    torch_tpu.reset_metrics()
    assert torch_tpu.metrics()["compile_calls"] == 0


# ----------------------------------------------------------------------------------------------- capture

@pytest.mark.skipif(not hasattr(torch_tpu._C, "_capture_begin"), reason="the runtime has no graph capture yet")
def test_capture_replays_with_new_input_values() -> None:
    def f(x, w, b):
        return F.gelu(x @ w + b).softmax(-1)

    compiled = torch.compile(f, backend="tpu")
    w, b = _g(9, 6).to("tpu"), _g(6).to("tpu")
    torch_tpu.reset_metrics()
    with torch.no_grad():
        for s in range(4):
            x = _g(5, 9, seed=10 + s).to("tpu")
            torch.testing.assert_close(compiled(x, w, b).cpu(), f(x, w, b).cpu(), **EXACT)
    m = torch_tpu.metrics()
    assert m["compile_captures"] == 1 and m["compile_replays"] == 3, m


@pytest.mark.skipif(not hasattr(torch_tpu._C, "_capture_begin"), reason="the runtime has no graph capture yet")
def test_capture_per_size_under_dynamic_shapes() -> None:
    def f(x, w):
        return (x @ w).relu().sum(-1)

    counter = CompileCounterWithBackend("tpu")
    compiled = torch.compile(f, backend=counter, dynamic=True)
    w = _g(9, 6).to("tpu")
    torch_tpu.reset_metrics()
    with torch.no_grad():
        for batch in (5, 7, 5, 7, 3):
            x = _g(batch, 9, seed=batch).to("tpu")
            torch.testing.assert_close(compiled(x, w).cpu(), f(x, w).cpu(), **EXACT)
    m = torch_tpu.metrics()
    assert counter.frame_count == 1 and m["compile_recompiles"] == 0
    assert m["compile_captures"] == 3 and m["compile_replays"] == 2, m  # one capture per concrete size
    # each capture compiled one host executable for its size (the fused trace of the graph) ...
    assert m["trace_cache_misses"] == 3 and m["compile_capture_seconds"] > 0, m
    # ... and a size seen before replays: no Dynamo recompile, no capture, no host compile
    torch_tpu.reset_metrics()
    with torch.no_grad():
        for batch in (7, 3, 5):
            x = _g(batch, 9, seed=batch).to("tpu")
            torch.testing.assert_close(compiled(x, w).cpu(), f(x, w).cpu(), **EXACT)
    m = torch_tpu.metrics()
    assert (m["compile_recompiles"], m["compile_captures"], m["compile_replays"]) == (0, 0, 3), m
    assert m["trace_cache_misses"] == 0 and m["compiles"] == 0, m


@pytest.mark.skipif(not hasattr(torch_tpu._C, "_graph_signature"), reason="extension without _graph_signature")
def test_graph_signature_keys_layout_aliasing_and_values() -> None:
    sig = torch_tpu._C._graph_signature
    x = torch.rand(4, 6, device="tpu")
    same = [sig([torch.rand(4, 6, device="tpu"), 3]), sig([torch.rand(4, 6, device="tpu"), 3])]
    assert same[0] == same[1] and isinstance(same[0], bytes)
    y = torch.rand(4, 6, device="tpu")
    differ = [
        sig([x, y]), sig([x, x]), sig([x, x[1:]]), sig([x, x.t().contiguous().t()]), sig([x, y.to(torch.bfloat16)]),
        sig([x, y[:3]]), sig([x, y.t()]), sig([x, 3]), sig([x, 4]), sig([x, 3.0]), sig([x, True]), sig([x, None]),
        sig([x, -0.0]), sig([x, 0.0]),
    ]
    assert len(set(differ)) == len(differ)
    # storage offsets and requires_grad do not matter to a replay (it binds data pointers), but the distance
    # between two arguments sharing a storage does
    assert sig([x[1:], y]) == sig([y[1:], x]) and sig([x.requires_grad_(), y]) == sig([y, x])
    assert sig([x[:2], x[1:3]]) == sig([x[1:3], x[2:]]) != sig([x[:2], x[2:]])
    assert sig([x, "a string"]) is None and sig([x, 2 ** 70]) is None  # the caller keys these in Python
    with pytest.raises(TypeError):
        sig(3)


@pytest.mark.skipif(not hasattr(torch_tpu._C, "_capture_begin"), reason="the runtime has no graph capture yet")
def test_capture_keyed_by_input_aliasing() -> None:
    """A capture binds inputs by memory range: inputs that share storage at capture time must not replay the
    capture made for separate inputs, nor the other way round."""
    def f(a, b):
        return (a * 2 + b).sum(0)

    compiled = torch.compile(f, backend="tpu")
    base = _g(9, 4).to("tpu")
    torch_tpu.reset_metrics()
    with torch.no_grad():
        for a, b in ((base[:4], base[4:8]), (base[:4], _g(4, 4, seed=2).to("tpu")), (base[1:5], base[5:9]),
                     (_g(4, 4, seed=5).to("tpu"), _g(4, 4, seed=6).to("tpu")),
                     (base[:4], base[2:6]), (base[:4], base[3:7])):  # overlapping, at another distance
            torch.testing.assert_close(compiled(a, b).cpu(), f(a, b).cpu(), **EXACT)
    m = torch_tpu.metrics()
    assert m["compile_captures"] == 4 and m["compile_replays"] == 2, m


@pytest.mark.skipif(not hasattr(torch_tpu._C, "_capture_begin"), reason="the runtime has no graph capture yet")
def test_capture_boxed_call_assembles_outputs_and_clears_the_list() -> None:
    """CaptureHandle.call (torch.compile's replay path): takes the tensors among a boxed argument list (non-tensors
    skipped), clears the list, and returns the outputs as set_plan says (handle outputs in any order, Python values,
    new empty tensors; a list, a tuple or the single value), equal to running the ops eagerly."""
    C = torch_tpu._C

    def ops(x, t, w):  # four outputs, one of them a view of an input
        h = x @ w
        return [(h - t).square().mean(), h.relu(), t.t(), h.sum(0)]

    def batch(seed):
        return _g(7, 5, seed=seed).to("tpu"), _g(7, 3, seed=seed + 50).to("tpu")

    w = _g(5, 3, seed=99).to("tpu")
    x, t = batch(0)
    C._capture_begin(0)
    outs = ops(x, t, w)
    handle, reason = C._capture_end([x, t], outs, [w])
    assert handle is not None, reason
    with pytest.raises(RuntimeError, match="set_plan"):
        handle.call([x, t])
    empty = ((0, 3), (3, 1), torch.bfloat16, torch.device("tpu", 0))
    specs = [("h", 3), ("value", None), ("h", 0), ("value", 7), ("empty", empty), ("h", 1), ("h", 3)]
    for out_type, kind in ((1, list), (2, tuple)):
        handle.set_plan(specs, out_type)
        x2, t2 = batch(3 + out_type)
        args = [x2, 5, t2, None]
        got = handle.call(args)
        assert args == [] and type(got) is kind and len(got) == len(specs)
        want = ops(x2, t2, w)
        assert got[1] is None and got[3] == 7
        assert got[4].shape == (0, 3) and got[4].stride() == (3, 1) and got[4].dtype == torch.bfloat16
        assert got[4].device.type == "tpu"
        for i, k in ((0, 3), (2, 0), (5, 1), (6, 3)):
            assert torch.equal(got[i].cpu(), want[k].cpu())
    handle.set_plan([("h", 2)], 0)
    x2, t2 = batch(9)
    got = handle.call([x2, t2])
    assert isinstance(got, torch.Tensor) and torch.equal(got.cpu(), ops(x2, t2, w)[2].cpu())
    handle.set_plan(None, 1)  # None: every handle output, in order
    got = handle.call([x2, t2])
    assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(got, ops(x2, t2, w)))
    for bad in (([("h", 4)], 1), ([("x", 0)], 1), ([("h", 0), ("h", 1)], 0), ([("h", 0)], 3)):
        with pytest.raises(RuntimeError):
            handle.set_plan(*bad)
    with pytest.raises(RuntimeError, match="list"):
        handle.call((x2, t2))
