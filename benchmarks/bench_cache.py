"""Compile-path time of the minGPT training step in a cold vs a warm process (the persistent compilation cache).

Each run is a fresh Python process that trains examples/mingpt for 2 steps (sampling off) with
TORCH_TPU_CACHE_DIR pointing at one directory: the first process (cold, empty directory) lowers,
optimizes and plans every executable and writes it to disk; the second (warm) loads them. The
compile-path time is what the runtime spends getting executables: compile_seconds (lowering +
compiler passes + host plan, cold) plus the cache's file time (writing, cold; reading + decoding +
host plan, warm), from torch_tpu.metrics(). Issue 4 target: warm < 100 ms. Also printed: the
process's wall time for the 2 steps. Usage: python benchmarks/bench_cache.py [--tiny] [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch, torch_tpu
from mingpt.train import train
t0 = time.perf_counter()
train(device="tpu", steps=2, sample=0, tiny=sys.argv[2] == "1", log=lambda *a, **k: None)
torch.tpu.synchronize()
wall = time.perf_counter() - t0
m = torch_tpu.metrics()
print("RESULT " + json.dumps({"wall": wall, **{k: v for k, v in m.items() if k != "fallback_counts"}}))
"""


def run(cache_dir: str, tiny: bool) -> dict:
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache_dir)
    env.pop("TORCH_TPU_CPU_FALLBACK", None)
    p = subprocess.run([sys.executable, "-c", CHILD, os.path.join(ROOT, "examples"), "1" if tiny else "0"],
                       env=env, capture_output=True, text=True, timeout=1200)
    if p.returncode != 0:
        raise SystemExit(f"child failed:\n{p.stderr[-3000:]}")
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[7:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    from common import machine  # noqa: E402

    import torch  # noqa: F401,E402  (machine() reads torch's settings)
    print(f"machine: {machine()}")
    cold_path, warm_path, cold_wall, warm_wall = [], [], [], []
    import glob  # noqa: E402

    def ext_stamp() -> list[int]:  # a rebuilt extension has a new build id: its cache files are new
        return [os.stat(f).st_mtime_ns for f in glob.glob(os.path.join(ROOT, "torch_tpu", "_C*.so"))]

    done = 0
    while done < args.repeat:
        d = tempfile.mkdtemp(prefix="tpu_bench_cache_")
        stamp = ext_stamp()
        try:
            c = run(d, args.tiny)
            w = run(d, args.tiny)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        if ext_stamp() != stamp:
            print("  (the extension was rebuilt during the pair; measuring again)")
            continue
        done += 1
        assert w["compiles"] == 0, f"the warm process compiled {w['compiles']} executables"
        cold_path.append(c["compile_seconds"] + c["cache_disk_store_seconds"])
        warm_path.append(w["compile_seconds"] + w["cache_disk_load_seconds"])
        cold_wall.append(c["wall"])
        warm_wall.append(w["wall"])
        print(f"  cold: {c['compiles']} compiles, compile {c['compile_seconds'] * 1e3:.1f} ms + write "
              f"{c['cache_disk_store_seconds'] * 1e3:.1f} ms, wall {c['wall']:.2f} s | warm: {w['cache_hits_disk']} disk "
              f"hits, load {w['cache_disk_load_seconds'] * 1e3:.1f} ms, wall {w['wall']:.2f} s")
    cp, wp = statistics.median(cold_path), statistics.median(warm_path)
    print(f"minGPT{' (tiny)' if args.tiny else ''} training step, compile-path time (median of {args.repeat}): "
          f"cold {cp * 1e3:.1f} ms, warm {wp * 1e3:.1f} ms ({cp / max(wp, 1e-9):.1f}x); "
          f"wall for 2 steps: cold {statistics.median(cold_wall):.2f} s, warm {statistics.median(warm_wall):.2f} s; "
          f"target warm < 100 ms: {'met' if wp < 0.1 else 'MISSED'}")


if __name__ == "__main__":
    main()
