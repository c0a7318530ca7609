"""Per-op dispatch overhead, elementwise bandwidth and row / norm ops: PyTorch CPU vs tpu in one process.

Prints µs/op for a tiny add (lower is better; target tpu <= 1.5x CPU), GB/s for a large elementwise chain
(target tpu >= 0.8x CPU), ms per forward + backward of the examples' row and norm ops and µs per call of bf16
elementwise ops and attention-head copies (time ratios: > 1 is slower). Every case runs --rounds alternating cpu/tpu rounds (each the median of several calls) and
prints the median of each side, the median round's ratio and the spread of the rounds: on a shared virtual
machine one side's single runs vary by up to 2x.
Usage: python benchmarks/bench_ops.py [--rounds 5] [--threads N] [--only softmax,group_norm]
(one thread on both sides: TORCH_TPU_NUM_THREADS=1 ... --threads 1)
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import alternate, bench, machine, summary  # noqa: E402


def tiny_add(device: str) -> float:
    a = torch.randn(8).to(device)
    b = torch.randn(8).to(device)
    n = 2000
    def run():
        for _ in range(n):
            torch.add(a, b)
    return bench(run, device, warmup=2, repeat=7) / n


CHAIN_NUMEL = 1 << 23
CHAIN_BYTES = 4 * CHAIN_NUMEL * (3 + 3 + 2 + 2)  # 4 ops: each reads 1-2 and writes 1 array


def chain(device: str) -> float:
    x = torch.randn(CHAIN_NUMEL).to(device)
    y = torch.randn(CHAIN_NUMEL).to(device)
    def run():
        z = x * y
        z = z + x
        z = torch.relu(z)
        z = z * 0.5
        return z
    return bench(run, device, warmup=2, repeat=7)


def _gn(c: int, hw: int):
    g = torch.Generator().manual_seed(1)
    w, b = torch.randn(c, generator=g), torch.randn(c, generator=g)
    return torch.randn(16, c, hw, hw, generator=g), lambda x: F.group_norm(x, 8, w.to(x.device), b.to(x.device))


def row_cases() -> dict:
    """The examples' row and norm ops (minGPT's softmax / layer norm, UNet's small GroupNorm maps), fwd + bwd."""
    g = torch.Generator().manual_seed(0)
    att = torch.randn(32, 4, 64, 64, generator=g)
    att = att.masked_fill(~torch.tril(torch.ones(64, 64, dtype=torch.bool)), float("-inf"))
    w, b = torch.randn(128, generator=g), torch.randn(128, generator=g)
    return {
        "masked softmax [32,4,64,64]": (att, lambda x: F.softmax(x, dim=-1)),
        "softmax dim=1 [64,512,8]": (torch.randn(64, 512, 8, generator=g), lambda x: F.softmax(x, dim=1)),
        "log_softmax [2048,96]": (torch.randn(2048, 96, generator=g), lambda x: F.log_softmax(x, dim=-1)),
        "layer_norm [32,64,128]": (torch.randn(32, 64, 128, generator=g),
                                   lambda x: F.layer_norm(x, (128,), w.to(x.device), b.to(x.device))),
        "group_norm [16,64,16,16] G8": _gn(64, 16),
        "group_norm [16,128,4,4] G8": _gn(128, 4),
    }


def bf16_cases() -> dict:
    """bf16 elementwise work of the autocast examples (minGPT's [32,64,512] MLP activations, attention heads):
    one call each, forward only (the backward ops are cases of their own)."""
    g = torch.Generator().manual_seed(3)
    x, y = (torch.randn(32, 64, 512, generator=g).bfloat16() for _ in range(2))
    s = torch.softmax(torch.randn(32, 4, 64, 64, generator=g), -1).bfloat16()
    gs = torch.randn(32, 4, 64, 64, generator=g).bfloat16()
    qkv = torch.randn(32, 64, 384, generator=g).bfloat16()
    heads = lambda t: t[:, :, 128:256].view(32, 64, 4, 32).transpose(1, 2)  # noqa: E731  (B, H, T, hd)
    return {
        "bf16 gelu [32,64,512]": ((x,), F.gelu),
        "bf16 gelu_backward": ((y, x), torch.ops.aten.gelu_backward),
        "bf16 softmax_backward [32,4,64,64]": (
            (gs, s), lambda g_, s_: torch.ops.aten._softmax_backward_data(g_, s_, -1, torch.bfloat16)),
        "bf16 add": ((x, y), torch.add),
        "bf16 (a*b+a)*0.5": ((x, y), lambda a, b: (a * b + a) * 0.5),
        "bf16 heads .contiguous() [B,H,T,hd]": ((qkv,), lambda t: heads(t).contiguous()),
        "bf16 heads^T .contiguous() [B,H,hd,T]": ((qkv,), lambda t: heads(t).transpose(-2, -1).contiguous()),
        "bf16 merge heads [B,T,H,hd]": ((heads(qkv).contiguous(),), lambda t: t.transpose(1, 2).contiguous()),
    }


def bf16_op(device: str, args, fn) -> float:
    xs = [a.to(device) for a in args]
    return bench(lambda: fn(*xs), device, warmup=3, repeat=15, inner=10)


def row_op(device: str, x: torch.Tensor, fn) -> float:
    xd = x.to(device).requires_grad_()
    gy = torch.randn(x.shape, generator=torch.Generator().manual_seed(2)).to(device)
    def run():
        y = fn(xd)
        (gx,) = torch.autograd.grad(y, xd, gy)
        return gx
    return bench(run, device, warmup=2, repeat=9)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    ap.add_argument("--only", default="", help="comma-separated substrings of case names")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print("machine:", machine())
    print(f"each case: median of {args.rounds} alternating cpu/tpu rounds")
    want = lambda name: not args.only or any(s in name for s in args.only.split(","))  # noqa: E731
    if want("tiny add"):
        c, t, r, sp = summary(*alternate(tiny_add, args.rounds))
        print(f"tiny add (8 floats): cpu {c * 1e6:.2f} us/op, tpu {t * 1e6:.2f} us/op, "
              f"tpu/cpu time ratio {r:.2f}x{sp} (target <= 1.5x)")
    if want("chain"):
        c, t, r, sp = summary(*alternate(chain, args.rounds), speed=True)
        print(f"elementwise chain (8M floats, 4 ops): cpu {CHAIN_BYTES / c / 1e9:.1f} GB/s, "
              f"tpu {CHAIN_BYTES / t / 1e9:.1f} GB/s, tpu/cpu {r:.2f}x{sp} (target >= 0.8x)")
    for name, (x, fn) in row_cases().items():
        if not want(name):
            continue
        c, t, r, sp = summary(*alternate(lambda d: row_op(d, x, fn), args.rounds))
        print(f"{name} fwd+bwd: cpu {c * 1e3:.3f} ms, tpu {t * 1e3:.3f} ms, tpu/cpu time ratio {r:.2f}x{sp}")
    for name, (xs, fn) in bf16_cases().items():
        if not want(name):
            continue
        c, t, r, sp = summary(*alternate(lambda d: bf16_op(d, xs, fn), args.rounds))
        print(f"{name}: cpu {c * 1e6:.1f} us, tpu {t * 1e6:.1f} us, tpu/cpu time ratio {r:.2f}x{sp}")


if __name__ == "__main__":
    main()
