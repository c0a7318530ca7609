"""Cold and warm compile time of a compiled training step (issue 4: cold compile of the minGPT step < 2 s, warm
start from the disk cache < 100 ms of compile-path time), split into our backend's share and PyTorch's.

Each measurement is a fresh Python process (imports done before timing) that builds bench_compile.py's step
(torch.compile of the model and of opt.step) and times its first call, which is where Dynamo traces, AOTAutograd
builds the forward/backward graphs and our backend compiles and captures them:
- tpu cold: an empty TORCH_TPU_CACHE_DIR; tpu warm: a second process on the same directory;
- inductor cold / warm: the same step on PyTorch CPU with torch.compile(backend="inductor") and an empty, then the
  same, TORCHINDUCTOR_CACHE_DIR (inductor's FX graph cache), for comparison.
"ours" is our backend's compile path, wall time (and the main thread's CPU time, which other jobs on the machine
inflate less): CompiledGraph construction (graph checks) and, in each graph's first call, the capture minus the
graph's first run: walking the FX graph op by op through the dispatcher while the runtime records it (each op's
meta / shape rule and lowering), then _capture_end (building the fused IR graph, hashing it, looking it up in
memory and on disk, compiling or loading and instantiating the executable, enqueueing it). "run" is that first
run's device compute, measured as a synchronize right after _capture_end (the child synchronizes before each
capture too, so the wait is that graph's only; the syncs make the first step serial). "decomp" is building the
decomposition table (once per process); the rest of the first step is PyTorch (Dynamo's bytecode tracing and
guards, AOTAutograd's functionalization and joint-graph partitioning) plus the step itself: the eager loss and the
ops around the compiled functions, including their executables' compiles on the first step (`compile_seconds` of
all the process's executables, inside and outside the captures, is printed after the split), and the final
synchronize. Prints seconds; nothing here is asserted.

Usage: python benchmarks/bench_cold_compile.py [--only mingpt,llama] [--no-inductor] [--rounds N]
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ("mingpt", "llama", "qwen", "resnet", "unet", "dlrm")


def _child(name: str, backend: str) -> dict:
    import torch

    spec = importlib.util.spec_from_file_location("bench_compile", os.path.join(HERE, "bench_compile.py"))
    bc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bc)
    ours = {"ours_s": 0.0, "ours_cpu_s": 0.0, "decomp_s": 0.0, "run_s": 0.0, "end_s": 0.0, "presync_s": 0.0}
    if backend == "tpu":
        import torch_tpu
        from torch_tpu import _compile

        depth = [0]  # a capture inside a timed call is counted once

        def timed(owner, attr, bucket="ours_s"):
            orig = getattr(owner, attr)

            @functools.wraps(orig)
            def wrapper(*args, **kwargs):
                depth[0] += 1
                t, c = time.perf_counter(), time.thread_time()
                try:
                    return orig(*args, **kwargs)
                finally:
                    depth[0] -= 1
                    if depth[0] == 0:
                        ours[bucket] += time.perf_counter() - t
                        if bucket == "ours_s":
                            ours["ours_cpu_s"] += time.thread_time() - c

            setattr(owner, attr, wrapper)

        timed(_compile, "decompositions", "decomp_s")
        timed(_compile.CompiledGraph, "__init__")
        timed(_compile._Segment, "_capture")
        capture_api = _compile._capture_api

        def split_capture_api():
            api = capture_api()
            if api is None:
                return None
            begin, end = api

            def begin_synced(*args, **kwargs):
                # earlier work is not this graph's first run; the wait for it is not compile path either
                t, c = time.perf_counter(), time.thread_time()
                torch.tpu.synchronize()
                ours["presync_s"] += time.perf_counter() - t  # removed from ours_s below
                ours["ours_cpu_s"] -= time.thread_time() - c
                return begin(*args, **kwargs)

            def end_then_run(*args, **kwargs):
                t = time.perf_counter()
                try:
                    return end(*args, **kwargs)
                finally:
                    ours["end_s"] += time.perf_counter() - t
                    t, c = time.perf_counter(), time.thread_time()
                    torch.tpu.synchronize()
                    ours["run_s"] += time.perf_counter() - t  # removed from ours_s below
                    ours["ours_cpu_s"] -= time.thread_time() - c
            return begin_synced, end_then_run

        _compile._capture_api = split_capture_api
    device = "tpu" if backend == "tpu" else "cpu"
    step = bc.make_step(name, device, backend)
    c0, w0 = time.process_time(), time.perf_counter()
    step()
    if device == "tpu":
        torch.tpu.synchronize()
    first = time.perf_counter() - w0
    cpu = time.process_time() - c0
    w1 = time.perf_counter()
    step()
    if device == "tpu":
        torch.tpu.synchronize()
    second = time.perf_counter() - w1
    ours["ours_s"] -= ours["run_s"] + ours["presync_s"]
    ours["run_s"] += ours["presync_s"]  # waits for earlier graphs' runs before a capture: device time too
    out = dict(first_s=first, first_cpu_s=cpu, second_s=second, **ours)
    if backend == "tpu":
        m = torch_tpu.metrics()
        out.update(compiles=m["compiles"], disk_hits=m["cache_hits_disk"],
                   compile_seconds=m["compile_seconds"], disk_load_s=m.get("cache_disk_load_seconds", 0.0),
                   disk_store_s=m.get("cache_disk_store_seconds", 0.0))
    return out


def _run(name: str, backend: str, env: dict) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, backend]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{name}/{backend} child failed:\n{p.stderr[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="mingpt")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--rounds", type=int, default=1, help="cold/warm pairs per model and backend")
    ap.add_argument("--child", nargs=2)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(*args.child)))
        return
    names = MODELS if args.only == "all" else tuple(args.only.split(","))
    print(f"machine: {os.cpu_count()} logical CPUs; fresh processes; wall seconds of the first step = ours (our "
          f"compile path; [its main-thread CPU]; of which _capture_end) + the graphs' first run + decomposition table "
          f"+ rest (PyTorch and the step)")
    for name in names:
        for backend in ("tpu",) + (() if args.no_inductor else ("inductor",)):
            for _ in range(args.rounds):
                tmp = tempfile.mkdtemp(prefix="cold_compile_")
                env = dict(os.environ)
                env["TORCH_TPU_CACHE_DIR" if backend == "tpu" else "TORCHINDUCTOR_CACHE_DIR"] = tmp
                try:
                    cold = _run(name, backend, env)
                    warm = _run(name, backend, env)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                load = os.getloadavg()[0]
                for what, r in (("cold", cold), ("warm", warm)):
                    if backend != "tpu":
                        print(f"{name:8s} {backend:8s} {what}: {r['first_s']:6.2f} s (process cpu {r['first_cpu_s']:.2f} "
                              f"s); second step {r['second_s'] * 1e3:.1f} ms; load {load:.1f}", flush=True)
                        continue
                    rest = r['first_s'] - r['ours_s'] - r['run_s'] - r['decomp_s']
                    print(f"{name:8s} {backend:8s} {what}: {r['first_s']:6.2f} s = ours {r['ours_s']:.3f} "
                          f"[{r['ours_cpu_s']:.3f}; end {r['end_s']:.3f}] + run {r['run_s']:.3f} + decomp "
                          f"{r['decomp_s']:.3f} + rest {rest:.2f}; {r['compiles']} compiles {r['compile_seconds']:.3f} s, "
                          f"{r['disk_hits']} disk hits; second step {r['second_s'] * 1e3:.1f} ms; load {load:.1f}",
                          flush=True)


if __name__ == "__main__":
    main()
