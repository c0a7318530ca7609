"""Optimizer step (torch.optim, foreach=True: PyTorch's default for tpu) on PyTorch CPU vs tpu, same process.

Model: 16 x (Linear(600, 600) + LayerNorm(600)) + Linear(600, 10): 66 parameter tensors, 5.8M floats.
Gradients are set once; the timed call is opt.step() alone (median of 20, synchronized), in --rounds
alternating cpu/tpu rounds (default 5): prints each side's median, the median round's speed ratio and the
rounds' spread (one side's single runs vary by up to 2x on a shared virtual machine). Also prints the
device tasks per step (torch_tpu.metrics()["ops_run"]) and the process CPU time per step (all threads).
Usage: python benchmarks/bench_optim.py [--only sgd,adamw,adagrad] [--repeat 20] [--rounds 5] [--threads N]
(for a single-threaded comparison also set TORCH_TPU_NUM_THREADS=1 OMP_NUM_THREADS=1)
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bench, machine, settle, summary, sync  # noqa: E402

OPTS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, foreach=True),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01, foreach=True),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.01, foreach=True),
}


def make_model(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = []
    for _ in range(16):
        layers += [torch.nn.Linear(600, 600), torch.nn.LayerNorm(600)]
    layers.append(torch.nn.Linear(600, 10))
    model = torch.nn.Sequential(*layers).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    return model


def measure(name: str, device: str, repeat: int) -> tuple[float, float, int]:
    model = make_model(device)
    opt = OPTS[name](model.parameters())
    step = opt.step
    ops = 0
    if device == "tpu":
        import torch_tpu
        for _ in range(3):
            step()
        sync(device)
        before = torch_tpu.metrics()["ops_run"]
        step()
        ops = torch_tpu.metrics()["ops_run"] - before
    wall = bench(step, device, warmup=3, repeat=repeat)
    sync(device)
    settle()
    c0 = time.process_time()
    for _ in range(repeat):
        step()
    sync(device)
    cpu_time = (time.process_time() - c0) / repeat
    return wall, cpu_time, ops


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print("machine:", machine())
    try:
        print("load average:", os.getloadavg())
    except OSError:
        pass
    names = [n for n in OPTS if not args.only or n in args.only.split(",")]
    n_params = len(list(make_model("cpu").parameters()))
    print(f"model: {n_params} parameter tensors")
    print(f"medians of {args.rounds} alternating cpu/tpu rounds; speed = cpu time / tpu time (> 1: tpu faster)")
    print(f"{'optimizer':10s} {'cpu ms':>8s} {'tpu ms':>8s} {'speed':>7s} {'rounds':>11s} {'cpu CPU-ms':>10s} "
          f"{'tpu CPU-ms':>10s} {'tasks/step':>10s}")
    for name in names:
        walls: dict[str, list[float]] = {"cpu": [], "tpu": []}
        cpu_times: dict[str, list[float]] = {"cpu": [], "tpu": []}
        ops = 0
        for _ in range(args.rounds):
            for dev in ("cpu", "tpu"):
                w, c, n = measure(name, dev, args.repeat)
                walls[dev].append(w); cpu_times[dev].append(c); ops = n or ops
        c_wall, t_wall, speed, _ = summary(walls["cpu"], walls["tpu"], speed=True)
        ratios = [c / t for c, t in zip(walls["cpu"], walls["tpu"])]
        c_cpu, t_cpu, _, _ = summary(cpu_times["cpu"], cpu_times["tpu"])
        print(f"{name:10s} {c_wall * 1e3:8.2f} {t_wall * 1e3:8.2f} {speed:6.2f}x {min(ratios):5.2f}-{max(ratios):4.2f}x "
              f"{c_cpu * 1e3:10.2f} {t_cpu * 1e3:10.2f} {ops:10d}")


if __name__ == "__main__":
    main()
