"""Trains a scaled-down ResNet-18 to tell procedurally drawn shapes apart, then evaluates it in eval mode.

    python examples/resnet/train.py --device tpu [--steps N] [--amp] [--tiny] [--channels-last]
    python examples/resnet/train.py --device cpu            # same data, same initial weights

Images are generated from the seed (no downloads): a coloured disc, square, triangle or cross on a coloured
noisy background, at a random position and size; the label is the shape. The network keeps ResNet-18's layout
(a stem, four stages of two BasicBlocks each, global average pooling, a linear classifier) with narrower
channels. BatchNorm uses batch statistics while training and its running statistics in eval mode.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402  (examples/common.py)

SHAPES = ("disc", "square", "triangle", "cross")


def make_images(n: int, size: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(images (n, 3, size, size) float32 in about [-1, 1], labels (n,) int64) on the CPU."""
    labels = torch.randint(0, len(SHAPES), (n,), generator=g)
    cy, cx = (torch.rand(2, n, 1, 1, generator=g) * 0.5 + 0.25) * size      # centre, (n, 1, 1) each
    r = (torch.rand(n, 1, 1, generator=g) * 0.15 + 0.15) * size              # half-size
    ys, xs = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32),
                            indexing="ij")
    dy, dx = ys - cy, xs - cx                                                 # (n, size, size)
    masks = torch.stack([
        dy**2 + dx**2 <= r**2,                                               # disc
        (dy.abs() <= r) & (dx.abs() <= r),                                   # square
        (dy <= r) & (dy >= -r) & (dx.abs() <= (dy + r) / 2),                 # triangle, apex up
        ((dy.abs() <= r / 3) & (dx.abs() <= r)) | ((dx.abs() <= r / 3) & (dy.abs() <= r)),  # cross
    ], dim=1)                                                                 # (n, 4, size, size)
    mask = masks[torch.arange(n), labels].unsqueeze(1).float()                # (n, 1, size, size)
    fg = torch.rand(n, 3, 1, 1, generator=g)
    bg = torch.rand(n, 3, 1, 1, generator=g) * 0.5
    images = mask * fg + (1 - mask) * bg + 0.05 * torch.randn(n, 3, size, size, generator=g)
    return images * 2 - 1, labels


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, width: int = 16, classes: int = len(SHAPES), blocks: tuple[int, ...] = (2, 2, 2, 2)) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        stages, cin = [], width
        for i, n in enumerate(blocks):
            cout = width * 2**i
            for j in range(n):
                stages.append(BasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1))
                cin = cout
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, 3, H, W) -> logits (B, classes)."""
        return self.fc(self.pool(self.stages(self.stem(x))).flatten(1))


def train(device="cpu", steps=None, amp=False, tiny=False, seed=0, overfit=False, log=print, batch=None,
          lr=0.05, channels_last=False, size=None, width=None) -> list[float]:
    device = torch.device(device)
    steps = 30 if steps is None else steps
    batch = batch or (8 if tiny else 32)
    size = size or (16 if tiny else 32)
    width = width or (4 if tiny else 16)
    g = common.seed_all(seed)
    images, labels = make_images(batch * (1 if overfit else steps) + 64, size, g)
    test_x, test_y = images[-64:], labels[-64:]
    model = ResNet18(width).to(device)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    if log:
        log(f"resnet: {sum(p.numel() for p in model.parameters())} parameters on {device}, {steps} steps, "
            f"batch {batch}x3x{size}x{size}{', channels_last' if channels_last else ''}"
            f"{', bf16 autocast' if amp else ''}")
    record = common.LossLog(device, log)
    model.train()
    for step, i in common.batches(lambda i: i, steps, overfit):
        x = images[i * batch:(i + 1) * batch].to(device).contiguous(memory_format=fmt)
        y = labels[i * batch:(i + 1) * batch].to(device)
        with common.autocast(device, amp):
            loss = F.cross_entropy(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        record(step, loss)
    model.eval()  # BatchNorm switches to its running statistics
    with torch.no_grad(), common.autocast(device, amp):
        accuracy = (model(test_x.to(device).contiguous(memory_format=fmt)).argmax(1) == test_y.to(device))
        accuracy = accuracy.float().mean().item()
    if log:
        log(f"eval accuracy on 64 held-out images: {100 * accuracy:.1f}% (chance {100 / len(SHAPES):.0f}%)")
    return record.losses


def main(argv: list[str] | None = None) -> int:
    def extra(p):
        p.add_argument("--channels-last", action="store_true", help="NHWC activations and weights")
    return common.run_main(train, __doc__, argv, extra)


if __name__ == "__main__":
    sys.exit(main())
