"""Cold and warm compile time of a compiled training step (issue 4: cold compile of the minGPT step < 2 s, warm
start from the disk cache < 100 ms of compile-path time), split into our backend's share and PyTorch's.

Each measurement is a fresh Python process (imports done before timing) that builds bench_compile.py's step
(torch.compile of the model and of opt.step) and times its first call, which is where Dynamo traces, AOTAutograd
builds the forward/backward graphs and our backend compiles and captures them:
- tpu cold: an empty TORCH_TPU_CACHE_DIR; tpu warm: a second process on the same directory;
- inductor cold / warm: the same step on PyTorch CPU with torch.compile(backend="inductor") and an empty, then the
  same, TORCHINDUCTOR_CACHE_DIR (inductor's FX graph cache), for comparison.
"ours" is the wall time inside torch_tpu's compile path (CompiledGraph construction: graph checks and re-inplacing;
the first call's capture: running the graph once while recording it, lowering and compiling its executables or
loading them from the disk cache); "decomp" is building the decomposition table (mostly PyTorch's
core_aten_decompositions(), once per process; inductor builds its own); the rest of the first step is PyTorch
(Dynamo's bytecode tracing and guards, AOTAutograd's functionalization and joint-graph partitioning) plus the step
itself: the eager loss and the ops around the compiled functions, including their executables' compiles on the
first step (`compile_seconds` of all the process's executables, inside and outside the captures, is printed after
the split), and the final synchronize. Prints seconds; nothing here is asserted.

Usage: python benchmarks/bench_cold_compile.py [--only mingpt,llama] [--no-inductor]
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
    ours = {"ours_s": 0.0, "decomp_s": 0.0}
    if backend == "tpu":
        import torch_tpu
        from torch_tpu import _compile

        depth = [0]  # a capture inside a timed call is counted once

        def timed(owner, attr, bucket="ours_s"):
            orig = getattr(owner, attr)

            @functools.wraps(orig)
            def wrapper(*args, **kwargs):
                depth[0] += 1
                t = time.perf_counter()
                try:
                    return orig(*args, **kwargs)
                finally:
                    depth[0] -= 1
                    if depth[0] == 0:
                        ours[bucket] += time.perf_counter() - t

            setattr(owner, attr, wrapper)

        timed(_compile, "decompositions", "decomp_s")
        timed(_compile.CompiledGraph, "__init__")
        timed(_compile._Segment, "_capture")
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
    ap.add_argument("--child", nargs=2)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(*args.child)))
        return
    names = MODELS if args.only == "all" else tuple(args.only.split(","))
    print(f"machine: {os.cpu_count()} logical CPUs; each row: fresh processes, first-step wall seconds")
    print(f"model    backend   {'cold first step (ours / decomp / rest)':58s}  {'warm first step (same split)':58s}  second step")
    for name in names:
        for backend in ("tpu",) + (() if args.no_inductor else ("inductor",)):
            tmp = tempfile.mkdtemp(prefix="cold_compile_")
            env = dict(os.environ)
            env["TORCH_TPU_CACHE_DIR" if backend == "tpu" else "TORCHINDUCTOR_CACHE_DIR"] = tmp
            try:
                cold = _run(name, backend, env)
                warm = _run(name, backend, env)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)

            def fmt(r: dict) -> str:
                if backend != "tpu":
                    return f"{r['first_s']:5.2f} s (process cpu {r['first_cpu_s']:.2f} s)".ljust(58)
                rest = r['first_s'] - r['ours_s'] - r['decomp_s']
                return (f"{r['first_s']:5.2f} s ({r['ours_s']:.2f} / {r['decomp_s']:.2f} / {rest:.2f}; "
                        f"{r['compiles']} compiles {r['compile_seconds']:.3f} s, {r['disk_hits']} disk hits)").ljust(58)

            print(f"{name:8s} {backend:8s}  {fmt(cold)}  {fmt(warm)}  {cold['second_s'] * 1e3:7.1f} ms", flush=True)


if __name__ == "__main__":
    main()
