"""Trains a character-level GPT on this project's own docs and C headers, then samples a few characters.

    python examples/mingpt/train.py --device tpu [--steps N] [--amp] [--tiny] [--sample N]
    python examples/mingpt/train.py --device cpu           # same data, same initial weights

The corpus is read at run time from the repository (README.md, docs/*.md, csrc/**/*.h): nothing is downloaded or
copied from elsewhere. The model is the classic GPT-2 block (LayerNorm, causal self-attention written out with a
masked softmax, GELU MLP) with learned position embeddings and the output layer tied to the token embedding.
"""
from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402  (examples/common.py)


def load_corpus(max_chars: int | None = None) -> str:
    """The project's README, docs and C headers concatenated in a fixed (sorted) order."""
    root = common.REPO_ROOT
    files = [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted((root / "csrc").rglob("*.h"))]
    text = "\n".join(f.read_text(encoding="utf-8", errors="replace") for f in files if f.is_file())
    text = "".join(c for c in text if c == "\n" or 32 <= ord(c) < 127)  # printable ASCII keeps the vocab small
    return text[:max_chars] if max_chars else text


@dataclass
class Config:
    vocab: int = 96
    block: int = 64       # context length
    dim: int = 128
    n_layers: int = 4
    n_heads: int = 4


TINY = Config(block=16, dim=32, n_layers=2, n_heads=4)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.register_buffer("mask", torch.tril(torch.ones(cfg.block, cfg.block, dtype=torch.bool)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.shape[-1]))                                # (B, H, T, T)
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.attn = CausalSelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.block, cfg.dim)
        self.blocks = nn.Sequential(*(Block(cfg) for _ in range(cfg.n_layers)))
        self.ln = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.head.weight = self.tok.weight  # weight tying, as in GPT-2
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def _apply(self, fn, *args, **kwargs):
        # Module.to() replaces each parameter with a new one when moving to a device whose tensors cannot share
        # the CPU tensor's type (PyTorch allows the in-place swap only for its built-in backends): tie again.
        super()._apply(fn, *args, **kwargs)
        self.head.weight = self.tok.weight
        return self

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx: (B, T) -> logits (B, T, vocab)."""
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        return self.head(self.ln(self.blocks(x)))

    @torch.no_grad()
    def sample(self, idx: torch.Tensor, n: int, temperature: float = 0.8) -> torch.Tensor:
        """Appends n sampled tokens to idx (B, T0). Gumbel-max: argmax(logits / temperature + Gumbel noise) is a
        draw from softmax(logits / temperature), using only rand, log and argmax on the device."""
        for _ in range(n):
            logits = self(idx[:, -self.cfg.block:])[:, -1].float() / temperature  # (B, vocab)
            gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp_min(1e-10)))
            idx = torch.cat([idx, (logits + gumbel).argmax(dim=-1, keepdim=True)], dim=1)
        return idx

def train(device="cpu", steps=None, amp=False, tiny=False, seed=0, overfit=False, log=print, batch=None,
          lr=3e-3, sample=None, max_chars=None) -> list[float]:
    device = torch.device(device)
    cfg = TINY if tiny else Config()
    steps = 60 if steps is None else steps
    batch = batch or (8 if tiny else 32)
    sample = (40 if not tiny else 0) if sample is None else sample
    text = load_corpus(max_chars or (20_000 if tiny else None))
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    cfg = dataclasses.replace(cfg, vocab=len(chars))
    common.seed_all(seed)
    model = GPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)

    def get_batch(i: int) -> torch.Tensor:
        starts = torch.randint(0, len(data) - cfg.block - 1, (batch,), generator=torch.Generator().manual_seed(seed + i))
        return torch.stack([data[s:s + cfg.block + 1] for s in starts.tolist()])  # (B, block + 1)

    if log:
        log(f"minGPT: {len(text)} characters, vocab {cfg.vocab}, {sum(p.numel() for p in model.parameters())} "
            f"parameters on {device}, {steps} steps{', bf16 autocast' if amp else ''}")
    record = common.LossLog(device, log)
    model.train()
    for step, chunk in common.batches(get_batch, steps, overfit):
        chunk = chunk.to(device)
        with common.autocast(device, amp):
            logits = model(chunk[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, cfg.vocab), chunk[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        record(step, loss)
    if sample:
        model.eval()
        prompt = torch.tensor([[stoi[c] for c in "The "]], device=device)
        with common.autocast(device, amp):
            out = model.sample(prompt, sample)
        if log:
            log("sample: " + repr("".join(chars[i] for i in out[0].tolist())))
    return record.losses


def main(argv: list[str] | None = None) -> int:
    def extra(p):
        p.add_argument("--sample", type=int, default=None, help="characters to sample after training")
    return common.run_main(train, __doc__, argv, extra)


if __name__ == "__main__":
    sys.exit(main())
