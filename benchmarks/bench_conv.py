"""conv2d throughput on ResNet-style shapes: PyTorch CPU vs the tpu device (host driver), in one process.

Prints GFLOP/s (median of a few synchronized runs after warm-up) for the forward pass and for the
backward pass (input + weight gradients, 2x the forward FLOPs), and the tpu/cpu ratios. Higher is
better. f32, NCHW; `--channels-last` runs the same shapes in channels_last.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from common import bench, machine

# (name, N, C, H, W, O, k, stride, padding)
SHAPES = [
    ("conv1 7x7/2  3->64  112", 4, 3, 112, 112, 64, 7, 2, 3),
    ("3x3    64->64    56", 4, 64, 56, 56, 64, 3, 1, 1),
    ("3x3/2 128->128   56", 4, 128, 56, 56, 128, 3, 2, 1),
    ("3x3   256->256   14", 4, 256, 14, 14, 256, 3, 1, 1),
    ("1x1   256->64    56", 4, 256, 56, 56, 64, 1, 1, 0),
]


def run(device: str, shape, channels_last: bool) -> tuple[float, float]:
    _, n, c, h, w, o, k, s, p = shape
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, c, h, w, generator=g)
    wt = torch.randn(o, c, k, k, generator=g) * 0.05
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
        wt = wt.contiguous(memory_format=torch.channels_last)
    x = x.to(device).requires_grad_()
    wt = wt.to(device).requires_grad_()
    y = F.conv2d(x, wt, stride=s, padding=p)
    gy = torch.randn(y.shape, generator=g).to(device)
    flops = 2.0 * y.numel() * c * k * k
    t_f = bench(lambda: F.conv2d(x, wt, stride=s, padding=p), device, warmup=1, repeat=3)
    t_b = bench(lambda: torch.autograd.grad(y, (x, wt), gy, retain_graph=True), device, warmup=1, repeat=3)
    return flops / t_f / 1e9, 2 * flops / t_b / 1e9


def main() -> None:
    channels_last = "--channels-last" in sys.argv
    print("machine:", machine())
    print("layout:", "channels_last" if channels_last else "NCHW")
    for shape in SHAPES:
        cf, cb = run("cpu", shape, channels_last)
        tf, tb = run("tpu", shape, channels_last)
        print(f"{shape[0]:24s} fwd: cpu {cf:7.1f} tpu {tf:7.1f} GFLOP/s ({tf / cf:5.2f}x)   "
              f"bwd: cpu {cb:7.1f} tpu {tb:7.1f} GFLOP/s ({tb / cb:5.2f}x)")


if __name__ == "__main__":
    main()
