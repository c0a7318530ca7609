"""Trains a tiny DLRM (embedding bags, bottom/top MLPs, dot interaction) on synthetic click data.

    python examples/dlrm/train.py --device tpu [--steps N] [--amp] [--tiny] [--optim sgd|adagrad]
    python examples/dlrm/train.py --device cpu            # same data, same initial weights

Each sample has dense features and, per categorical table, a variable-length bag of ids (a 1-D id tensor plus
`offsets`, as recommendation data arrives). Tables alternate between mode="sum" with per_sample_weights (e.g.
how often an item was seen) and mode="mean". Clicks come from a hidden logistic "teacher" over the same features,
so the BCE-with-logits loss can fall below its starting value. Everything is generated from the seed.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402  (examples/common.py)


@dataclass
class Config:
    dense: int = 13                        # dense features, as in Criteo
    tables: tuple[int, ...] = (1000, 500, 2000, 100, 300, 50, 800, 1200)
    dim: int = 16                          # embedding size = bottom MLP output size
    bottom: tuple[int, ...] = (64, 32)
    top: tuple[int, ...] = (64, 32)
    max_bag: int = 4                       # ids per bag: 1 .. max_bag


TINY = Config(dense=8, tables=(50, 30, 80, 20), dim=8, bottom=(16,), top=(16,), max_bag=3)


def mlp(sizes: list[int], last_act: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_act:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.bottom = mlp([cfg.dense, *cfg.bottom, cfg.dim], last_act=True)
        self.embs = nn.ModuleList(nn.EmbeddingBag(n, cfg.dim, mode="sum" if k % 2 == 0 else "mean")
                                  for k, n in enumerate(cfg.tables))
        for e in self.embs:
            nn.init.uniform_(e.weight, -0.05, 0.05)
        f = len(cfg.tables) + 1                                  # features that interact
        li, lj = torch.tril_indices(f, f, offset=-1)             # each pair once
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)
        self.top = mlp([cfg.dim + f * (f - 1) // 2, *cfg.top, 1], last_act=False)

    def forward(self, dense: torch.Tensor, bags: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """dense: (B, dense); bags: per table (ids (N,), offsets (B,), weights (N,)) -> click logits (B,)."""
        x = self.bottom(dense)                                                      # (B, d)
        embs = [emb(ids, offsets, per_sample_weights=w if emb.mode == "sum" else None)
                for emb, (ids, offsets, w) in zip(self.embs, bags)]                 # (B, d) each
        feats = torch.stack([x, *embs], dim=1)                                      # (B, F, d)
        z = torch.bmm(feats, feats.transpose(1, 2))                                 # (B, F, F) dot interaction
        pairs = z[:, self.li, self.lj]                                              # (B, F(F-1)/2)
        return self.top(torch.cat([x, pairs], dim=1)).squeeze(1)


def make_batch(cfg: Config, batch: int, i: int, seed: int):
    """Dense features, per-table bags (ids, offsets, weights) and 0/1 clicks, all on the CPU."""
    g = torch.Generator().manual_seed(seed * 65537 + i)
    teacher = torch.Generator().manual_seed(seed + 12345)                 # the same hidden model for every batch
    dense = torch.rand(batch, cfg.dense, generator=g)
    score = dense @ (torch.randn(cfg.dense, generator=teacher) / cfg.dense**0.5)
    bags = []
    for n in cfg.tables:
        lengths = torch.randint(1, cfg.max_bag + 1, (batch,), generator=g)
        offsets = torch.cumsum(lengths, 0) - lengths                      # where each sample's bag starts
        ids = torch.randint(0, n, (int(lengths.sum()),), generator=g)
        weights = torch.rand(ids.shape, generator=g) + 0.5
        item_score = torch.randn(n, generator=teacher) * 0.7
        sample = torch.repeat_interleave(torch.arange(batch), lengths)
        score = score + torch.zeros(batch).index_add_(0, sample, item_score[ids]) / lengths
        bags.append((ids, offsets, weights))
    clicks = (torch.rand(batch, generator=g) < torch.sigmoid(score)).float()
    return dense, bags, clicks


def train(device="cpu", steps=None, amp=False, tiny=False, seed=0, overfit=False, log=print, batch=None,
          lr=None, optim="adagrad") -> list[float]:
    device = torch.device(device)
    cfg = TINY if tiny else Config()
    steps = 50 if steps is None else steps
    batch = batch or (32 if tiny else 256)
    common.seed_all(seed)
    model = DLRM(cfg).to(device)
    if optim == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=lr or 0.1)
    elif optim == "adagrad":
        opt = torch.optim.Adagrad(model.parameters(), lr=lr or 0.05)
    else:
        raise ValueError(f"unknown optimizer {optim!r} (sgd or adagrad)")
    if log:
        log(f"dlrm: {sum(p.numel() for p in model.parameters())} parameters on {device}, {steps} steps, "
            f"batch {batch}, {optim}{', bf16 autocast' if amp else ''}")
    record = common.LossLog(device, log)
    model.train()
    for step, (dense, bags, clicks) in common.batches(lambda i: make_batch(cfg, batch, i, seed), steps, overfit):
        dense, clicks = common.to(device, dense, clicks)
        bags = [common.to(device, *bag) for bag in bags]
        with common.autocast(device, amp):
            loss = F.binary_cross_entropy_with_logits(model(dense, bags).float(), clicks)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        record(step, loss)
    return record.losses


def main(argv: list[str] | None = None) -> int:
    def extra(p):
        p.add_argument("--optim", default="adagrad", choices=("sgd", "adagrad"))
    return common.run_main(train, __doc__, argv, extra)


if __name__ == "__main__":
    sys.exit(main())
