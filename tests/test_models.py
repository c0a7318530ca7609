"""Model-level checks: an MLP and a tiny GPT train 20 steps on tpu and on cpu from the
same seed; f32 losses agree within 1e-4 relative, and no op fell back to the CPU."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu


def _train(model_fn, batch_fn, device: str, steps: int = 20, lr: float = 3e-3):
    torch.manual_seed(0)
    model = model_fn().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses = []
    for step in range(steps):
        x, y = batch_fn(step)
        x, y = x.to(device), y.to(device)
        opt.zero_grad(set_to_none=True)
        loss = model.loss(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(37, 64), nn.GELU(), nn.Linear(64, 64), nn.ReLU(),
                                 nn.LayerNorm(64), nn.Linear(64, 7))

    def loss(self, x, y):
        return F.cross_entropy(self.net(x), y)


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        mask = torch.tril(torch.ones(T, T, device=x.device, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 29, d: int = 32, T: int = 16, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(T, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def loss(self, idx, targets):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def _mlp_batch(step: int):
    # one fixed batch: the loss must go down as the model fits it
    g = torch.Generator().manual_seed(100)
    return torch.randn(24, 37, generator=g), torch.randint(0, 7, (24,), generator=g)


def _gpt_batch(step: int):
    g = torch.Generator().manual_seed(200 + step % 2)
    data = torch.randint(0, 29, (4, 17), generator=g)
    return data[:, :-1], data[:, 1:]


def _compare(a, b, rtol=1e-4):
    for i, (p, q) in enumerate(zip(a, b)):
        assert abs(p - q) <= rtol * abs(p), f"step {i}: cpu {p} vs tpu {q}"


def test_mlp_trains_like_cpu():
    before = torch_tpu.metrics()["fallback_ops"]
    cpu = _train(MLP, _mlp_batch, "cpu")
    tpu = _train(MLP, _mlp_batch, "tpu")
    _compare(cpu, tpu)
    assert tpu[-1] < tpu[0]
    assert torch_tpu.metrics()["fallback_ops"] == before


@pytest.mark.slow
def test_tiny_gpt_trains_like_cpu():
    before = torch_tpu.metrics()["fallback_ops"]
    cpu = _train(TinyGPT, _gpt_batch, "cpu")
    tpu = _train(TinyGPT, _gpt_batch, "tpu")
    _compare(cpu, tpu)
    assert tpu[-1] < tpu[0]
    assert torch_tpu.metrics()["fallback_ops"] == before


def test_module_to_keeps_tied_weights_and_parameter_identity():
    emb = nn.Embedding(11, 4)
    head = nn.Linear(4, 11, bias=False)
    head.weight = emb.weight  # tied, as in GPT-2 / Qwen
    model = nn.ModuleDict({"emb": emb, "head": head})
    p = model["emb"].weight
    model.to("tpu")
    assert model["emb"].weight is model["head"].weight is p  # same Parameter, like CUDA
    assert p.device.type == "tpu" and len(list(model.parameters())) == 1
    model.to("cpu")
    assert model["emb"].weight is model["head"].weight
