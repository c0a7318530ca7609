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
  predicted   captures whose executable graph the segment's size template predicted exactly from the earlier sizes
              (compile_size_template; a diagnostic: nothing is reused from it yet)

Usage: TORCH_TPU_CACHE_DIR=0 python benchmarks/bench_dynamic.py [--only mingpt,llama] [--threads 1]
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

    def end(ins, outs):
        m = torch_tpu.metrics()
        t = time.perf_counter()
        _timers["record"] += t - state["t"]
        _timers["op_compile_s"] += m["compile_seconds"] - state["c"]
        _timers["op_compiles"] += m["compiles"] - state["n"]
        r = end0(ins, outs)
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
          f"{'end s':>7} {'op compiles':>11} {'op comp s':>9} {'fused':>5} {'fused s':>7} {'predicted':>9}")
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
              f"{_timers['op_compile_s']:9.3f} {fused:5d} {fused_s:7.3f} {m['compile_size_template'].get('predicted', 0):9d}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="mingpt,llama")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    _instrument()
    for name in args.only.split(","):
        run(name)


if __name__ == "__main__":
    main()
