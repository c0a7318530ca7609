"""Trains a small diffusion UNet for a few DDPM steps on synthetic images.

    python examples/unet/train.py --device tpu [--steps N] [--amp] [--tiny]
    python examples/unet/train.py --device cpu            # same data, noise and initial weights

The images are generated from the seed (no downloads): smooth colour gradients with a bright blob. Each step
draws a timestep t and Gaussian noise (on the CPU, so both devices see the same draws), forms the noisy image
x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) noise and trains the UNet to predict the noise (mean squared error).
The UNet has residual blocks (GroupNorm, SiLU, 3x3 conv, a sinusoidal timestep embedding added per channel),
downsampling by strided conv, three ways up (conv_transpose, nearest and bilinear upsampling followed by a conv)
and skip connections concatenated along the channels.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402  (examples/common.py)


def make_images(n: int, size: int, g: torch.Generator) -> torch.Tensor:
    """(n, 3, size, size) float32 in [-1, 1] on the CPU."""
    ys, xs = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    a, b, c = torch.rand(3, n, 3, 1, 1, generator=g)                           # (n, 3, 1, 1) each
    cy, cx = torch.rand(2, n, 1, 1, 1, generator=g)
    blob = torch.exp(-((ys - cy) ** 2 + (xs - cx) ** 2) / 0.02)                 # (n, 1, size, size)
    img = (a * xs + b * ys + c) / 3 + blob
    return img.clamp(0, 1) * 2 - 1


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of integer timesteps t (B,) -> (B, dim), as in the Transformer and DDPM."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, tdim: int, groups: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(tdim, cout)
        self.norm2 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return h + self.skip(x)


class Up(nn.Module):
    """Doubles the resolution: 'transpose' (ConvTranspose2d), 'nearest' or 'bilinear' (interpolate, then conv)."""

    def __init__(self, channels: int, mode: str) -> None:
        super().__init__()
        self.mode = mode
        if mode == "transpose":
            self.op = nn.ConvTranspose2d(channels, channels, 4, stride=2, padding=1)
        else:
            self.op = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "transpose":
            return self.op(x)
        if self.mode == "nearest":
            return self.op(F.interpolate(x, scale_factor=2, mode="nearest"))
        return self.op(F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False))


class UNet(nn.Module):
    def __init__(self, ch: int = 32, mults: tuple[int, ...] = (1, 2, 2, 4), groups: int = 8,
                 up_modes: tuple[str, ...] = ("bilinear", "nearest", "transpose")) -> None:
        super().__init__()
        assert len(up_modes) == len(mults) - 1
        tdim = 4 * ch
        self.ch = ch
        self.time_mlp = nn.Sequential(nn.Linear(ch, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(3, ch, 3, padding=1)
        chans = [ch * m for m in mults]                          # channels at each resolution
        self.down_blocks, self.downs = nn.ModuleList(), nn.ModuleList()
        cin = ch
        for i, c in enumerate(chans):
            self.down_blocks.append(ResBlock(cin, c, tdim, groups))
            cin = c
            if i < len(chans) - 1:
                self.downs.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
        self.mid = ResBlock(cin, cin, tdim, groups)
        self.ups, self.up_blocks = nn.ModuleList(), nn.ModuleList()
        for i in reversed(range(len(chans) - 1)):
            self.ups.append(Up(cin, up_modes[i]))
            self.up_blocks.append(ResBlock(cin + chans[i], chans[i], tdim, groups))  # after the skip concat
            cin = chans[i]
        self.out = nn.Sequential(nn.GroupNorm(groups, cin), nn.SiLU(), nn.Conv2d(cin, 3, 3, padding=1))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """x: (B, 3, H, W) noisy images, t: (B,) timesteps -> predicted noise (B, 3, H, W)."""
        temb = self.time_mlp(timestep_embedding(t, self.ch))
        h = self.inp(x)
        skips = []
        for i, block in enumerate(self.down_blocks):
            h = block(h, temb)
            if i < len(self.downs):
                skips.append(h)
                h = self.downs[i](h)
        h = self.mid(h, temb)
        for up, block in zip(self.ups, self.up_blocks):
            h = block(torch.cat([up(h), skips.pop()], dim=1), temb)
        return self.out(h)


def train(device="cpu", steps=None, amp=False, tiny=False, seed=0, overfit=False, log=print, batch=None,
          lr=2e-3, size=None, timesteps=1000) -> list[float]:
    device = torch.device(device)
    steps = 20 if steps is None else steps
    batch = batch or (4 if tiny else 16)
    size = size or (16 if tiny else 32)
    common.seed_all(seed)
    model = (UNet(ch=8, groups=4) if tiny else UNet()).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    betas = torch.linspace(1e-4, 0.02, timesteps, dtype=torch.float64)
    abar = torch.cumprod(1 - betas, dim=0).float()              # (timesteps,) on the CPU

    def make_batch(i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        gi = torch.Generator().manual_seed(seed * 7919 + i)
        x0 = make_images(batch, size, gi)
        t = torch.randint(0, timesteps, (batch,), generator=gi)
        noise = torch.randn(x0.shape, generator=gi)
        a = abar[t][:, None, None, None]
        return (a.sqrt() * x0 + (1 - a).sqrt() * noise), t, noise

    if log:
        log(f"unet: {sum(p.numel() for p in model.parameters())} parameters on {device}, {steps} DDPM steps, "
            f"batch {batch}x3x{size}x{size}{', bf16 autocast' if amp else ''}")
    record = common.LossLog(device, log)
    model.train()
    for step, (xt, t, noise) in common.batches(make_batch, steps, overfit):
        xt, t, noise = common.to(device, xt, t, noise)
        with common.autocast(device, amp):
            loss = F.mse_loss(model(xt, t).float(), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        record(step, loss)
    return record.losses


def main(argv: list[str] | None = None) -> int:
    return common.run_main(train, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
