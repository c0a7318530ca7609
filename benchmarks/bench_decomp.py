"""Decompositions, grid_sample and CTC loss: tpu vs PyTorch CPU in one process (best of N wall time, both
single-threaded: run with TORCH_TPU_NUM_THREADS=1). Prints one line per case: cpu ms, tpu ms, tpu/cpu.

    TORCH_TPU_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_decomp.py
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401


def best(fn, sync, reps: int = 5) -> float:
    fn()
    sync()
    t_best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        t_best = min(t_best, time.perf_counter() - t)
    return t_best * 1e3


def main() -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    cases = []
    for n in (16, 64, 128):
        a = torch.randn(8, n, n, generator=g)
        s = a @ a.mT
        cases += [(f"linalg.qr 8x{n}x{n}", torch.linalg.qr, (a,)),
                  (f"linalg.svd 8x{n}x{n}", torch.linalg.svd, (a,)),
                  (f"linalg.eigh 8x{n}x{n}", torch.linalg.eigh, (s,))]
    x = torch.randn(8, 16, 32, 32, generator=g)
    grid = torch.rand(8, 32, 32, 2, generator=g) * 2 - 1
    cases.append(("grid_sample bilinear 8x16x32x32", lambda x, g: F.grid_sample(x, g, align_corners=False), (x, grid)))
    lp = torch.randn(50, 16, 20, generator=g).log_softmax(2)
    tg = torch.randint(1, 20, (16, 10), generator=g)
    cases.append(("ctc_loss T50 N16 C20 S10", lambda lp, tg: F.ctc_loss(lp, tg, [50] * 16, [10] * 16), (lp, tg)))
    for name, fn, args in cases:
        targs = [t.to("tpu") for t in args]
        cpu = best(lambda: fn(*args), lambda: None)
        tpu = best(lambda: fn(*targs), torch.tpu.synchronize)
        print(f"{name:36s} cpu {cpu:9.2f} ms  tpu {tpu:9.2f} ms  tpu/cpu {tpu / cpu:6.1f}x", flush=True)


if __name__ == "__main__":
    main()
