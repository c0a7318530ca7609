"""Per-op dispatch overhead and elementwise bandwidth: PyTorch CPU vs tpu in one process.

Prints µs/op for a tiny add (lower is better; target tpu <= 1.5x CPU) and GB/s for a
large elementwise chain (target tpu >= 0.8x CPU).
"""
from __future__ import annotations

import torch

from common import bench, machine


def tiny_add(device: str) -> float:
    a = torch.randn(8).to(device)
    b = torch.randn(8).to(device)
    n = 2000
    def run():
        for _ in range(n):
            torch.add(a, b)
    return bench(run, device, warmup=2, repeat=7) / n * 1e6


def chain(device: str, numel: int = 1 << 23) -> float:
    x = torch.randn(numel).to(device)
    y = torch.randn(numel).to(device)
    def run():
        # 4 elementwise ops in eager mode: each reads 1-2 and writes 1 array
        z = x * y
        z = z + x
        z = torch.relu(z)
        z = z * 0.5
        return z
    t = bench(run, device, warmup=2, repeat=7)
    bytes_moved = 4 * numel * (3 + 3 + 2 + 2)
    return bytes_moved / t / 1e9


def main() -> None:
    print("machine:", machine())
    cpu, tpu = tiny_add("cpu"), tiny_add("tpu")
    print(f"tiny add (8 floats): cpu {cpu:.2f} us/op, tpu {tpu:.2f} us/op, tpu/cpu time ratio {tpu / cpu:.2f}x (target <= 1.5x)")
    cpu, tpu = chain("cpu"), chain("tpu")
    print(f"elementwise chain (8M floats, 4 ops): cpu {cpu:.1f} GB/s, tpu {tpu:.1f} GB/s, tpu/cpu {tpu / cpu:.2f}x (target >= 0.8x)")


if __name__ == "__main__":
    main()
