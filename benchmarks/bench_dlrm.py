"""DLRM training-step time with the model and batches built once (examples/dlrm/train.py's model,
default config, batch 256, Adagrad): wall and process CPU time per step, PyTorch CPU vs tpu.

bench_examples.py times whole train() runs (model construction and data generation included);
this isolates the step. Usage: python benchmarks/bench_dlrm.py [--amp] [--steps 20]
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


def step_times(dev: str, amp: bool, steps: int) -> tuple[float, float]:
    dlrm = common.import_example("dlrm")
    cfg = dlrm.Config()
    common.seed_all(0)
    model = dlrm.DLRM(cfg).to(dev)
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    data = [dlrm.make_batch(cfg, 256, i, 0) for i in range(4)]
    data = [(d.to(dev), [tuple(t.to(dev) for t in bag) for bag in bags], c.to(dev)) for d, bags, c in data]

    def step(i: int) -> float:
        dense, bags, clicks = data[i % 4]
        with common.autocast(dev, amp):
            loss = F.binary_cross_entropy_with_logits(model(dense, bags).float(), clicks)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()  # waits for the step, as the example does

    for i in range(3):
        step(i)
    wall = cpu = float("inf")
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(steps):
            step(i)
        wall = min(wall, (time.perf_counter() - t0) / steps)
        cpu = min(cpu, (time.process_time() - c0) / steps)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--amp", action="store_true")
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    cw, cc = step_times("cpu", args.amp, args.steps)
    tw, tc = step_times("tpu", args.amp, args.steps)
    print(f"dlrm {'bf16' if args.amp else 'f32 '}: cpu {cw * 1e3:.2f} ms/step (cpu time {cc * 1e3:.2f}), "
          f"tpu {tw * 1e3:.2f} ms/step (cpu time {tc * 1e3:.2f}); tpu speed / cpu {cw / tw:.2f}x wall, "
          f"{cc / tc:.2f}x cpu time")


if __name__ == "__main__":
    main()
