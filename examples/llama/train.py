"""Trains a tiny Llama (RMSNorm, rotary embeddings, SwiGLU, grouped-query attention) and generates with a KV cache.

    python examples/llama/train.py --device tpu [--steps N] [--amp] [--tiny]
    python examples/llama/train.py --device cpu            # same data, same initial weights

The data is synthetic (no downloads): each sequence counts modulo the vocabulary with its own start and stride,
x[t+1] = (x[t] + stride) % vocab, so after a few tokens the next one is predictable and the loss falls.
Attention goes through F.scaled_dot_product_attention(is_causal=True, enable_gqa=True): the key/value heads are
shared by groups of query heads. After training, `generate` decodes greedily with a preallocated KV cache.
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
    vocab: int = 64
    dim: int = 128
    n_layers: int = 4
    n_heads: int = 8
    n_kv_heads: int = 2       # grouped-query attention: n_heads // n_kv_heads query heads share one kv head
    hidden: int = 344         # SwiGLU width (about 8/3 * dim)
    max_seq: int = 64
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    qkv_bias: bool = False    # Qwen-2 sets this
    tie_embeddings: bool = False


TINY = Config(vocab=32, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden=64, max_seq=16)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in f32 as Llama does, then back to the input dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.type_as(x) * self.weight


def rope_tables(head_dim: int, max_seq: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: (max_seq, head_dim), the rotate-half layout."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # (hd/2,)
    angles = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv_freq)               # (T, hd/2)
    angles = torch.cat([angles, angles], dim=-1)                                              # (T, hd)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, H, T, hd); cos, sin: (T, hd)."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x * cos + rotated * sin).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = cfg.n_heads, cfg.n_kv_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * self.head_dim, bias=cfg.qkv_bias)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=cfg.qkv_bias)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=cfg.qkv_bias)
        self.wo = nn.Linear(cfg.n_heads * self.head_dim, cfg.dim, bias=False)
        self.cache: tuple[torch.Tensor, torch.Tensor] | None = None  # (B, n_kv, max_seq, hd) each

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pos: int | None = None) -> torch.Tensor:
        """x: (B, T, C). pos is None in training; in generation it is where x starts in the KV cache."""
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)     # (B, H, T, hd)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, hd)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, hd)
        start = 0 if pos is None else pos
        q = apply_rope(q, cos[start:start + T], sin[start:start + T])
        k = apply_rope(k, cos[start:start + T], sin[start:start + T])
        if pos is not None:
            assert self.cache is not None
            ck, cv = self.cache
            ck[:, :, pos:pos + T] = k
            cv[:, :, pos:pos + T] = v
            k, v = ck[:, :, :pos + T], cv[:, :, :pos + T]
        # a prompt (pos 0) is causal over itself; a single decoded token attends to the whole cache
        causal = pos is None or T > 1
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)  # (B, H, T, hd)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.w2 = nn.Linear(cfg.hidden, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.attn_norm, self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps), RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn, self.ffn = Attention(cfg), FeedForward(cfg)

    def forward(self, x, cos, sin, pos=None):
        x = x + self.attn(self.attn_norm(x), cos, sin, pos)
        return x + self.ffn(self.ffn_norm(x))


class Transformer(nn.Module):
    """The Llama decoder; Qwen-2 is the same module with qkv_bias, tied embeddings and its RoPE base."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.tie_weights()
        cos, sin = rope_tables(cfg.dim // cfg.n_heads, cfg.max_seq, cfg.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init)

    def tie_weights(self) -> None:
        if self.cfg.tie_embeddings:
            self.head.weight = self.embed.weight

    def _apply(self, fn, *args, **kwargs):
        # Module.to() replaces each parameter with a new one when moving to a device whose tensors cannot share
        # the CPU tensor's type (PyTorch allows the in-place swap only for its built-in backends): tie again.
        super()._apply(fn, *args, **kwargs)
        self.tie_weights()
        return self

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, pos: int | None = None) -> torch.Tensor:
        """idx: (B, T) token ids -> logits (B, T, vocab)."""
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, pos)
        return self.head(self.norm(x))

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
        """Greedy decoding with a KV cache: one forward over the prompt, then one token per step."""
        B, T = prompt.shape
        total = T + new_tokens
        assert total <= self.cfg.max_seq
        hd = self.cfg.dim // self.cfg.n_heads
        dtype = self.embed.weight.dtype
        for layer in self.layers:
            shape = (B, self.cfg.n_kv_heads, total, hd)
            layer.attn.cache = (torch.zeros(shape, device=prompt.device, dtype=dtype),
                                torch.zeros(shape, device=prompt.device, dtype=dtype))
        out = prompt
        logits = self(prompt, pos=0)
        for i in range(new_tokens):
            nxt = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
            out = torch.cat([out, nxt], dim=1)
            if i + 1 < new_tokens:
                logits = self(nxt, pos=T + i)
        for layer in self.layers:
            layer.attn.cache = None
        return out


def counting_batch(i: int, batch: int, seq: int, vocab: int, seed: int) -> torch.Tensor:
    """(batch, seq + 1) int64 on the CPU: x[t+1] = (x[t] + stride) % vocab, start and stride per row."""
    g = torch.Generator().manual_seed(seed * 100003 + i)
    start = torch.randint(0, vocab, (batch, 1), generator=g)
    stride = torch.randint(1, 4, (batch, 1), generator=g)
    return (start + stride * torch.arange(seq + 1)) % vocab


def train_lm(cfg: Config, device="cpu", steps=None, amp=False, seed=0, overfit=False, batch=None,
             lr=3e-3, log=print, generate=True, name="llama") -> list[float]:
    """The training loop Llama and Qwen share: AdamW on the counting task, then greedy KV-cache decoding."""
    device = torch.device(device)
    steps = 40 if steps is None else steps
    batch = batch or 16
    seq = cfg.max_seq // 2
    common.seed_all(seed)
    model = Transformer(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    if log:
        log(f"{name}: {sum(p.numel() for p in model.parameters())} parameters on {device}, "
            f"{steps} steps, batch {batch}x{seq}{', bf16 autocast' if amp else ''}")
    record = common.LossLog(device, log)
    model.train()
    for step, data in common.batches(lambda i: counting_batch(i, batch, seq, cfg.vocab, seed), steps, overfit):
        data = data.to(device)
        x, y = data[:, :-1], data[:, 1:]
        with common.autocast(device, amp):
            logits = model(x)
            loss = F.cross_entropy(logits.float().reshape(-1, cfg.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        record(step, loss)
    if generate:
        model.eval()
        prompt = counting_batch(10**6, 2, 4, cfg.vocab, seed)[:, :4].to(device)
        with common.autocast(device, amp):
            out = model.generate(prompt, cfg.max_seq // 2)
        if log:
            for row in out.cpu().tolist():
                log(f"generated: {row}")
    return record.losses


def train(device="cpu", steps=None, amp=False, tiny=False, seed=0, overfit=False, log=print, **kw) -> list[float]:
    return train_lm(TINY if tiny else Config(), device, steps, amp, seed, overfit, log=log, **kw)


def main(argv: list[str] | None = None) -> int:
    return common.run_main(train, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
