"""Fused eager vs strict eager: training-step time of the examples on tpu, same process.

Per-step time = (time of a run with S2 steps - time with S1 steps) / (S2 - S1) (model set-up and
first-step compiles drop out). --repeat strict/fused pairs (default 6; the order inside a pair alternates), fused
eager set with torch_tpu.set_fused_eager; prints each mode's median per-step time and the median of the pairs' own
ratios with their spread, in wall time and process CPU time: the speed of fused eager relative to strict eager
(higher is better; issue 4 targets >= 1.3x on minGPT; session 15 saw 0.7-1.3x for one build between runs of the
old 3-repeat version, which took the ratio of the two modes' medians), and the trace counters of the fused runs.
Usage: python benchmarks/bench_fused_eager.py [--tiny] [--only mingpt,llama] [--repeat 6]
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
    ap.add_argument("--repeat", type=int, default=6)
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
            for r in range(args.repeat):
                # each repeat is a strict/fused pair; the order alternates so neither mode always runs second
                for fused in ((False, True) if r % 2 == 0 else (True, False)):
                    w1, c1 = run_time(train, args.s1, amp, args.tiny, fused)
                    w2, c2 = run_time(train, args.s2, amp, args.tiny, fused)
                    wall[fused].append(max((w2 - w1) / (args.s2 - args.s1), 1e-9))
                    cpu[fused].append(max((c2 - c1) / (args.s2 - args.s1), 1e-9))
            best = {f: statistics.median(wall[f]) for f in (False, True)}
            cbest = {f: statistics.median(cpu[f]) for f in (False, True)}
            # the pairs' own ratios (a slow spell of the shared machine hits both halves of a pair alike)
            pairs = sorted(s / f for s, f in zip(wall[False], wall[True]))
            cpairs = sorted(s / f for s, f in zip(cpu[False], cpu[True]))
            m = torch_tpu.metrics()
            per = m["traced_ops"] / max(m["trace_flushes"], 1)
            print(f"{name:7s} {'bf16' if amp else 'f32 '}: strict {best[False] * 1e3:8.1f} ms/step  fused "
                  f"{best[True] * 1e3:8.1f} ms/step  fused speed / strict {statistics.median(pairs):5.2f}x "
                  f"(median of {len(pairs)} pairs, {pairs[0]:.2f}-{pairs[-1]:.2f}x)  "
                  f"(CPU time: strict {cbest[False] * 1e3:.1f} fused {cbest[True] * 1e3:.1f} ms/step, "
                  f"{statistics.median(cpairs):.2f}x, pairs {cpairs[0]:.2f}-{cpairs[-1]:.2f}x)  "
                  f"({per:.0f} ops/flush, trace cache hits {m['trace_cache_hits']} misses {m['trace_cache_misses']})")


if __name__ == "__main__":
    main()
