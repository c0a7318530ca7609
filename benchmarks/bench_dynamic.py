"""What a new batch / sequence length costs under torch.compile(backend="tpu", dynamic=True).

The model is compiled once with dynamic=True (Dynamo does not recompile for a new size); the loss runs eagerly and
backward runs AOTAutograd's compiled backward. For each size of a sequence of (batch, seq) pairs the first step at
that size and a later step at the same size (a replay) are timed, and the runtime counters of the first step are
printed:

  first s     wall seconds of the first training step (forward + loss + backward) at a new size
  cpu s       process CPU seconds of that step (all threads)
  replay s    wall seconds of a later step at the same size (rcpu s: its process CPU seconds)
  captures    graph captures made (forward and backward: 2 per new size when nothing can be reused)
  record s    wall seconds of the captures' recording runs (the FX graph run op by op while the runtime records)
  end s       wall seconds inside _capture_end (fused graph: lowerings re-run into one graph, passes, host plan)
  op compiles single-op executables compiled while recording (each recorded op looks up its own executable,
              keyed by its shapes: a new size misses)
  op comp s   compile seconds of those single-op executables
  fused       fused (whole-graph) executables compiled (trace cache misses), and their compile seconds
  predicted   captures whose graph and bindings the segment's size template predicted exactly from the earlier sizes
  inst        new sizes instantiated from the template instead of captured (after two predicted captures in a row)

--new-sizes: what a NEW size costs once the templates are ready, capture vs instantiation. Two compiled copies of
the model (one made with TORCH_TPU_SIZE_TEMPLATES=0: always captures; one with templates on) learn the same sizes,
then each new size's first training step is run on both, alternating which goes first, and the process CPU time of
that step (time.process_time: all threads; run with --threads 1 and TORCH_TPU_NUM_THREADS=1) and the segments' own
wall time (compile_capture_seconds vs compile_size_instantiate_seconds) are printed, with medians.

Usage: TORCH_TPU_CACHE_DIR=0 python benchmarks/bench_dynamic.py [--only mingpt,llama] [--threads 1] [--new-sizes]
Timings are noisy on a shared machine; the counts are deterministic.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import compile_models  # noqa: E402  (tests/compile_models.py)

import torch_tpu  # noqa: E402
from torch_tpu import _compile  # noqa: E402

SIZES = {
    "mingpt": [(4, 12), (6, 12), (4, 10), (5, 9), (8, 11), (3, 7)],
    "llama": [(4, 8), (6, 8), (4, 6), (5, 7), (8, 5), (3, 7)],
}

_timers = {"record": 0.0, "end": 0.0, "op_compile_s": 0.0, "op_compiles": 0}


def _instrument() -> None:
    """Wraps the capture API so the recording run and _capture_end are timed separately."""
    api = _compile._capture_api
    begin0, end0 = api()
    state: dict[str, float] = {}

    def begin(dev):
        m = torch_tpu.metrics()
        state.update(t=time.perf_counter(), c=m["compile_seconds"], n=m["compiles"])
        return begin0(dev)

    def end(ins, outs, **kw):
        m = torch_tpu.metrics()
        t = time.perf_counter()
        _timers["record"] += t - state["t"]
        _timers["op_compile_s"] += m["compile_seconds"] - state["c"]
        _timers["op_compiles"] += m["compiles"] - state["n"]
        r = end0(ins, outs, **kw)
        _timers["end"] += time.perf_counter() - t
        return r

    _compile._capture_api = lambda: (begin, end)


def run(name: str) -> None:
    torch._dynamo.reset()
    model, _, _ = compile_models.build(name)
    model = model.to("tpu")
    compiled = torch.compile(model, backend="tpu", dynamic=True)

    def step(batch: int, seq: int) -> None:
        _, inputs, loss = compile_models.build(name, batch=batch, seq=seq)
        x = compile_models.to(inputs, "tpu")
        loss(compiled(*x)).backward()
        torch.tpu.synchronize()

    print(f"{name}: {'size':>8} {'first s':>8} {'cpu s':>7} {'replay s':>9} {'rcpu s':>7} {'captures':>8} {'record s':>9} "
          f"{'end s':>7} {'op compiles':>11} {'op comp s':>9} {'fused':>5} {'fused s':>7} {'predicted':>9} {'inst':>4}")
    for i, (b, s) in enumerate(SIZES[name]):
        step(b, s) if i == 0 else None  # the first size also compiles the Dynamo graphs: warm it
        torch_tpu.reset_metrics()
        for k in _timers:
            _timers[k] = 0
        c0, t0 = time.process_time(), time.perf_counter()
        step(b, s)
        first, cpu = time.perf_counter() - t0, time.process_time() - c0
        m = torch_tpu.metrics()
        c1, t1 = time.process_time(), time.perf_counter()
        step(b, s)
        replay, rcpu = time.perf_counter() - t1, time.process_time() - c1
        fused = m["trace_cache_misses"]
        fused_s = m["compile_seconds"] - _timers["op_compile_s"]
        tag = f"{b}x{s}" + (" (2nd)" if i == 0 else "")
        print(f"{'':{len(name) + 1}} {tag:>8} {first:8.3f} {cpu:7.3f} {replay:9.4f} {rcpu:7.4f} {m['compile_captures']:8d} "
              f"{_timers['record']:9.3f} {_timers['end']:7.3f} {_timers['op_compiles']:11d} "
              f"{_timers['op_compile_s']:9.3f} {fused:5d} {fused_s:7.3f} {m['compile_size_template'].get('predicted', 0):9d} "
              f"{m['compile_size_instantiated']:4d}")


LEARN = {
    "mingpt": [(4, 12), (6, 12), (5, 9), (3, 7), (8, 11), (7, 10)],
    "llama": [(4, 8), (6, 8), (5, 6), (3, 7), (2, 5)],
}
NEW = {
    "mingpt": [(2, 6), (9, 13), (5, 5), (6, 3), (3, 14), (10, 4), (7, 8), (4, 15)],
    "llama": [(7, 4), (3, 3), (8, 6), (2, 2), (9, 7), (5, 3), (6, 9), (4, 4)],
}


def new_sizes(name: str, rounds: int = 2) -> None:
    """Capture vs instantiation of a new size, once the size templates are ready (see the module docstring). Each
    round compiles the model afresh per mode (torch._dynamo.reset: Dynamo would share one compiled graph between
    copies of a module), learns LEARN, then times the first step at new sizes no earlier round used (the capture
    mode's fused executables stay in the in-memory trace cache); the modes alternate which goes first."""
    import statistics

    per_round = len(NEW[name]) // rounds
    cpu: dict[str, list[float]] = {"capture": [], "instantiate": []}
    seg: dict[str, list[float]] = {"capture": [], "instantiate": []}
    counts: dict[str, list[int]] = {"capture": [0, 0], "instantiate": [0, 0]}
    for r in range(rounds):
        sizes = NEW[name][r * per_round:(r + 1) * per_round]
        for mode in (("capture", "instantiate") if r % 2 == 0 else ("instantiate", "capture")):
            os.environ["TORCH_TPU_SIZE_TEMPLATES"] = "0" if mode == "capture" else "1"
            torch._dynamo.reset()
            model, _, _ = compile_models.build(name)
            model = model.to("tpu")
            compiled = torch.compile(model, backend="tpu", dynamic=True)
            for i, (b, s) in enumerate(LEARN[name] + sizes):
                _, inputs, loss = compile_models.build(name, batch=b, seq=s)
                x = compile_models.to(inputs, "tpu")
                torch.tpu.synchronize()
                before = torch_tpu.metrics()
                c0 = time.process_time()
                loss(compiled(*x)).backward()
                torch.tpu.synchronize()
                t = time.process_time() - c0
                m = torch_tpu.metrics()
                if i < len(LEARN[name]):
                    continue
                d = {k: m[k] - before[k] for k in ("compile_captures", "compile_size_instantiated",
                                                   "compile_capture_seconds", "compile_size_instantiate_seconds")}
                cpu[mode].append(t * 1e3)
                seg[mode].append((d["compile_capture_seconds"] + d["compile_size_instantiate_seconds"]) * 1e3)
                counts[mode][0] += d["compile_captures"]
                counts[mode][1] += d["compile_size_instantiated"]
    os.environ.pop("TORCH_TPU_SIZE_TEMPLATES", None)
    med = {k: statistics.median(v) for k, v in cpu.items()}
    meds = {k: statistics.median(v) for k, v in seg.items()}
    print(f"{name}: first training step at {len(cpu['capture'])} new sizes after learning {LEARN[name]} "
          f"(medians, {rounds} rounds)")
    for mode in ("capture", "instantiate"):
        print(f"  {mode:>11}: step CPU {med[mode]:6.2f} ms, segments' new-size wall {meds[mode]:5.2f} ms "
              f"(captures {counts[mode][0]}, instantiated {counts[mode][1]})")
    print(f"  capture / instantiate: step CPU {med['capture'] / med['instantiate']:.2f}x, segments "
          f"{meds['capture'] / max(meds['instantiate'], 1e-9):.2f}x, saved {med['capture'] - med['instantiate']:.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="mingpt,llama")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    ap.add_argument("--new-sizes", action="store_true", help="capture vs instantiation of a new size")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.new_sizes:
        for name in args.only.split(","):
            new_sizes(name)
        return
    _instrument()
    for name in args.only.split(","):
        run(name)


if __name__ == "__main__":
    main()
