"""f32 GEMM throughput: torch.mm on PyTorch CPU vs the tpu device (host driver), in one process.

Prints GFLOP/s (median of several synchronized runs after warm-up) and the tpu/cpu ratio
for M=N=K=1024 and M=N=4096, K=1024. Higher is better.
"""
from __future__ import annotations

import torch

from common import bench, machine

SHAPES = [(1024, 1024, 1024), (4096, 4096, 1024)]


def gflops(device: str, m: int, n: int, k: int) -> float:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=g).to(device)
    b = torch.randn(k, n, generator=g).to(device)
    out = torch.empty(m, n, device=device)
    repeat = 10 if m * n * k <= 1 << 30 else 5
    t = bench(lambda: torch.mm(a, b, out=out), device, warmup=3, repeat=repeat)
    return 2.0 * m * n * k / t / 1e9


def main() -> None:
    print("machine:", machine())
    for m, n, k in SHAPES:
        cpu, tpu = gflops("cpu", m, n, k), gflops("tpu", m, n, k)
        print(f"sgemm M={m} N={n} K={k}: cpu {cpu:8.1f} GFLOP/s   tpu {tpu:8.1f} GFLOP/s   tpu/cpu {tpu / cpu:5.2f}x")


if __name__ == "__main__":
    main()
