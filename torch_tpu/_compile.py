"""torch.compile(backend="tpu"): Dynamo -> AOTAutograd -> ATen FX graphs run on the same lowerings as eager.

    model = torch.compile(model, backend="tpu")                   # training and inference
    step = torch.compile(opt.step, backend="tpu")                  # optimizer steps compile too
    torch.compile(fn, backend="tpu", options={"strict": True})     # unsupported op -> error at compile time
    torch.compile(fn, backend="tpu", dynamic=True)                 # new batch / sequence length: no recompile
    options={"capture": False} / {"reinplace": False}              # no graph capture / no re-inplacing

How a graph runs. AOTAutograd traces the forward and the backward into ATen FX graphs (functionalized: input
mutations such as BatchNorm running statistics or optimizer state updates become explicit `copy_` nodes at the
end of the graph). No op is decomposed that the tpu device implements, so every node is the ATen op eager mode
would dispatch, and running the graph calls it through the dispatcher on tpu tensors: the same boxed kernel and
the same C lowerings as eager, never a second copy of an op's semantics. Only ops the device does not implement
are decomposed (with PyTorch's core ATen decompositions), which makes compiled mode cover a superset of eager.

Each compiled graph is a `CompiledGraph`. When the runtime provides graph capture (`torch_tpu._C._capture_begin`),
the first call per input signature (torch_tpu._C._graph_signature: tensor layouts, aliasing between inputs, scalar
values) runs the graph op by op while the runtime records its device work, and later calls with that signature
replay it as one executable. A capture that fails is recorded with its reason and the graph keeps running op by op
from its FX graph's generated Python code (values freed after their last use); op by op, a re-inplaced copy of the
graph runs (`_reinplace`: functionalized updates of inputs, e.g. optimizer steps, written in place as eager does).

Unsupported nodes: with strict mode (`options={"strict": True}` or TORCH_TPU_COMPILE_STRICT=1) a node whose op has
no tpu lowering raises NotImplementedError at compile time, naming the node and the op. Otherwise the graph is
split into runs of supported nodes (the units a capture covers) and unsupported nodes, which run eagerly (through
the opt-in CPU fallback if it is enabled, else they raise the usual NotImplementedError when reached); a warning
names each such op once.

Diagnostics: `compile_metrics()` (merged into `torch_tpu.metrics()`) counts frames, graphs and recompiles, and
`recompile_reasons()` says, for every recompile, which function, Dynamo's guard failure and which inputs'
shape / dtype / stride / device changed since the previous compile of that function.
"""
from __future__ import annotations

import contextlib
import functools
import operator
import sys
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import torch
import torch.utils._pytree as pytree

from torch_tpu import _env

COMPILE_STRICT = "TORCH_TPU_COMPILE_STRICT"
_MAX_REASONS = 256  # recompile records kept (oldest dropped first)
_MAX_CAPTURES = 32  # captured signatures kept per graph segment (least recently used dropped first)
_TEMPLATE_READY = 2  # predicted captures in a row before a segment's size template is instantiated
# Tests: every new size that a ready template would instantiate is ALSO captured, and the instantiated graph and
# bindings must equal the captured ones (counted in compile_size_verified / compile_size_mismatch); the captured
# graph runs.
VERIFY_SIZE_TEMPLATES = False

_lock = threading.Lock()


@dataclass
class _Stats:
    frames: int = 0                 # Dynamo compiles that reached the backend (one per graph Dynamo produced)
    recompiles: int = 0             # of those, compiles of a frame that had been compiled before
    graphs: int = 0                 # ATen graphs compiled (forward, backward and inference graphs)
    graph_nodes: int = 0            # ATen op nodes in those graphs
    calls: int = 0                  # compiled-graph calls
    interpreted_calls: int = 0      # ... run op by op
    captures: int = 0               # graph captures made (one per input-metadata signature)
    replays: int = 0                # calls that replayed a captured graph
    capture_seconds: float = 0.0    # wall time of the calls that captured (run op by op + compile the capture)
    reinplaced: int = 0             # functional nodes turned back into in-place ops (see _reinplace; graphs run op by op)
    size_checks: dict[str, int] = field(default_factory=dict)        # size-template verdict -> captures
    size_not_generic: dict[str, int] = field(default_factory=dict)   # why a capture was no template instance
    size_instantiated: int = 0      # new sizes run from an instantiated size template (no capture)
    size_instantiate_seconds: float = 0.0  # wall time of those instantiations (substitute, check, compile)
    size_refused: dict[str, int] = field(default_factory=dict)       # why a ready template was not instantiated
    size_verified: int = 0          # VERIFY_SIZE_TEMPLATES: instantiations equal to the capture made anyway
    size_mismatch: dict[str, int] = field(default_factory=dict)      # ... and the ones that were not (reason)
    capture_failures: dict[str, int] = field(default_factory=dict)     # reason -> count
    unsupported_ops: dict[str, int] = field(default_factory=dict)      # op -> graphs that contain it
    reasons: list[dict[str, Any]] = field(default_factory=list)        # one record per recompile
    last_signature: dict[Any, tuple[list[str], list[tuple]]] = field(default_factory=dict)
    current_compile: tuple[str, int] = ("", 0)                        # (compile id, graphs seen in it so far)


_stats = _Stats()
_warned_ops: set[str] = set()


# ------------------------------------------------------------------------------------------ op support

def _ext() -> Any:
    from torch_tpu.tpu import _state
    return _state.ext()


def _schema_name(op: torch._ops.OpOverload) -> str:
    """The name the glue gives tpu_op_run: "aten::add.Tensor", "aten::gelu" (no ".default")."""
    s = op._schema
    return f"{s.name}.{s.overload_name}" if s.overload_name else s.name


def _has_kernel(name: str, key: str) -> bool:
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(name, key))
    except RuntimeError:  # not a C++-registered operator
        return False


@functools.lru_cache(maxsize=None)
def op_supported(op: torch._ops.OpOverload) -> bool:
    """Whether running `op` on tpu tensors reaches a tpu implementation (as eager mode would dispatch it).

    - the C runtime has a lowering for the op's name (the boxed kernel's path), or
    - the op has its own PrivateUse1 kernel (metadata ops: views, empty, copy_, ...), or
    - it is structured (its functional / in-place form allocates and calls the `.out` overload) and an `.out`
      overload has a lowering; a CompositeExplicitAutogradNonFunctional op whose `.out` has no backend kernel
      is a composite of other ops (slice_scatter, copy), or
    - it is a composite (CompositeImplicit / CompositeExplicitAutograd) whose kernel calls other ATen ops; those
      are checked when they run (the composite itself is not expanded here).
    """
    name = _schema_name(op)
    ext = _ext()
    if ext._op_supported(name) or _has_kernel(name, "PrivateUse1"):
        return True
    if _has_kernel(name, "CompositeExplicitAutogradNonFunctional"):
        packet = getattr(torch.ops.aten, op._schema.name.split("::")[-1].rstrip("_"), None)
        outs = [getattr(packet, o) for o in packet.overloads() if o.endswith("out")] if packet is not None else []
        if any(ext._op_supported(_schema_name(o)) for o in outs):
            return True
        # Structured: the `.out` overload has the real (CPU) kernel and the functional form calls it -> it needs
        # that lowering. Otherwise the functional kernel is a composite of other ops (slice_scatter, copy).
        return not any(_has_kernel(_schema_name(o), "CPU") for o in outs)
    return _has_kernel(name, "CompositeImplicitAutograd") or _has_kernel(name, "CompositeExplicitAutograd")


def _node_op(node: torch.fx.Node) -> Optional[torch._ops.OpOverload]:
    if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
        return node.target
    return None


@functools.lru_cache(maxsize=1)
def decompositions() -> dict[Any, Callable]:
    """PyTorch's core ATen decompositions for the ops the tpu device does NOT implement (and only those): an op
    with a lowering stays one node, so the compiled graph calls the same lowering as eager. Built once per process
    (~10 ms: _core_decompositions)."""
    table = {}
    for op, fn in _core_decompositions().items():
        if isinstance(op, torch._ops.OpOverload) and not op_supported(op):
            table[op] = fn
    return table


def _core_decompositions(full: bool = False) -> Any:
    """core_aten_decompositions() without what decompositions() drops anyway. core_aten_decompositions() is the
    explicit table (_core_aten_decompositions_post_autograd, ~2 ms) plus every CompositeImplicitAutograd op of
    every namespace, which it finds by turning all of the dispatcher's CIA registrations into OpOverloads (~0.25 s
    of a cold start, RESULTS.md); op_supported() is True for every CIA op (eager runs its composite), so none of
    them reaches the table. full=True (or a torch without the private function): the whole public table, which
    tests/test_compile.py checks gives the same decompositions()."""
    import torch._decomp as decomp

    explicit = None if full else getattr(decomp, "_core_aten_decompositions_post_autograd", None)
    return explicit() if explicit is not None else decomp.core_aten_decompositions()


_EAGER_COMPOSITES = ("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "upsample_linear1d",
                     "upsample_bilinear2d", "upsample_trilinear3d", "upsample_bicubic2d")


@contextlib.contextmanager
def _eager_composites() -> Iterator[None]:
    """Upsampling as eager mode runs it. Eager mode runs the C++ kernels of F.interpolate's ops (the `.vec`
    composite calls the sized overload, which the device lowers, with its own autograd formula); while tracing,
    PyTorch swaps in Python kernels that expand them into index arithmetic (different rounding from our lowering).
    Inside this context the C++ kernels are used again, so the graph holds the ops eager mode runs."""
    keys = (torch._C.DispatchKey.Autograd, torch._C.DispatchKey.CompositeImplicitAutograd)
    saved: list[tuple[Any, Any, Any]] = []
    for name in _EAGER_COMPOSITES:
        packet = getattr(torch.ops.aten, name, None)
        sized = getattr(packet, "default", None) if packet is not None else None
        if sized is None or not op_supported(sized):
            continue
        for overload in (sized, getattr(packet, "vec", None)):
            if overload is None:
                continue
            for key in keys:
                if key in overload.py_kernels:
                    saved.append((overload, key, overload.py_kernels.pop(key)))
            overload._dispatch_cache.clear()
    try:
        yield
    finally:
        for overload, key, kernel in saved:
            overload.py_kernels[key] = kernel
            overload._dispatch_cache.clear()


# ------------------------------------------------------------------------------------------ options

@dataclass(frozen=True)
class Options:
    strict: bool = False     # unsupported node -> NotImplementedError at compile time
    capture: bool = True     # use the runtime's graph capture when it exists
    reinplace: bool = True   # write functional results into the buffers they replace (see _reinplace)

    @staticmethod
    def parse(options: Optional[dict[str, Any]]) -> "Options":
        options = dict(options or {})
        strict = options.pop("strict", None)
        capture = options.pop("capture", True)
        reinplace = options.pop("reinplace", True)
        if options:
            raise ValueError(
                f"torch.compile(backend='tpu'): unknown option(s) {sorted(options)}; accepted: strict, capture, "
                "reinplace"
            )
        if strict is None:
            strict = _env.read_bool(COMPILE_STRICT)
        return Options(strict=bool(strict), capture=bool(capture), reinplace=bool(reinplace))


# ------------------------------------------------------------------------------------------ re-inplacing

def _returns_alias(op: Any) -> bool:
    """Whether a node's result may share memory with an argument (views, in-place ops); getitem of a list result
    counts as its parent op's result."""
    if op is operator.getitem:
        return False
    if not isinstance(op, torch._ops.OpOverload):
        return True  # unknown callables: assume the worst
    return any(r.alias_info is not None for r in op._schema.returns)


@functools.lru_cache(maxsize=None)
def _inplace_variant(op: torch._ops.OpOverload) -> Optional[torch._ops.OpOverload]:
    """`aten.mul.Scalar` -> `aten.mul_.Scalar`, `aten._foreach_add.List` -> `aten._foreach_add_.List`: the in-place
    overload with the same arguments whose first argument is written, if the tpu device implements it."""
    schema = op._schema
    name = schema.name.split("::")[-1]
    if name.endswith("_") or not schema.arguments or _returns_alias(op):
        return None
    if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
        return None  # already mutates something (out= overloads and friends)
    packet = getattr(torch.ops.aten, name + "_", None)
    inplace = getattr(packet, op._overloadname, None) if packet is not None else None
    if inplace is None:
        return None
    args, iargs = schema.arguments, inplace._schema.arguments
    first = iargs[0].alias_info if iargs else None
    if first is None or not first.is_write or len(args) != len(iargs):
        return None
    if any(a.name != b.name or str(a.type) != str(b.type) for a, b in zip(args[1:], iargs[1:])):
        return None
    return inplace if op_supported(inplace) else None


def _same_layout(a: Any, b: Any) -> bool:
    """Whether writing the value `b` describes into the buffer `a` describes is a plain overwrite: both tensors,
    same dtype, shape and strides, and `a` has no internal overlap (an expanded tensor cannot be written). Symbolic
    sizes (dynamic shapes) count as equal only when they are provably equal: nothing here may add a shape guard."""
    import torch._prims_common as prims_common
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    dense = getattr(prims_common, "is_non_overlapping_and_dense_or_false", None)
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or dense is None:
        return False
    if a.dtype != b.dtype or a.device != b.device or a.dim() != b.dim():
        return False
    try:
        for x, y in zip((*a.shape, *a.stride()), (*b.shape, *b.stride())):
            if not (x == y if isinstance(x, int) and isinstance(y, int) else statically_known_true(x == y)):
                return False
        return bool(dense(a))
    except Exception:  # anything unexpected about the metadata: leave the node alone
        return False


def _reinplace(gm: torch.fx.GraphModule) -> int:
    """Turns the functional updates of graph inputs back into the in-place ops eager mode ran.

    AOTAutograd functionalizes graphs: an optimizer's `p.mul_(..)`, `exp_avg.lerp_(..)` become out-of-place ops
    whose results are copied into the inputs at the end of the graph (`copy_(p, new_p)`). That allocates a second
    copy of every parameter and optimizer state and copies it back (the compiled AdamW step did ~2x eager's memory
    traffic and held 2x its state while it ran). A node `r = op(s, ...)` becomes `op_(s, ...)` (its users read
    `s`) when:
      - `op_` exists with the same arguments and the tpu device implements it; `s` is a tensor (or, for
        `_foreach_*` ops, each tensor of the list) with the result's dtype, shape and strides and no internal
        overlap, and `s` is not also passed in another argument of the node;
      - `s` is a graph input that the graph overwrites later (`copy_(s, ...)` after the node): its old value is
        dead from the node on, and the copy_ still writes the final value;
      - nothing after the node reads `s` (its users are the node, readers before it whose results do not alias
        it, and the final `copy_(s, ...)`), and neither `s` nor the result is a graph output.
    Chains (`exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2)`) follow: once the first op writes into `s`, the next one
    reads `s`. Then `copy_(s, s)` is dropped. The values are the same ops on the same operands, so results are
    bit-identical; only where they are stored changes. Intermediates are left out-of-place as eager mode has them
    (writing into a pending intermediate can end a runtime capture). Returns the number of nodes rewritten."""
    graph = gm.graph
    nodes = list(graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    outputs: set[torch.fx.Node] = set()
    for n in nodes:
        if n.op == "output":
            outputs.update(x for x in pytree.tree_leaves(n.args) if isinstance(x, torch.fx.Node))
    copy_ = torch.ops.aten.copy_.default

    def alias_used_from(u: torch.fx.Node, p: int) -> bool:
        """Whether `u` (a reader of s before position p) returns an alias of s that something at/after p uses."""
        if not _returns_alias(u.target):
            return False
        return any(pos[w] >= p or alias_used_from(w, p) for w in u.users)

    def writable(s: Any, n: torch.fx.Node, result: Any) -> bool:
        if not isinstance(s, torch.fx.Node) or s in outputs:
            return False
        if not _same_layout(s.meta.get("val"), result):
            return False
        p = pos[n]
        if s.op != "placeholder" or n in outputs:
            return False
        if not any(u.target is copy_ and u.args[0] is s and u.args[1] is not s and pos[u] > p for u in s.users):
            return False  # no later overwrite: the caller would see the intermediate value
        for u in s.users:
            if u is n:
                continue
            if u.target is copy_ and u.args[0] is s and u.args[1] is not s and pos[u] > p:
                continue  # the final overwrite (copy_(s, s), left by an earlier rewrite, overwrites nothing)
            if pos[u] < p and not alias_used_from(u, p):
                continue
            return False
        return True

    rewritten = 0
    for n in nodes:
        op = _node_op(n)
        if op is None or op is copy_:
            continue
        inplace = _inplace_variant(op)
        if inplace is None or not n.args:
            continue
        first, rest = n.args[0], (n.args[1:], n.kwargs)
        is_list = isinstance(first, (list, tuple))
        selves = list(first) if is_list else [first]
        val = n.meta.get("val")
        results = list(val) if is_list and isinstance(val, (list, tuple)) else [val]
        if not selves or len(results) != len(selves) or len(set(selves)) != len(selves):
            continue
        others = {x for x in pytree.tree_leaves(rest) if isinstance(x, torch.fx.Node)}
        if any(s in others for s in selves):
            continue
        if is_list and any(u.target is not operator.getitem for u in n.users):
            continue
        if not all(writable(s, n, r) for s, r in zip(selves, results)):
            continue
        n.target = inplace
        if is_list:
            for g in list(n.users):
                g.replace_all_uses_with(selves[g.args[1]])
                graph.erase_node(g)
        else:
            n.replace_all_uses_with(selves[0])
        rewritten += 1
    if rewritten:
        for n in list(graph.nodes):
            if n.op == "call_function" and n.target is copy_ and n.args[0] is n.args[1] and not n.users:
                graph.erase_node(n)
        graph.lint()
        gm.recompile()
    return rewritten


def _reinplaced_copy(gm: torch.fx.GraphModule) -> tuple[Optional[torch.fx.GraphModule], int]:
    """(a re-inplaced copy of gm, or None if nothing could be rewritten; the number of nodes rewritten)."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    copy = torch.fx.GraphModule(gm, graph)
    rewritten = _reinplace(copy)
    return (copy if rewritten else None), rewritten


# ------------------------------------------------------------------------------------------ the compiled graph

def _capture_api() -> Optional[tuple[Callable, Callable]]:
    ext = _ext()
    begin = getattr(ext, "_capture_begin", None)
    end = getattr(ext, "_capture_end", None)
    return (begin, end) if begin is not None and end is not None else None


def _python_signature(args: list[Any]) -> Any:
    """The capture key when the C++ signature (torch_tpu._C._graph_signature) cannot describe an argument: tensor
    layouts, storage aliasing between arguments (and the byte offsets between aliases), and the values of
    everything else."""
    first: dict[int, tuple[int, int]] = {}
    key = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            storage = a.untyped_storage()
            offset = a.storage_offset() * a.element_size()
            alias, base = first.setdefault(storage.data_ptr(), (i, offset)) if storage.nbytes() > 0 else (i, offset)
            key.append((tuple(a.shape), tuple(a.stride()), a.dtype, a.device, alias, offset - base))
        else:
            key.append((type(a), a))
    return tuple(key)


def _signature_fn() -> Callable[[list[Any]], Any]:
    native = getattr(_ext(), "_graph_signature", None)
    if native is None:
        return _python_signature

    def signature(args: list[Any]) -> Any:
        key = native(args)
        return key if key is not None else _python_signature(args)
    return signature


class _Replay:
    """A captured graph: the runtime handle (which returns the graph's tensor outputs, views included, in order)
    plus where the other outputs come from: None when every output is a tensor the handle returns, else one entry
    per output: ("h", k) the handle's output k, ("value", v) a non-tensor, ("empty", (size, stride, dtype, device))
    a new tensor without elements."""

    __slots__ = ("handle", "specs", "out_type", "all_tensors", "call")

    def __init__(self, handle: Any, specs: Optional[list[tuple[str, Any]]], out_type: type, all_tensors: bool) -> None:
        self.handle, self.specs, self.out_type, self.all_tensors = handle, specs, out_type, all_tensors
        handle.set_plan(specs, 1 if out_type is list else 2 if out_type is tuple else 0)
        # call(args) steals the list `args` (AOTAutograd's boxed convention: it is cleared) and returns the graph's
        # outputs: an input nobody else holds (a saved activation in a backward graph) is freed inside the run after
        # its last reader, and the buffers the run writes after that are allocated only then (CaptureHandle.run),
        # as op by op execution would
        self.call: Callable[[list[Any]], Any] = handle.call


# Reads of a size from a graph input: the template's own variables (c + k*m of them is what it learns).
_SIZE_READS = frozenset(
    getattr(torch.ops.aten, n).default if n in ("sym_numel", "sym_storage_offset") else getattr(torch.ops.aten, n).int
    for n in ("sym_size", "sym_stride", "sym_numel", "sym_storage_offset"))


def _is_size_arith(target: Any) -> bool:
    """Python arithmetic on sizes in an FX graph (operator.floordiv, math.ceil, torch.sym_max, ...)."""
    if target is operator.getitem or isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return False
    mod = getattr(target, "__module__", None) or ""
    return mod in ("_operator", "operator", "math", "builtins") or getattr(target, "__name__", "").startswith("sym_")


def _int_function(expr: Any) -> Optional[Callable[..., int]]:
    """expr (sympy, over size symbols) as a Python function of those symbols when its Python form is integer
    arithmetic only (`s53 // 2 + 1`; sympy's own substitution costs ~0.5-5 ms an expression); None otherwise
    (true division or float functions: substituted exactly instead)."""
    try:
        from torch.utils._sympy.printers import PythonPrinter

        code = PythonPrinter().doprint(expr)
        names = sorted(str(sym) for sym in expr.free_symbols)
        if "/" in code.replace("//", "") or "math." in code or "." in code or not all(n.isidentifier() for n in names):
            return None
        return eval(f"lambda {', '.join(names)}: {code}", {"__builtins__": {"min": min, "max": max, "abs": abs}})
    except Exception:  # noqa: BLE001 - a form the printer does not know: substituted instead
        return None


class _SizeProgram:
    """What a graph computes from its input sizes that a size template cannot learn as c + k*m of them, made
    from its FX graph: (1) the integers its Python arithmetic computes before any op runs (Dynamo's
    `x.shape[1] // 2`: slice bounds, view sizes), (2) the sizes of its nodes' results whose symbolic expressions
    are not polynomials of the input sizes (a pooling's or a strided convolution's output size (H - k) // s + 1,
    computed by PyTorch's shape functions). The C template learns the values they give the IR from its samples,
    which such an expression can fit at the sampled sizes and not at others: _Segment appends these values to
    every sample and, at each size it would instantiate, computes them again and refuses when one differs from
    the template's prediction (lw_size_decide is the same check inside the lowerings)."""

    def __init__(self, gm: Any) -> None:
        self.placeholders: list = []
        self.steps: list = []     # (node, target, args, kwargs) of the Python arithmetic, in graph order
        self.exprs: list = []     # (label, sympy expression, _int_function of it) per non-polynomial result size
        self.names: list[str] = []  # per value: what it is (refusal reasons)
        graph = getattr(gm, "graph", None)
        if not isinstance(graph, torch.fx.Graph):
            return
        known, seen = set(), set()
        for node in graph.nodes:
            if node.op == "placeholder":
                known.add(node)
                self.placeholders.append(node)
            elif node.op == "call_function" and (node.target in _SIZE_READS or _is_size_arith(node.target)):
                if all(d in known for d in node.all_input_nodes):
                    known.add(node)
                    self.steps.append((node, node.target, node.args, node.kwargs))
                    if node.target not in _SIZE_READS and isinstance(node.meta.get("val"), (int, bool, torch.SymInt,
                                                                                            torch.SymBool)):
                        self.names.append(f"{node.name} ({getattr(node.target, '__name__', node.target)})")
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            for val in pytree.tree_leaves(node.meta.get("val")):
                ints = []
                if isinstance(val, torch.Tensor):
                    try:
                        ints = [*val.shape, *val.stride(), val.storage_offset()]
                    except Exception:  # noqa: BLE001 - layouts without strides
                        ints = list(val.shape)
                elif isinstance(val, torch.SymInt):
                    ints = [val]
                for i in ints:
                    if not isinstance(i, torch.SymInt):
                        continue
                    expr = i.node.expr
                    if expr in seen or not expr.free_symbols or expr.is_polynomial(*expr.free_symbols):
                        continue
                    seen.add(expr)
                    self.exprs.append((f"{node.name}'s size {expr}", expr, _int_function(expr)))
        self.names.extend(label for label, _, _ in self.exprs)
        # where each symbol of those expressions is read from: an int input, or a size / stride of a tensor input
        needed = {str(sym) for _, expr, _ in self.exprs for sym in expr.free_symbols}
        self.sources: dict[str, tuple[int, int, int]] = {}   # name -> (input, 0 int / 1 size / 2 stride, dim)
        for i, node in enumerate(self.placeholders):
            val = node.meta.get("val")
            if isinstance(val, torch.SymInt):
                cands = [(val, 0, 0)]
            elif isinstance(val, torch.Tensor):
                cands = [(v, 1, d) for d, v in enumerate(val.shape)] + [(v, 2, d) for d, v in enumerate(val.stride())]
            else:
                continue
            for v, kind, d in cands:
                if isinstance(v, torch.SymInt) and v.node.expr.is_Symbol:
                    self.sources.setdefault(str(v.node.expr), (i, kind, d))
        self.complete = needed <= set(self.sources)

    def __bool__(self) -> bool:
        return bool(self.steps or self.exprs)

    def values(self, args: list[Any]) -> list[int]:
        """The values for these call arguments (raises when one cannot be computed)."""
        out: list[int] = []
        env: dict = dict(zip(self.placeholders, args))
        load = lambda n: env[n]  # noqa: E731
        for node, target, a, k in self.steps:
            v = target(*torch.fx.node.map_arg(a, load), **torch.fx.node.map_arg(k, load))
            env[node] = v
            if target not in _SIZE_READS and isinstance(node.meta.get("val"), (int, bool, torch.SymInt, torch.SymBool)):
                if type(v) not in (int, bool):
                    raise TypeError(f"{node.name} gives {type(v).__name__}")
                out.append(int(v))  # (a float is no size field: the C template compares its uses exactly)
        if self.exprs:
            if not self.complete:
                raise TypeError("a size symbol is not read from the inputs")
            named = {name: int(args[i] if kind == 0 else args[i].shape[d] if kind == 1 else args[i].stride(d))
                     for name, (i, kind, d) in self.sources.items()}
            subs = None
            for label, expr, fn in self.exprs:
                if fn is not None:
                    v = fn(**{name: named[name] for name in fn.__code__.co_varnames[:fn.__code__.co_argcount]})
                    if type(v) is not int:
                        raise TypeError(f"{label} does not evaluate ({v})")
                else:
                    if subs is None:
                        import sympy

                        subs = {sym: sympy.Integer(named[str(sym)]) for _, e, _ in self.exprs for sym in e.free_symbols}
                    v = expr.xreplace(subs)
                    if not v.is_Integer:
                        raise TypeError(f"{label} does not evaluate ({v})")
                out.append(int(v))
        return out


def _plan_outputs(outs: list[Any]) -> tuple[Optional[list[tuple[str, Any]]], list[torch.Tensor]]:
    """(specs for _Replay, the tensors _capture_end should return at each replay). The runtime returns tensors an
    op wrote, inputs, and views of either (AOTAutograd returns views of inputs, e.g. a transposed weight saved for
    the backward, and aliases of intermediates: `detach`); tensors without elements and non-tensors are rebuilt
    here."""
    specs: list[tuple[str, Any]] = []
    handed: list[torch.Tensor] = []
    for o in outs:
        if not isinstance(o, torch.Tensor):
            specs.append(("value", o))
        elif o.numel() == 0 or o.untyped_storage().nbytes() == 0:
            specs.append(("empty", (tuple(o.shape), tuple(o.stride()), o.dtype, o.device)))
        else:
            specs.append(("h", len(handed)))
            handed.append(o)
    direct = len(handed) == len(outs)
    return (None if direct else specs), handed


def _template_key(args: list[Any]) -> tuple:
    """What a size template cannot vary: each argument's kind (tensor, size, or another value and its value), and
    which tensor arguments share storage with an earlier one, at which byte offset from it."""
    key: list[Any] = []
    first: dict[int, tuple[int, int]] = {}
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            storage = a.untyped_storage()
            offset = a.storage_offset() * a.element_size()
            if storage.nbytes() == 0:
                key.append(("t",))
                continue
            alias, base = first.setdefault(storage.data_ptr(), (i, offset))
            key.append(("t",) if alias == i else ("t", alias, offset - base))
        elif type(a) is int:
            key.append(("i",))
        else:
            key.append((type(a), a))
    return tuple(key)


def _spec_ints(specs: Optional[list[tuple[str, Any]]]) -> tuple[list[int], Any]:
    """(the integers among a capture's non-tensor outputs: int values, sizes and strides of empty tensors; the
    specs with those taken out). Sizes a forward graph returns for its backward are such integers."""
    if specs is None:
        return [], None
    ints: list[int] = []
    shape: list[tuple] = []
    for kind, v in specs:
        if kind == "value" and type(v) is int:
            ints.append(v)
            shape.append(("int",))
        elif kind == "empty":
            size, stride, dtype, device = v
            ints.extend(size)
            ints.extend(stride)
            shape.append(("empty", len(size), dtype, device))
        else:
            shape.append((kind, v))
    return ints, tuple(shape)


def _specs_from(shape: Any, ints: list[int]) -> Optional[list[tuple[str, Any]]]:
    """_spec_ints' inverse: the specs with the integers (instantiated at new sizes) put back."""
    if shape is None:
        return None
    specs: list[tuple[str, Any]] = []
    pos = 0
    for entry in shape:
        if entry[0] == "int":
            specs.append(("value", ints[pos]))
            pos += 1
        elif entry[0] == "empty":
            n = entry[1]
            size, stride = tuple(ints[pos:pos + n]), tuple(ints[pos + n:pos + 2 * n])
            pos += 2 * n
            specs.append(("empty", (size, stride, entry[2], entry[3])))
        else:
            specs.append(entry)
    return specs


class CompiledGraph:
    """One ATen FX graph compiled for tpu: a boxed callable (AOTAutograd's calling convention: a list of
    arguments, which it clears so inputs can be freed while the graph runs)."""

    def __init__(self, gm: torch.fx.GraphModule, kind: str, options: Options) -> None:
        self._boxed_call = True  # an instance attribute: AOTAutograd's wrappers copy __dict__, not class attributes
        self.gm = gm
        self.kind = kind
        self.options = options
        self.unsupported: list[tuple[str, str]] = []   # (node, op) with no tpu implementation
        nodes = 0
        for node in gm.graph.nodes:
            op = _node_op(node)
            if op is None:
                continue
            nodes += 1
            if not op_supported(op):
                self.unsupported.append((node.name, _schema_name(op)))
        if self.unsupported and options.strict:
            listed = "; ".join(f"node '{n}' calls {o}" for n, o in self.unsupported)
            raise NotImplementedError(
                f"torch.compile(backend='tpu', strict): the {kind} graph has op(s) without a tpu lowering: {listed}. "
                f"Without strict mode (options={{'strict': False}} / {COMPILE_STRICT}=0) they run eagerly."
            )
        # Op by op, the re-inplaced graph does less work; a capture records the functional graph, whose fused
        # executable writes each final value straight into its input (in-place chains would split its loops). The
        # copy is made at the first op-by-op run (_op_by_op): a graph that captures never needs it, and copying,
        # rewriting and generating its code was half our compile-path time of a warm start (RESULTS.md).
        self.gm_inplace: Optional[torch.fx.GraphModule] = None
        self.reinplaced = 0
        self._inplace_done = not options.reinplace or bool(self.unsupported)
        with _lock:
            _stats.graphs += 1
            _stats.graph_nodes += nodes
            for _, op_name in self.unsupported:
                _stats.unsupported_ops[op_name] = _stats.unsupported_ops.get(op_name, 0) + 1
        for node_name, op_name in self.unsupported:
            if op_name not in _warned_ops:
                _warned_ops.add(op_name)
                warnings.warn(
                    f"torch.compile(backend='tpu'): {op_name} (node '{node_name}') has no tpu lowering; the graph is "
                    "split there and the op runs eagerly (it needs TORCH_TPU_CPU_FALLBACK=1 to succeed)",
                    RuntimeWarning,
                    stacklevel=2,
                )
        self.segments = 1  # runs of supported nodes and unsupported nodes (see _build_runner)
        self._segment: Optional[_Segment] = None
        self._run = self._build_runner(gm, options)

    def _build_runner(self, gm: torch.fx.GraphModule, options: Options) -> Callable[..., Any]:
        if not self.unsupported:
            self._segment = _Segment(gm.forward, options.capture, self._op_by_op)
            return self._segment
        # Split into runs of supported nodes (each captured on its own) and the unsupported nodes (run eagerly).
        from torch.fx.passes.split_module import split_module

        bad = {name for name, _ in self.unsupported}
        part, last_bad, parts = 0, False, {}
        for node in gm.graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            is_bad = node.name in bad
            if is_bad or last_bad:
                part += 1
            parts[node.name] = part
            last_bad = is_bad
        split = split_module(gm, None, lambda node: parts[node.name], keep_original_order=True)
        for name, sub in list(split.named_children()):
            if all(_node_op(n) is None or op_supported(_node_op(n)) for n in sub.graph.nodes):
                setattr(split, name, _SegmentModule(_Segment(sub.forward, options.capture)))
        self.segments = len(list(split.named_children()))
        return split.forward

    def _op_by_op(self) -> Callable[..., Any]:
        """The function an op-by-op run calls: the re-inplaced copy of the graph (made now, once), or the graph."""
        if not self._inplace_done:
            self.gm_inplace, self.reinplaced = _reinplaced_copy(self.gm)
            self._inplace_done = True
            with _lock:
                _stats.reinplaced += self.reinplaced
        return self.gm_inplace.forward if self.gm_inplace is not None else self.gm.forward

    def __call__(self, args: list[Any]) -> Any:
        with _lock:
            _stats.calls += 1
        if self._segment is not None:
            # the steady state is a replay that takes AOTAutograd's list itself (CaptureHandle.call clears it)
            return self._segment.call(args if type(args) is list else _take(args))
        return self._run(*_take(args))


def _take(args: list[Any]) -> list[Any]:
    """A boxed call's arguments, handed over: a new list with them, the caller's list cleared."""
    call_args = list(args)
    args.clear()
    return call_args


class _SegmentModule(torch.nn.Module):
    """A captured segment in place of a split graph's submodule (split_module's code calls self.submod_N)."""

    def __init__(self, segment: "_Segment") -> None:
        super().__init__()
        self.segment = segment

    def forward(self, *args: Any) -> Any:
        return self.segment.call(list(args))


class _NodeWalk:
    """Runs an FX graph's nodes in order, each value freed after its last use, without generating the graph's
    Python code: what a capture runs, once per input signature. The generated code (GraphModule.recompile: ~10 us
    a node to write and compile) pays off only for graphs run op by op many times; a captured graph replays
    without it, so a warm start from the disk cache generated code only to run it once (RESULTS.md). The same
    calls on the same values as the generated code: placeholders from the positional arguments, get_attr from
    the module, call_function, output. None (the caller runs the generated code) for anything else: call_module /
    call_method nodes, placeholder defaults, a graph with its own input/output processing (pytree codegen).
    Before each node whose arguments have the layouts it was traced with, the glue gets the node's meta hint
    (_meta_hint_of): a new argument signature then skips the op's meta function."""

    __slots__ = ("gm", "steps", "n_inputs", "hint")

    @staticmethod
    def of(fn: Callable[..., Any]) -> Optional["_NodeWalk"]:
        gm = getattr(fn, "__self__", None)
        graph = getattr(gm, "graph", None)
        if not isinstance(gm, torch.fx.GraphModule) or not isinstance(graph, torch.fx.Graph):
            return None
        if type(graph._codegen) is not torch.fx.graph.CodeGen or getattr(fn, "__func__", None) is not type(gm).forward:
            return None
        if any(n.op not in ("placeholder", "get_attr", "call_function", "output") or (n.op == "placeholder" and n.args)
               for n in graph.nodes):
            return None
        return _NodeWalk(gm, graph)

    def __init__(self, gm: torch.fx.GraphModule, graph: torch.fx.Graph) -> None:
        self.gm = gm
        nodes = list(graph.nodes)
        last: dict[torch.fx.Node, torch.fx.Node] = {}
        for n in nodes:
            for d in n.all_input_nodes:
                last[d] = n
        dead: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        for d, n in last.items():
            dead.setdefault(n, []).append(d)
        # (node, op, target, args, kwargs, values dead after it, meta hint or None)
        self.steps = [(n, n.op, n.target, n.args, n.kwargs, tuple(dead.get(n, ())), _meta_hint_of(n)) for n in nodes]
        self.n_inputs = sum(1 for n in nodes if n.op == "placeholder")
        self.hint = getattr(_ext(), "_meta_hint", None) if META_HINTS else None

    def __call__(self, *args: Any) -> Any:
        if len(args) != self.n_inputs:
            raise TypeError(f"forward() takes {self.n_inputs} positional arguments but {len(args)} were given")
        env: dict[torch.fx.Node, Any] = {}
        load = env.__getitem__
        map_arg = torch.fx.node.map_arg
        it = iter(args)
        hint, pending = self.hint, False
        try:
            for node, op, target, a, k, dead, h in self.steps:
                if op == "call_function":
                    if h is not None and hint is not None and all(
                            isinstance(t := env[n], torch.Tensor) and t.dtype == dt and t.shape == sz and t.stride() == st
                            for n, sz, st, dt in h[2]):
                        hint(h[0], h[1])
                        pending = True
                    elif pending:
                        hint("", [])
                        pending = False
                    env[node] = target(*map_arg(a, load), **map_arg(k, load))
                elif op == "placeholder":
                    env[node] = next(it)
                elif op == "get_attr":
                    obj = self.gm
                    for part in target.split("."):
                        obj = getattr(obj, part)
                    env[node] = obj
                else:  # output
                    return map_arg(a[0], load)
                for d in dead:
                    del env[d]
        finally:
            if pending:
                hint("", [])
        return None


# Meta hints (see _meta_hint_of); tests turn them off to compare.
META_HINTS = True


def _static_layout(t: Any) -> Optional[tuple]:
    """(sizes, strides, dtype) of a tensor whose layout is concrete (no symbolic size), else None."""
    if not isinstance(t, torch.Tensor):
        return None
    try:
        sizes, strides = tuple(t.shape), tuple(t.stride())
    except Exception:  # noqa: BLE001 - layouts without strides
        return None
    if not all(type(v) is int for v in (*sizes, *strides)):
        return None
    return sizes, strides, t.dtype


def _meta_hint_of(node: torch.fx.Node) -> Optional[tuple]:
    """What the glue's meta step of this node's op would compute, from the FX graph: (op name, its results'
    FakeTensors per return, the layouts its tensor arguments had when AOTAutograd traced it). The glue runs an op's
    meta function once per argument layout and process (torch_tpu._C._meta_hint; many are Python: PyTorch's refs
    and foreach metas, ~85% of a warm start's compile path, RESULTS.md [warm] session 11); the FakeTensors are
    what the same meta functions gave for those layouts while tracing, so a capture whose arguments have exactly
    those layouts (checked per call) hands them over instead. None for symbolic layouts, non-tensor or view
    returns (the glue checks the returns against the op's schema too), and composite ops (their inner ops miss
    instead and drop the hint)."""
    op = _node_op(node)
    if op is None or _has_kernel(_schema_name(op), "CompositeImplicitAutograd"):
        return None
    val = node.meta.get("val")
    returns = op._schema.returns
    if not returns or any(r.alias_info is not None for r in returns):
        return None
    if len(returns) == 1:
        rets = [list(val)] if isinstance(returns[0].type, torch._C.ListType) and isinstance(val, (list, tuple)) else [[val]]
    elif isinstance(val, (list, tuple)) and len(val) == len(returns):
        rets = [list(v) if isinstance(v, (list, tuple)) else [v] for v in val]
    else:
        return None
    if not all(_static_layout(t) is not None for r in rets for t in r):
        return None
    args = []
    for a in pytree.tree_leaves((node.args, node.kwargs)):
        if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor):
            layout = _static_layout(a.meta["val"])
            if layout is None:
                return None
            args.append((a, *layout))
    return _schema_name(op), rets, tuple(args)


class _Segment:
    """Runs a graph (or one segment of a split graph): captured and replayed when the runtime can, else op by
    op. One capture per input signature (tensor layouts, storage aliasing between inputs, values of non-tensor
    inputs: see compile_sig.cpp), the most recently used `_MAX_CAPTURES` kept.

    Dynamic shapes: the sizes of a graph compiled with symbolic shapes arrive as int inputs, so each new size is a
    new signature. Its first call captures (runs the graph op by op while recording, then compiles the recorded
    graph for that size; RESULTS.md has what that costs) until the segment's size template is ready (the last
    `_TEMPLATE_READY` captures were exactly what it predicted and none was no instance); from then on a new size
    is instantiated from the template instead (graph and bindings with the sizes substituted, checked, compiled for
    that size: no recording run), falling back to a capture whenever the template refuses. Host executables are
    specialized to concrete sizes either way."""

    def __init__(self, fn: Callable[..., Any], capture: bool,
                 op_by_op: Optional[Callable[[], Callable[..., Any]]] = None) -> None:
        self._fn = fn                                  # the functional graph: what a capture records
        self._op_by_op = op_by_op                      # -> the same graph re-inplaced, for runs without a capture
        self._fn_op_by_op: Optional[Callable[..., Any]] = None if op_by_op is not None else fn
        self._captured: OrderedDict[Any, _Replay] = OrderedDict()  # least recently used first
        self._last_key: Any = None
        self._last: Optional[_Replay] = None
        self._capture_off: Optional[str] = None if capture else "capture disabled by option"
        self._signature: Optional[Callable[[list[Any]], Any]] = None
        self._walk: Optional[Callable[..., Any]] = None  # what a capture runs (_NodeWalk, else _fn)
        self._sizes: Any = None                        # size template over the captures (see _check_sizes)
        self._sizes_off = False
        self._templates_on = _env.size_templates_enabled()  # TORCH_TPU_SIZE_TEMPLATES
        self._tmpl_key: Any = None                     # what must equal in every sample (_template_key)
        self._tmpl_n_extra = 0                         # integers of the outputs' specs templated in C
        self._tmpl_n_spec = 0                          # ... of which the outputs' specs (then _size_program's)
        self._size_prog: Optional[_SizeProgram] = None  # made at the first sample
        self._predicted_run = 0                        # predicted captures in a row
        self._not_instance = False                     # a capture was no instance: never instantiate

    def __call__(self, *call_args: Any) -> Any:
        return self.call(list(call_args))

    def call(self, args: list[Any]) -> Any:
        """Steals `args` (AOTAutograd's boxed convention: the list is cleared)."""
        if self._capture_off is None:
            if self._signature is None:
                if _capture_api() is None:
                    self._capture_off = "the runtime has no graph capture"
                    return self._interpret(args)
                self._signature = _signature_fn()
            key = self._signature(args)
            if key == self._last_key:
                replay = self._last
            else:
                replay = self._captured.get(key)
                if replay is not None:
                    self._captured.move_to_end(key)
                    self._last_key, self._last = key, replay
            if replay is not None:
                with _lock:
                    _stats.replays += 1
                return replay.call(args)
            call_args = _take(args)
            if self._template_ready():
                replay = self._instantiate(call_args)
                if replay is not None and VERIFY_SIZE_TEMPLATES:
                    return self._capture(key, call_args, verify=replay)
                if replay is not None:
                    self._keep(key, replay)
                    return replay.call(call_args)
            return self._capture(key, call_args)
        return self._interpret(args)

    def _keep(self, key: Any, replay: "_Replay") -> None:
        self._captured[key] = replay
        self._last_key, self._last = key, replay
        while len(self._captured) > _MAX_CAPTURES:  # dynamic shapes: one capture per concrete size
            old, _ = self._captured.popitem(last=False)
            if old == self._last_key:
                self._last_key, self._last = None, None

    # -- size templates (dynamic shapes)

    def _template_ready(self) -> bool:
        return (self._templates_on and self._sizes is not None and not self._sizes_off and not self._not_instance
                and self._predicted_run >= _TEMPLATE_READY)

    def _instantiate(self, call_args: list[Any]) -> Optional["_Replay"]:
        """A replay for a new size made from the size template (no capture), or None (refused: the caller
        captures; the reason is counted in compile_size_refused)."""
        started = time.perf_counter()
        sizes = [a for a in call_args if type(a) is int]
        tensors_in = [a for a in call_args if isinstance(a, torch.Tensor)]
        handle, extra, reason = None, [], ""
        if not tensors_in or _template_key(call_args) != self._tmpl_key[0]:
            reason = "the inputs' structure, non-size values or aliasing differ from the template's samples"
        else:
            try:
                handle, extra, reason = _ext()._capture_instantiate(
                    self._sizes, sizes, self._tmpl_n_extra, tensors_in[0].device.index or 0, VERIFY_SIZE_TEMPLATES)
                if handle is not None and not handle.inputs_match(tensors_in):
                    handle, reason = None, "the instantiated input layouts are not the call's"
            except Exception as exc:  # e.g. out of host memory, an input on another device: capture instead
                handle, reason = None, f"{type(exc).__name__}: {exc}"
        if handle is not None:
            spec_extra, computed = list(extra[:self._tmpl_n_spec]), list(extra[self._tmpl_n_spec:])
            try:
                actual = self._size_prog.values(call_args) if self._size_prog else []
            except Exception as exc:  # noqa: BLE001 - a size that does not evaluate on these ints: capture instead
                actual, reason = None, f"the graph's sizes did not evaluate: {type(exc).__name__}: {exc}"
            if actual is not None and actual != computed:
                bad = next(i for i, (x, y) in enumerate(zip(actual + [None], computed + [None])) if x != y)
                names = self._size_prog.names if self._size_prog else []
                what = names[bad] if bad < len(names) else "?"
                reason = (f"a size the graph computes changes at these sizes: {what} is "
                          f"{actual[bad] if bad < len(actual) else '-'}, the template's "
                          f"{computed[bad] if bad < len(computed) else '-'}")
            if actual != computed:
                handle = None
            extra = spec_extra
        if handle is None:
            with _lock:
                if reason in _stats.size_refused or len(_stats.size_refused) < _MAX_REASONS:
                    _stats.size_refused[reason] = _stats.size_refused.get(reason, 0) + 1
            return None
        shape, out_type, all_tensors = self._tmpl_key[1:]
        specs = _specs_from(shape, list(extra))
        with _lock:
            _stats.size_instantiated += 1
            _stats.size_instantiate_seconds += time.perf_counter() - started
        return _Replay(handle, specs, out_type, all_tensors)

    def _interpret(self, args: list[Any]) -> Any:
        call_args = _take(args)
        with _lock:
            _stats.interpreted_calls += 1
        if self._fn_op_by_op is None:
            self._fn_op_by_op = self._op_by_op()  # type: ignore[misc]
        return self._fn_op_by_op(*call_args)

    # -- capture (first call per signature)

    def _capture(self, key: Any, call_args: list[Any], verify: Optional["_Replay"] = None) -> Any:
        device = next((a.device for a in call_args if isinstance(a, torch.Tensor) and a.device.type == "tpu"), None)
        if device is None:
            self._capture_failed("no tpu tensor among the graph inputs")
            return self._interpret(call_args)
        if any(isinstance(a, torch.Tensor) and a.device != device for a in call_args):
            # e.g. an optimizer's step count on the CPU: a capture would bake its value in
            self._capture_failed("graph inputs on another device (CPU scalars would be baked into the capture)")
            return self._interpret(call_args)
        # Run the graph op by op while the runtime records its device work.
        begin, end = _capture_api()  # type: ignore[misc]
        tensors_in = [a for a in call_args if isinstance(a, torch.Tensor)]
        started = time.perf_counter()
        try:
            begin(device.index or 0)
        except Exception as exc:  # e.g. a capture already open on this device (a segment inside another)
            self._capture_failed(f"capture could not start: {exc}")
            return self._interpret(call_args)
        with _lock:
            _stats.interpreted_calls += 1
        if self._walk is None:
            self._walk = _NodeWalk.of(self._fn) or self._fn
        try:
            out = self._walk(*call_args)
        except BaseException:
            end([], [])  # stop recording (the recorded work still runs); the error is the graph's
            raise
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        specs, handed = _plan_outputs(outs)
        sample = self._templates_on and not self._sizes_off and any(type(a) is int for a in call_args)
        try:
            handle, reason = end(tensors_in, handed, keep_graph=sample) if sample else end(tensors_in, handed)
        except Exception as exc:  # the runtime refused the graph's inputs/outputs: run op by op from now on
            handle, reason = None, f"{type(exc).__name__}: {exc}"
        if handle is None:
            self._capture_failed(reason or "the runtime could not capture the graph")
        else:
            with _lock:
                _stats.captures += 1
                _stats.capture_seconds += time.perf_counter() - started
            replay = _Replay(handle, specs, type(out), len(tensors_in) == len(call_args))
            if verify is not None:
                self._verify(verify, replay)
            self._keep(key, replay)
            if sample:
                self._check_sizes(handle, call_args, specs, type(out), len(tensors_in) == len(call_args))
                handle.drop_graph()
        return out

    def _verify(self, inst: "_Replay", captured: "_Replay") -> None:
        same, reason = _ext()._capture_same(inst.handle, captured.handle)
        if same and (inst.specs, inst.out_type, inst.all_tensors) != (captured.specs, captured.out_type,
                                                                      captured.all_tensors):
            same, reason = False, "the outputs' specs differ"
        inst.handle.drop_graph()
        with _lock:
            if same:
                _stats.size_verified += 1
            else:
                _stats.size_mismatch[reason] = _stats.size_mismatch.get(reason, 0) + 1

    def _check_sizes(self, handle: Any, call_args: list[Any], specs: Any, out_type: type, all_tensors: bool) -> None:
        """Dynamic shapes: the segment's int inputs are its sizes; the size template (tpurt.h tpu_capture_size_check)
        says whether this capture (its graph before the compiler passes, its bindings, and the integers among its
        non-tensor outputs) is the instance of the captures at earlier sizes that they predicted (counted in
        compile_size_template). Everything else (the inputs' structure, non-size values, aliasing, the outputs'
        kinds) must equal the first sample's (_template_key)."""
        sizes = [a for a in call_args if type(a) is int]
        check = getattr(_ext(), "_capture_size_check", None)
        if not sizes or check is None or self._sizes_off:
            return
        if self._sizes is None:
            self._sizes = _ext().SizeTemplate()
        extra, shape = _spec_ints(specs)
        n_spec = len(extra)
        if self._size_prog is None:
            self._size_prog = _SizeProgram(getattr(self._fn, "__self__", None))
        try:
            extra = extra + (self._size_prog.values(call_args) if self._size_prog else [])
        except Exception:  # noqa: BLE001 - arithmetic that does not evaluate on plain ints: no sample
            self._sizes_off = True
            with _lock:
                _stats.size_checks["not_instance"] = _stats.size_checks.get("not_instance", 0) + 1
            return
        key = (_template_key(call_args), shape, out_type, all_tensors)
        if self._tmpl_key is not None and key != self._tmpl_key:
            # not a sample of this template (which is only ever instantiated for calls of its own structure)
            verdict, reason = "other_structure", ""
        else:
            try:
                verdict, reason = check(self._sizes, handle, sizes, extra)
            except Exception as exc:  # e.g. more size inputs than a template takes: stop checking this segment
                verdict, reason, self._sizes_off = "not_instance", f"{type(exc).__name__}: {exc}", True
        if verdict == "first":
            self._tmpl_key, self._tmpl_n_extra, self._tmpl_n_spec = key, len(extra), n_spec
        self._not_instance |= verdict == "not_instance"
        if verdict != "other_structure":
            self._predicted_run = self._predicted_run + 1 if verdict == "predicted" else 0
        with _lock:
            _stats.size_checks[verdict] = _stats.size_checks.get(verdict, 0) + 1
            if reason and (reason in _stats.size_not_generic or len(_stats.size_not_generic) < _MAX_REASONS):
                _stats.size_not_generic[reason] = _stats.size_not_generic.get(reason, 0) + 1

    def _capture_failed(self, reason: str) -> None:
        self._capture_off = reason
        with _lock:
            _stats.capture_failures[reason] = _stats.capture_failures.get(reason, 0) + 1


# ------------------------------------------------------------------------------------------ recompile reasons

def _describe(x: Any) -> tuple:
    if isinstance(x, torch.Tensor):
        shape = tuple(str(s) if isinstance(s, torch.SymInt) else int(s) for s in x.shape)
        try:
            stride = tuple(str(s) if isinstance(s, torch.SymInt) else int(s) for s in x.stride())
        except RuntimeError:  # sparse and other layouts without strides
            stride = ()
        return ("tensor", shape, str(x.dtype).replace("torch.", ""), stride, str(x.device))
    if isinstance(x, torch.SymInt):
        return ("symint", str(x))
    return (type(x).__name__, repr(x)[:40])


def _diff(old_names: list[str], old: list[tuple], names: list[str], new: list[tuple]) -> list[str]:
    """What changed between two compiles' graph inputs, matched by their source names (L['x'], ...)."""
    before = dict(zip(old_names, old))
    changes = []
    for name, b in zip(names, new):
        a = before.pop(name, None)
        if a is None:
            changes.append(f"{name}: new graph input")
        elif a != b and a[0] == b[0] == "tensor":
            for i, what in ((1, "shape"), (2, "dtype"), (3, "stride"), (4, "device")):
                if a[i] != b[i]:
                    fmt = (lambda v: str(list(v))) if isinstance(a[i], tuple) else str
                    changes.append(f"{name}: {what} {fmt(a[i])} -> {fmt(b[i])}")
        elif a != b:
            changes.append(f"{name}: {a[-1]} -> {b[-1]}")
    changes.extend(f"{name}: no longer a graph input" for name in before)
    return changes


def _compiled_code_name() -> Optional[str]:
    """The function Dynamo is compiling ("fn (file.py:12)"), read from convert_frame's `_compile` frame."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_compile" and frame.f_globals.get("__name__") == "torch._dynamo.convert_frame":
            code = frame.f_locals.get("code")
            if code is not None:
                return f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
        frame = frame.f_back
    return None


def _record_frame(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> None:
    from torch._guards import CompileContext

    names = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            grapharg = node.meta.get("grapharg")
            source = getattr(grapharg, "source", None)
            names.append(source.name if source is not None else node.name)
    signature = [_describe(x) for x in example_inputs]
    compile_id = CompileContext.current_compile_id()
    frame_id = getattr(compile_id, "frame_id", None)
    frame_compile_id = getattr(compile_id, "frame_compile_id", None) or 0
    dynamo_reason = None
    if frame_compile_id > 0:
        try:
            from torch._dynamo.utils import get_metrics_context
            dynamo_reason = get_metrics_context()._metrics.get("recompile_reason")
        except Exception:  # a private structure; the input diff below does not depend on it
            dynamo_reason = None
    # A frame with graph breaks gives several graphs per compile; key each by its position in the frame.
    with _lock:
        _stats.frames += 1
        this_compile = f"{compile_id}@{id(CompileContext.try_get())}"  # ids repeat after torch._dynamo.reset()
        if _stats.current_compile[0] != this_compile:
            _stats.current_compile = (this_compile, 0)
        ordinal = _stats.current_compile[1]
        _stats.current_compile = (this_compile, ordinal + 1)
        key = (frame_id, ordinal)
        previous = _stats.last_signature.get(key)
        _stats.last_signature[key] = (names, signature)
        if frame_compile_id > 0:
            _stats.recompiles += 1
            changes = _diff(previous[0], previous[1], names, signature) if previous is not None else []
            record = {
                "function": _compiled_code_name(),
                "compile_id": str(compile_id),
                "reason": dynamo_reason or "unknown (Dynamo gave no guard failure)",
                "changed": changes,
            }
            _stats.reasons.append(record)
            del _stats.reasons[:-_MAX_REASONS]


# ------------------------------------------------------------------------------------------ the backend

def _undo_dynamo_fma(gm: torch.fx.GraphModule) -> int:
    """Dynamo traces `t.addcmul_(a, b, value=v)` / `t.addcdiv_(a, b, value=v)` as `prims.fma(a * b, v, t)` /
    `prims.fma(a / b, v, t)` then `t.copy_(...)` (its `enable_dynamo_decompositions`, made for inductor). The product
    is then rounded on its own and the sum rounded once, where eager mode (and PyTorch's CPU kernel) computes
    `t + v * a * b`: compiled results differed from eager by an ulp in ~20-25% of the elements. The pair goes back to
    the op eager mode runs, so both modes reach the same lowering (torch.addcmul / torch.addcdiv; the copy_ stays).
    Only a plain two-tensor product or quotient used by this fma alone, and a Python number v. Returns the count."""
    fma = getattr(getattr(torch.ops.prims, "fma", None), "default", None)
    if fma is None:
        return 0
    undone = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not fma or len(node.args) != 3 or node.kwargs:
            continue
        prod, value, target = node.args
        if (not isinstance(prod, torch.fx.Node) or prod.op != "call_function" or len(prod.users) != 1
                or prod.target not in (torch.mul, torch.div) or len(prod.args) != 2 or prod.kwargs
                or isinstance(value, bool) or not isinstance(value, (int, float))):
            continue
        a, b = prod.args
        op = torch.addcmul if prod.target is torch.mul else torch.addcdiv
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(op, (target, a, b), {"value": value})
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        gm.graph.erase_node(prod)
        undone += 1
    if undone:
        gm.recompile()
    return undone


def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], options: Optional[dict] = None,
                **kwargs: Any) -> Callable:
    """The Dynamo backend registered as "tpu": AOTAutograd with tpu graph compilers."""
    from torch._dynamo.backends.common import aot_autograd

    if kwargs:
        raise ValueError(f"torch.compile(backend='tpu'): unexpected arguments {sorted(kwargs)}")
    opts = Options.parse(options)
    _undo_dynamo_fma(gm)
    _record_frame(gm, example_inputs)

    def compiler(kind: str) -> Callable:
        def compile_graph(graph: torch.fx.GraphModule, inputs: list[Any]) -> CompiledGraph:
            return CompiledGraph(graph, kind, opts)
        return compile_graph

    backend = aot_autograd(
        fw_compiler=compiler("forward"),
        bw_compiler=compiler("backward"),
        inference_compiler=compiler("inference"),
        decompositions=decompositions(),
        keep_inference_input_mutations=True,
    )
    with _eager_composites():
        return backend(gm, example_inputs)


# ------------------------------------------------------------------------------------------ public counters

def compile_metrics() -> dict[str, Any]:
    """The torch.compile(backend="tpu") counters (merged into torch_tpu.metrics())."""
    with _lock:
        return {
            "compile_frames": _stats.frames,
            "compile_recompiles": _stats.recompiles,
            "compile_graphs": _stats.graphs,
            "compile_graph_nodes": _stats.graph_nodes,
            "compile_calls": _stats.calls,
            "compile_interpreted_calls": _stats.interpreted_calls,
            "compile_captures": _stats.captures,
            "compile_replays": _stats.replays,
            "compile_capture_seconds": _stats.capture_seconds,
            "compile_reinplaced_nodes": _stats.reinplaced,
            "compile_capture_failures": dict(_stats.capture_failures),
            "compile_size_template": dict(_stats.size_checks),
            "compile_size_not_generic": dict(_stats.size_not_generic),
            "compile_size_instantiated": _stats.size_instantiated,
            "compile_size_instantiate_seconds": _stats.size_instantiate_seconds,
            "compile_size_refused": dict(_stats.size_refused),
            "compile_size_verified": _stats.size_verified,
            "compile_size_mismatch": dict(_stats.size_mismatch),
            "compile_unsupported_ops": dict(_stats.unsupported_ops),
            "recompile_reasons": [_format_reason(r) for r in _stats.reasons],
        }


def _format_reason(record: dict[str, Any]) -> str:
    changed = "; ".join(record["changed"]) if record["changed"] else "no input metadata changed"
    return f"{record['function'] or '?'} [{record['compile_id']}]: {record['reason']} ({changed})"


def recompile_reasons() -> list[dict[str, Any]]:
    """One record per recompile since start / reset_metrics(): {"function", "compile_id", "reason" (Dynamo's
    guard failure), "changed" (["L['x']: shape [4, 8] -> [6, 8]", ...])}."""
    with _lock:
        return [dict(r, changed=list(r["changed"])) for r in _stats.reasons]


def reset_compile_metrics() -> None:
    """Zeroes the counters (compiled functions stay compiled; the next recompile is still diffed)."""
    with _lock:
        last, current = _stats.last_signature, _stats.current_compile
        _stats.__init__()  # type: ignore[misc]
        _stats.last_signature, _stats.current_compile = last, current
