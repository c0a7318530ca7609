"""Trains a small MLP classifier on a synthetic task: what `make run` runs.

    python examples/train_mlp.py --device tpu --steps 300
    python examples/train_mlp.py --device cpu --steps 300     # same data, same initial weights

The training code is plain PyTorch: `import torch` loads torch_tpu, and "tpu" is an ordinary device
string. The data is generated from a fixed seed (no downloads): inputs are Gaussian, labels are the
argmax of a random "teacher" network, so the task is learnable and the loss should fall steadily.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_data(n: int, features: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) on the CPU: x (n, features) float32, y (n,) int64 in [0, classes)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w1 = torch.randn(features, 64, generator=g) / features**0.5
    w2 = torch.randn(64, classes, generator=g) / 8.0
    y = (torch.tanh(x @ w1) @ w2).argmax(dim=1)
    return x, y


def make_model(features: int, hidden: int, classes: int, dropout: float) -> nn.Module:
    return nn.Sequential(
        nn.Linear(features, hidden),
        nn.GELU(),
        nn.Linear(hidden, hidden),
        nn.GELU(),
        nn.Dropout(dropout) if dropout > 0 else nn.Identity(),
        nn.Linear(hidden, classes),
    )


def synchronize(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def report_tpu_metrics() -> int:
    """Prints the runtime counters; returns 1 if any op fell back to the CPU."""
    import torch_tpu  # only for this report; already loaded by `import torch`

    m = torch_tpu.metrics()
    lookups = m["exec_cache_hits"] + m["exec_cache_misses"]
    hit_rate = 100.0 * m["exec_cache_hits"] / lookups if lookups else 0.0
    print(
        f"tpu metrics: ops {m['ops_run']}, executable cache hits {m['exec_cache_hits']} "
        f"misses {m['exec_cache_misses']} ({hit_rate:.1f}% hits), compiles {m['compiles']} "
        f"({1e3 * m['compile_seconds']:.1f} ms), kernels {m['kernels_launched']}, "
        f"cpu fallbacks {m['fallback_ops']}"
    )
    if m["fallback_ops"]:
        print(f"error: ops fell back to the CPU: {m['fallback_counts']}", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="tpu", help="tpu, tpu:1, cpu, ... (default: tpu)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args()

    device = torch.device(args.device)
    features, classes, n = 64, 10, 8192
    torch.manual_seed(args.seed)
    x_cpu, y_cpu = make_data(n, features, classes, args.seed)
    x, y = x_cpu.to(device), y_cpu.to(device)
    model = make_model(features, args.hidden, classes, args.dropout).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    batches = n // args.batch_size

    print(f"training a {sum(p.numel() for p in model.parameters())}-parameter MLP on {device} "
          f"for {args.steps} steps (batch {args.batch_size})")
    model.train()
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        i = (step - 1) % batches
        xb = x[i * args.batch_size : (i + 1) * args.batch_size]  # (B, features)
        yb = y[i * args.batch_size : (i + 1) * args.batch_size]  # (B,)
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % args.log_every == 0 or step == args.steps:
            print(f"step {step:5d} | loss {loss.item():.4f}")
    synchronize(device)
    elapsed = time.perf_counter() - start

    model.eval()
    with torch.no_grad():
        accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
    print(f"train accuracy {100 * accuracy:.1f}% | {args.steps / elapsed:.1f} steps/s "
          f"({elapsed:.2f} s on {device})")
    return report_tpu_metrics() if device.type == "tpu" else 0


if __name__ == "__main__":
    sys.exit(main())
