"""MLP training step (forward, backward, AdamW) on PyTorch CPU vs tpu, same process."""
from __future__ import annotations

import torch
import torch.nn as nn

from common import bench, machine


def make(device: str, width: int = 512, depth: int = 3):
    torch.manual_seed(0)
    layers = []
    d = 256
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.GELU()]
        d = width
    layers.append(nn.Linear(d, 10))
    model = nn.Sequential(*layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(128, 256).to(device)
    y = torch.randint(0, 10, (128,)).to(device)
    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def main() -> None:
    print("machine:", machine())
    cpu = bench(make("cpu"), "cpu", warmup=3, repeat=10)
    tpu = bench(make("tpu"), "tpu", warmup=3, repeat=10)
    print(f"MLP train step (batch 128, 256-512x3-10, AdamW): cpu {cpu * 1e3:.2f} ms, tpu {tpu * 1e3:.2f} ms, "
          f"tpu speed / cpu speed {cpu / tpu:.2f}x (target >= 0.9x)")


if __name__ == "__main__":
    main()
