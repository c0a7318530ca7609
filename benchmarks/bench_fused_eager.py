"""Fused eager vs strict eager: training-step time of the examples on tpu, same process.

Per-step time = (time of a run with S2 steps - time with S1 steps) / (S2 - S1) (model set-up and
first-step compiles drop out), several alternating repeats, strict eager first then
fused eager (torch_tpu.set_fused_eager); the median per-step time over the repeats, in wall time and
process CPU time. Prints the speed of fused eager relative to strict eager
(higher is better; issue 4 targets >= 1.3x on minGPT) and the trace counters of the fused runs.
Usage: python benchmarks/bench_fused_eager.py [--tiny] [--only mingpt,llama] [--repeat 3]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time

import torch

import torch_tpu

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("bench_common", os.path.join(HERE, "common.py"))
_bench_common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench_common)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

NAMES = ["mingpt", "llama"]


def run_time(train, steps: int, amp: bool, tiny: bool, fused: bool) -> tuple[float, float]:
    """(wall seconds, process CPU seconds: all threads, the device workers included)."""
    torch_tpu.set_fused_eager(fused)
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        train(device="tpu", steps=steps, amp=amp, tiny=tiny, log=lambda *a, **k: None)
        torch.tpu.synchronize()
        return time.perf_counter() - t0, time.process_time() - c0
    finally:
        torch_tpu.set_fused_eager(False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--s1", type=int, default=2)
    ap.add_argument("--s2", type=int, default=6)
    args = ap.parse_args()
    sys.modules.pop("common", None)
    import common as examples_common  # examples/common.py

    print("machine:", _bench_common.machine())
    for name in [n for n in NAMES if not args.only or n in args.only.split(",")]:
        train = examples_common.import_example(name).train
        for amp in (False, True):
            # per repeat: (S2-step run - S1-step run) / (S2 - S1); the median over repeats, in wall time and
            # in process CPU time (steadier on a shared machine: other processes' load does not count)
            wall: dict[bool, list[float]] = {False: [], True: []}
            cpu: dict[bool, list[float]] = {False: [], True: []}
            for fused in (False, True):  # warm caches (executables, fused traces, allocator)
                run_time(train, args.s1, amp, args.tiny, fused)
            torch_tpu.reset_metrics()
            for _ in range(args.repeat):
                for fused in (False, True):
                    w1, c1 = run_time(train, args.s1, amp, args.tiny, fused)
                    w2, c2 = run_time(train, args.s2, amp, args.tiny, fused)
                    wall[fused].append((w2 - w1) / (args.s2 - args.s1))
                    cpu[fused].append((c2 - c1) / (args.s2 - args.s1))
            best = {f: max(statistics.median(wall[f]), 1e-9) for f in (False, True)}
            cbest = {f: max(statistics.median(cpu[f]), 1e-9) for f in (False, True)}
            m = torch_tpu.metrics()
            per = m["traced_ops"] / max(m["trace_flushes"], 1)
            print(f"{name:7s} {'bf16' if amp else 'f32 '}: strict {best[False] * 1e3:8.1f} ms/step  fused "
                  f"{best[True] * 1e3:8.1f} ms/step  fused speed / strict {best[False] / best[True]:5.2f}x  "
                  f"(CPU time: strict {cbest[False] * 1e3:.1f} fused {cbest[True] * 1e3:.1f} ms/step, "
                  f"{cbest[False] / cbest[True]:.2f}x)  "
                  f"({per:.0f} ops/flush, trace cache hits {m['trace_cache_hits']} misses {m['trace_cache_misses']})")


if __name__ == "__main__":
    main()
