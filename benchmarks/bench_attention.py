"""Causal self-attention forward+backward: PyTorch CPU's F.scaled_dot_product_attention vs the tpu
device (fused flash-style host kernel), in one process, on GPT-like shapes.

Prints milliseconds per forward+backward step (median of synchronized runs after warm-up) and the
cpu/tpu speed ratio (> 1: tpu faster). f32 and bf16. `--quick` runs one small shape only.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from common import bench, machine

# (name, B, H, Hkv, T, E)
SHAPES = [
    ("minGPT  B8  H8  T256 E64", 8, 8, 8, 256, 64),
    ("Llama GQA B4 H8/2 T512 E64", 4, 8, 2, 512, 64),
]


def step_fn(device: str, shape, dtype):
    _, b, h, hkv, t, e = shape
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, t, e, generator=g).to(device, dtype).requires_grad_()
    k = torch.randn(b, hkv, t, e, generator=g).to(device, dtype).requires_grad_()
    v = torch.randn(b, hkv, t, e, generator=g).to(device, dtype).requires_grad_()
    gy = torch.randn(b, h, t, e, generator=g).to(device, dtype)

    def step():
        q.grad = k.grad = v.grad = None
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=hkv != h)
        y.backward(gy)
    return step


def main() -> None:
    quick = "--quick" in sys.argv
    print(machine())
    shapes = SHAPES[:1] if quick else SHAPES
    for dtype in ([torch.float32] if quick else [torch.float32, torch.bfloat16]):
        for shape in shapes:
            t_cpu = bench(step_fn("cpu", shape, dtype), "cpu", warmup=1, repeat=3)
            t_tpu = bench(step_fn("tpu", shape, dtype), "tpu", warmup=1, repeat=3)
            print(f"{shape[0]:30s} {str(dtype)[6:]:8s} cpu {t_cpu * 1e3:8.1f} ms  tpu {t_tpu * 1e3:8.1f} ms  "
                  f"ratio {t_cpu / t_tpu:5.2f}x")


if __name__ == "__main__":
    main()
