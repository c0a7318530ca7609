"""conv2d throughput on ResNet-style shapes: PyTorch CPU vs the tpu device (host driver), in one process.

Prints GFLOP/s (median of a few synchronized runs after warm-up) for the forward pass, the
input gradient and the weight gradient (each the forward's FLOPs), and the tpu/cpu ratios. Higher is
better. f32, NCHW; `--channels-last` runs the same shapes in channels_last, `--bf16` in bfloat16,
`--resnet` adds the small-map shapes of examples/resnet (batch 32, 16x16 down to 2x2).
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
RESNET = [
    ("ex 3x3 16->16    16", 32, 16, 16, 16, 16, 3, 1, 1),
    ("ex 3x3/2 16->32  16", 32, 16, 16, 16, 32, 3, 2, 1),
    ("ex 3x3 32->32     8", 32, 32, 8, 8, 32, 3, 1, 1),
    ("ex 3x3 64->64     4", 32, 64, 4, 4, 64, 3, 1, 1),
    ("ex 3x3 128->128   2", 32, 128, 2, 2, 128, 3, 1, 1),
]


def run(device: str, shape, channels_last: bool, dtype=torch.float32) -> tuple[float, float, float]:
    _, n, c, h, w, o, k, s, p = shape
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, c, h, w, generator=g).to(dtype)
    wt = (torch.randn(o, c, k, k, generator=g) * 0.05).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
        wt = wt.contiguous(memory_format=torch.channels_last)
    x = x.to(device)
    wt = wt.to(device)
    y = F.conv2d(x, wt, stride=s, padding=p)
    gy = torch.randn(y.shape, generator=g).to(dtype).to(device)
    flops = 2.0 * y.numel() * c * k * k
    cb = torch.ops.aten.convolution_backward
    args = (None, [s, s], [p, p], [1, 1], False, [0, 0], 1)
    t_f = bench(lambda: F.conv2d(x, wt, stride=s, padding=p), device, warmup=1, repeat=3)
    t_i = bench(lambda: cb(gy, x, wt, *args, [True, False, False]), device, warmup=1, repeat=3)
    t_w = bench(lambda: cb(gy, x, wt, *args, [False, True, False]), device, warmup=1, repeat=3)
    return flops / t_f / 1e9, flops / t_i / 1e9, flops / t_w / 1e9


def main() -> None:
    channels_last = "--channels-last" in sys.argv
    dtype = torch.bfloat16 if "--bf16" in sys.argv else torch.float32
    print("machine:", machine())
    print("layout:", "channels_last" if channels_last else "NCHW", "dtype:", dtype)
    for shape in SHAPES + (RESNET if "--resnet" in sys.argv else []):
        c = run("cpu", shape, channels_last, dtype)
        t = run("tpu", shape, channels_last, dtype)
        print(f"{shape[0]:22s} " + "  ".join(
            f"{nm}: cpu {a:6.1f} tpu {b:6.1f} ({b / a:4.2f}x)" for nm, a, b in zip(("fwd", "bwd-in", "bwd-w"), c, t)))


if __name__ == "__main__":
    main()
