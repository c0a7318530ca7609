"""torch.compile(backend="tpu"): Dynamo -> AOTAutograd -> ATen FX graphs run on the same lowerings as eager.

    model = torch.compile(model, backend="tpu")                   # training and inference
    step = torch.compile(opt.step, backend="tpu")                  # optimizer steps compile too
    torch.compile(fn, backend="tpu", options={"strict": True})     # unsupported op -> error at compile time
    torch.compile(fn, backend="tpu", dynamic=True)                 # new batch / sequence length: no recompile

How a graph runs. AOTAutograd traces the forward and the backward into ATen FX graphs (functionalized: input
mutations such as BatchNorm running statistics or optimizer state updates become explicit `copy_` nodes at the
end of the graph). No op is decomposed that the tpu device implements, so every node is the ATen op eager mode
would dispatch, and running the graph calls it through the dispatcher on tpu tensors: the same boxed kernel and
the same C lowerings as eager, never a second copy of an op's semantics. Only ops the device does not implement
are decomposed (with PyTorch's core ATen decompositions), which makes compiled mode cover a superset of eager.

Each compiled graph is a `CompiledGraph`. Today it runs its FX graph's generated Python code (values are freed
after their last use). When the runtime provides graph capture (`torch_tpu._C._capture_begin`), the first call per
input-metadata signature captures the graph's device work and later calls replay it as one executable; a capture
that fails is recorded with its reason and the graph keeps running op by op.

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
import sys
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import torch

from torch_tpu import _env

COMPILE_STRICT = "TORCH_TPU_COMPILE_STRICT"
_MAX_REASONS = 256  # recompile records kept (oldest dropped first)
_MAX_CAPTURES = 32  # captured signatures kept per graph segment (least recently used dropped first)

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
    with a lowering stays one node, so the compiled graph calls the same lowering as eager."""
    from torch._decomp import core_aten_decompositions

    table = {}
    for op, fn in core_aten_decompositions().items():
        if isinstance(op, torch._ops.OpOverload) and not op_supported(op):
            table[op] = fn
    return table


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

    @staticmethod
    def parse(options: Optional[dict[str, Any]]) -> "Options":
        options = dict(options or {})
        strict = options.pop("strict", None)
        capture = options.pop("capture", True)
        if options:
            raise ValueError(
                f"torch.compile(backend='tpu'): unknown option(s) {sorted(options)}; accepted: strict, capture"
            )
        if strict is None:
            strict = _env.read_bool(COMPILE_STRICT)
        return Options(strict=bool(strict), capture=bool(capture))


# ------------------------------------------------------------------------------------------ the compiled graph

def _meta_key(x: Any) -> Any:
    """What a capture depends on: tensor metadata, and the values of everything else (SymInts arrive as ints)."""
    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), tuple(x.stride()), x.storage_offset(), x.dtype, x.device, x.requires_grad)
    return (type(x), x)


def _alias_pattern(args: list[Any]) -> tuple[int, ...]:
    """For each argument, the index of the first argument sharing its storage (a capture bakes aliasing in)."""
    first: dict[int, int] = {}
    pattern = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.untyped_storage().nbytes() > 0:
            pattern.append(first.setdefault(a.untyped_storage().data_ptr(), i))
        else:
            pattern.append(i)
    return tuple(pattern)


def _capture_api() -> Optional[tuple[Callable, Callable]]:
    ext = _ext()
    begin = getattr(ext, "_capture_begin", None)
    end = getattr(ext, "_capture_end", None)
    return (begin, end) if begin is not None and end is not None else None


@dataclass(frozen=True)
class _OutSpec:
    """How a replay produces one graph output: the handle's output `index` ("captured"), an input itself
    ("input"), a view of an input or of a captured output ("input_view" / "captured_view": as_strided with
    `geometry`), a new tensor with no elements ("empty"), or a fixed `value`."""
    kind: str
    index: int = -1
    geometry: tuple = ()
    value: Any = None


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.untyped_storage().nbytes() == 0 or b.untyped_storage().nbytes() == 0:
        return False  # empty storages have no address to compare (data_ptr 0)
    return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _plan_outputs(inputs: list[torch.Tensor], outs: list[Any]) -> tuple[list[_OutSpec], list[torch.Tensor]]:
    """Splits the graph outputs into what the capture returns (tensors an op wrote) and the rest: inputs returned
    as they are, tensors with no elements, and aliases, which the replay recreates as views (AOTAutograd returns
    views of inputs, e.g. a transposed weight saved for the backward, and aliases of intermediates: `detach`)."""
    specs: list[_OutSpec] = []
    captured: list[torch.Tensor] = []
    by_storage: dict[int, int] = {}  # storage address -> index in `captured`

    def key(t: torch.Tensor) -> int:
        return t.untyped_storage().data_ptr()

    def is_input(t: torch.Tensor) -> bool:
        return any(t is a for a in inputs)

    # The tensors the capture returns: one whole (non-view) tensor per storage the graph wrote.
    def empty(t: Any) -> bool:  # no elements: nothing to capture, whatever storage it points into
        return isinstance(t, torch.Tensor) and not is_input(t) and (t.numel() == 0 or t.untyped_storage().nbytes() == 0)

    for o in outs:
        if empty(o) or not isinstance(o, torch.Tensor) or is_input(o):
            continue
        if o._base is None and key(o) not in by_storage and not any(_same_storage(o, a) for a in inputs):
            by_storage[key(o)] = len(captured)
            captured.append(o)
    for o in outs:
        if not isinstance(o, torch.Tensor):
            specs.append(_OutSpec("value", value=o))
            continue
        if empty(o):  # no data: a replay makes a new empty tensor of the same metadata
            specs.append(_OutSpec("empty", geometry=(tuple(o.shape), tuple(o.stride())), value=(o.dtype, o.device)))
            continue
        if is_input(o):  # the graph returns an input itself: the replay returns the new input
            specs.append(_OutSpec("input", next(i for i, a in enumerate(inputs) if a is o)))
            continue
        source = next((i for i, a in enumerate(inputs) if _same_storage(o, a)), None)
        if source is not None:
            specs.append(_OutSpec("input_view", source, (tuple(o.shape), tuple(o.stride()), o.storage_offset())))
            continue
        if key(o) not in by_storage:  # a view whose base is not an output itself: return the base too
            by_storage[key(o)] = len(captured)
            base = o._base
            # (a base with no elements — as_strided views of an empty tensor's storage — cannot stand for the data)
            captured.append(base if base is not None and base.numel() > 0 else o)
        index = by_storage[key(o)]
        if captured[index] is o:
            specs.append(_OutSpec("captured", index))
        else:  # offsets relative to the captured tensor: a replay allocates it afresh
            offset = o.storage_offset() - captured[index].storage_offset()
            specs.append(_OutSpec("captured_view", index, (tuple(o.shape), tuple(o.stride()), offset)))
    return specs, captured


class _Replay:
    """A captured graph: the runtime handle plus how to rebuild the graph's outputs from what it returns."""

    def __init__(self, handle: Any, specs: list[_OutSpec], out_type: type) -> None:
        self.handle, self.specs, self.out_type = handle, specs, out_type

    def run(self, tensors_in: list[torch.Tensor]) -> Any:
        got = self.handle.run(tensors_in)
        outs: list[Any] = []
        for spec in self.specs:
            if spec.kind == "captured":
                outs.append(got[spec.index])
            elif spec.kind == "input":
                outs.append(tensors_in[spec.index])
            elif spec.kind == "value":
                outs.append(spec.value)
            elif spec.kind == "empty":
                dtype, device = spec.value
                outs.append(torch.empty_strided(*spec.geometry, dtype=dtype, device=device))
            elif spec.kind == "input_view":
                outs.append(tensors_in[spec.index].as_strided(*spec.geometry))
            else:
                base = got[spec.index]
                size, stride, offset = spec.geometry
                outs.append(base.as_strided(size, stride, base.storage_offset() + offset))
        if self.out_type in (list, tuple):
            return self.out_type(outs)
        return outs[0]


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
        self._run = self._build_runner(gm, options)

    def _build_runner(self, gm: torch.fx.GraphModule, options: Options) -> Callable[..., Any]:
        if not self.unsupported:
            return _Segment(gm.forward, options.capture)
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

    def __call__(self, args: list[Any]) -> Any:
        args = list(args) if not isinstance(args, list) else args
        call_args = list(args)
        args.clear()
        with _lock:
            _stats.calls += 1
        return self._run(*call_args)


class _SegmentModule(torch.nn.Module):
    """A captured segment in place of a split graph's submodule (split_module's code calls self.submod_N)."""

    def __init__(self, segment: "_Segment") -> None:
        super().__init__()
        self.segment = segment

    def forward(self, *args: Any) -> Any:
        return self.segment(*args)


class _Segment:
    """Runs a graph (or one segment of a split graph): captured and replayed when the runtime can, else op by
    op. One capture per input signature (tensor metadata and the values of non-tensor arguments)."""

    def __init__(self, fn: Callable[..., Any], capture: bool) -> None:
        self._fn = fn
        self._captured: dict[Any, _Replay] = {}  # insertion order = least recently used first
        self._capture_off: Optional[str] = None if capture else "capture disabled by option"

    def __call__(self, *call_args: Any) -> Any:
        if self._capture_off is None and _capture_api() is not None:
            return self._run_captured(list(call_args))
        with _lock:
            _stats.interpreted_calls += 1
        return self._fn(*call_args)

    # -- capture / replay (used when the runtime has the capture API)

    def _run_captured(self, call_args: list[Any]) -> Any:
        key = (tuple(_meta_key(a) for a in call_args), _alias_pattern(call_args))
        replay = self._captured.pop(key, None)
        if replay is not None:
            self._captured[key] = replay  # most recently used last
            with _lock:
                _stats.replays += 1
            return replay.run([a for a in call_args if isinstance(a, torch.Tensor)])
        device = next((a.device for a in call_args if isinstance(a, torch.Tensor) and a.device.type == "tpu"), None)
        with _lock:
            _stats.interpreted_calls += 1
        if device is None:
            self._capture_failed("no tpu tensor among the graph inputs")
            return self._fn(*call_args)
        if any(isinstance(a, torch.Tensor) and a.device != device for a in call_args):
            # e.g. an optimizer's step count on the CPU: a capture would bake its value in
            self._capture_failed("graph inputs on another device (CPU scalars would be baked into the capture)")
            return self._fn(*call_args)
        # First call for this signature: run the graph op by op while the runtime records its device work.
        begin, end = _capture_api()  # type: ignore[misc]
        tensors_in = [a for a in call_args if isinstance(a, torch.Tensor)]
        try:
            begin(device.index or 0)
        except Exception as exc:  # e.g. a capture already open on this device (a segment inside another)
            self._capture_failed(f"capture could not start: {exc}")
            return self._fn(*call_args)
        try:
            out = self._fn(*call_args)
        except BaseException:
            end([], [])  # stop recording (the recorded work still runs); the error is the graph's
            raise
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        specs, captured = _plan_outputs(tensors_in, outs)
        try:
            handle, reason = end(tensors_in, captured)
        except Exception as exc:  # the runtime refused the graph's inputs/outputs: run op by op from now on
            handle, reason = None, f"{type(exc).__name__}: {exc}"
        if handle is None:
            self._capture_failed(reason or "the runtime could not capture the graph")
        else:
            with _lock:
                _stats.captures += 1
            self._captured[key] = _Replay(handle, specs, type(out))
            while len(self._captured) > _MAX_CAPTURES:  # dynamic shapes: one capture per concrete size
                del self._captured[next(iter(self._captured))]
        return out

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

def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], options: Optional[dict] = None,
                **kwargs: Any) -> Callable:
    """The Dynamo backend registered as "tpu": AOTAutograd with tpu graph compilers."""
    from torch._dynamo.backends.common import aot_autograd

    if kwargs:
        raise ValueError(f"torch.compile(backend='tpu'): unexpected arguments {sorted(kwargs)}")
    opts = Options.parse(options)
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
            "compile_capture_failures": dict(_stats.capture_failures),
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
