"""DLRM training-step time with the model and batches built once (examples/dlrm/train.py's model,
default config, batch 256, Adagrad): wall and process CPU time per step, PyTorch CPU vs tpu.

bench_examples.py times whole train() runs (model construction and data generation included);
this isolates the step. Usage: python benchmarks/bench_dlrm.py [--amp] [--steps 20] [--fresh]
By default the timed steps cycle through 4 batches, so every op's shapes repeat (all cache hits). --fresh gives
every step its own batch, as training does: each table's id count (the bags' total length) is new at first, so
tpu pays the output-shape (meta) and executable-cache misses of a new shape; later runs still find the
executables in the persistent cache (TORCH_TPU_CACHE_DIR=0 turns it off).
Set TORCH_TPU_NUM_THREADS=1 OMP_NUM_THREADS=1 for one-thread CPU-time comparisons.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import common  # noqa: E402  (examples/common.py)

from importlib import util as _util  # noqa: E402

_spec = _util.spec_from_file_location("bench_common", os.path.join(os.path.dirname(os.path.abspath(__file__)), "common.py"))
_bench_common = _util.module_from_spec(_spec)
_spec.loader.exec_module(_bench_common)
settle = _bench_common.settle


def step_times(dev: str, amp: bool, steps: int, fresh: bool = False) -> tuple[float, float]:
    dlrm = common.import_example("dlrm")
    cfg = dlrm.Config()
    common.seed_all(0)
    model = dlrm.DLRM(cfg).to(dev)
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    nb = 3 + 3 * steps if fresh else 4
    data = [dlrm.make_batch(cfg, 256, i, 0) for i in range(nb)]
    data = [(d.to(dev), [tuple(t.to(dev) for t in bag) for bag in bags], c.to(dev)) for d, bags, c in data]

    def step(i: int) -> float:
        dense, bags, clicks = data[i % nb]
        with common.autocast(dev, amp):
            loss = F.binary_cross_entropy_with_logits(model(dense, bags).float(), clicks)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()  # waits for the step, as the example does

    for i in range(3):
        step(i)
    settle()
    wall = cpu = float("inf")
    for r in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(steps):
            step(3 + r * steps + i if fresh else i)
        wall = min(wall, (time.perf_counter() - t0) / steps)
        cpu = min(cpu, (time.process_time() - c0) / steps)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--amp", action="store_true")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--fresh", action="store_true", help="a new batch (new id counts) every step")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    cw, cc = step_times("cpu", args.amp, args.steps, args.fresh)
    import torch_tpu

    m0 = torch_tpu.metrics()
    tw, tc = step_times("tpu", args.amp, args.steps, args.fresh)
    m1 = torch_tpu.metrics()
    d = {k: m1[k] - m0[k] for k in ("compiles", "compile_seconds", "cache_disk_writes", "cache_disk_store_seconds")}
    print(f"dlrm {'bf16' if args.amp else 'f32 '}{' fresh batches' if args.fresh else ''}: cpu {cw * 1e3:.2f} ms/step (cpu time {cc * 1e3:.2f}), "
          f"tpu {tw * 1e3:.2f} ms/step (cpu time {tc * 1e3:.2f}); tpu speed / cpu {cw / tw:.2f}x wall, "
          f"{cc / tc:.2f}x cpu time")
    print(f"  tpu run (model, batches, {3 + 3 * args.steps} steps): {d['compiles']} compiles, "
          f"{d['compile_seconds'] * 1e3:.1f} ms compiling, {d['cache_disk_writes']} cache files written "
          f"({d['cache_disk_store_seconds'] * 1e3:.1f} ms); TORCH_TPU_EAGER_TEMPLATES=0 compiles every new size in full")


if __name__ == "__main__":
    main()
