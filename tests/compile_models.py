"""The example models (examples/<name>/train.py) in reduced configurations, for tests/test_compile.py and
benchmarks/bench_compile.py.

    model, inputs, loss = build("llama", batch=4, seq=8)   # model on the CPU in train mode, inputs on the CPU
    out = model.to("tpu")(*to(inputs, "tpu")); loss(out).backward()

The same seed gives the same weights and data. `loss(out)` moves its targets to `out`'s device once and keeps them
there, so a timed step does not copy targets from the host.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import common  # noqa: E402  (examples/common.py)

EXAMPLES = ["mingpt", "llama", "qwen", "resnet", "unet", "dlrm"]


def _on_device(target: torch.Tensor) -> Callable[[torch.device], torch.Tensor]:
    cache: dict[torch.device, torch.Tensor] = {}

    def get(device: torch.device) -> torch.Tensor:
        if device not in cache:
            cache[device] = target.to(device)
        return cache[device]

    return get


def build(name: str, batch: int | None = None, seq: int | None = None, seed: int = 0,
          size: int | None = None) -> tuple[nn.Module, tuple[Any, ...], Callable[[torch.Tensor], torch.Tensor]]:
    """batch, seq (GPT, Llama, Qwen) and size (ResNet, UNet image side) override the reduced defaults."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    ex = common.import_example(name)
    model: nn.Module
    if name in ("mingpt", "llama", "qwen"):
        if name == "mingpt":
            cfg = dataclasses.replace(ex.TINY, vocab=40)
            model, T = ex.GPT(cfg), seq or cfg.block
        else:
            cfg = ex.TINY
            model, T = (ex.llama.Transformer if name == "qwen" else ex.Transformer)(cfg), seq or cfg.max_seq // 2
        data = torch.randint(0, cfg.vocab, (batch or 4, T + 1), generator=g)   # (B, T + 1) token ids
        inputs: tuple[Any, ...] = (data[:, :-1].contiguous(),)
        tgt, vocab = _on_device(data[:, 1:].reshape(-1)), cfg.vocab
        loss = lambda out: F.cross_entropy(out.reshape(-1, vocab), tgt(out.device))  # noqa: E731
    elif name == "resnet":
        model = ex.ResNet18(4)
        x, y = ex.make_images(batch or 4, size or 16, g)                       # (B, 3, S, S), (B,)
        inputs, labels = (x,), _on_device(y)
        loss = lambda out: F.cross_entropy(out, labels(out.device))  # noqa: E731
    elif name == "unet":
        model = ex.UNet(ch=8, groups=4)
        x = ex.make_images(batch or 2, size or 16, g)                          # (B, 3, S, S)
        t = torch.randint(0, 1000, (x.shape[0],), generator=g)                 # (B,) diffusion timesteps
        inputs, noise = (x, t), _on_device(torch.randn(x.shape, generator=g))
        loss = lambda out: F.mse_loss(out, noise(out.device))  # noqa: E731
    elif name == "dlrm":
        cfg = ex.TINY
        model = ex.DLRM(cfg)
        dense, bags, clicks = ex.make_batch(cfg, batch or 8, 0, seed)
        inputs, target = (dense, bags), _on_device(clicks)
        loss = lambda out: F.binary_cross_entropy_with_logits(out, target(out.device))  # noqa: E731
    else:
        raise ValueError(f"unknown example {name!r}; one of {EXAMPLES}")
    model.train()
    return model, inputs, loss


def to(x: Any, device: torch.device | str) -> Any:
    """x (a tensor, or nested tuples/lists of tensors) on `device`."""
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(to(v, device) for v in x)
    return x
