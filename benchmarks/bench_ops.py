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


def row_ops(device: str) -> dict[str, float]:
    """ms per call of the transformer examples' row ops at minGPT's shapes (forward + backward)."""
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    att = torch.randn(32, 4, 64, 64, generator=g)
    att = att.masked_fill(~torch.tril(torch.ones(64, 64, dtype=torch.bool)), float("-inf"))
    cases = {
        "masked softmax [32,4,64,64]": (att, lambda x: F.softmax(x, dim=-1)),
        "softmax dim=1 [64,512,8]": (torch.randn(64, 512, 8, generator=g), lambda x: F.softmax(x, dim=1)),
        "log_softmax [2048,96]": (torch.randn(2048, 96, generator=g), lambda x: F.log_softmax(x, dim=-1)),
        "layer_norm [32,64,128]": (torch.randn(32, 64, 128, generator=g),
                                   lambda x, w=torch.randn(128), b=torch.randn(128): F.layer_norm(x, (128,), w.to(x.device), b.to(x.device))),
    }
    out = {}
    for name, (x, fn) in cases.items():
        xd = x.to(device).requires_grad_()
        gy = torch.randn(x.shape, generator=g).to(device)
        def run():
            y = fn(xd)
            (gx,) = torch.autograd.grad(y, xd, gy)
            return gx
        out[name] = bench(run, device, warmup=2, repeat=9) * 1e3
    return out


def main() -> None:
    print("machine:", machine())
    cpu, tpu = tiny_add("cpu"), tiny_add("tpu")
    print(f"tiny add (8 floats): cpu {cpu:.2f} us/op, tpu {tpu:.2f} us/op, tpu/cpu time ratio {tpu / cpu:.2f}x (target <= 1.5x)")
    cpu, tpu = chain("cpu"), chain("tpu")
    print(f"elementwise chain (8M floats, 4 ops): cpu {cpu:.1f} GB/s, tpu {tpu:.1f} GB/s, tpu/cpu {tpu / cpu:.2f}x (target >= 0.8x)")
    cpu, tpu = row_ops("cpu"), row_ops("tpu")
    for name in cpu:
        print(f"{name} fwd+bwd: cpu {cpu[name]:.3f} ms, tpu {tpu[name]:.3f} ms, tpu/cpu time ratio {tpu[name] / cpu[name]:.2f}x")


if __name__ == "__main__":
    main()
