"""GEMM throughput and precision: torch.mm on PyTorch CPU vs the tpu device (host driver), in one process.

1. f32 GFLOP/s (median of several synchronized runs after warm-up) and the tpu/cpu ratio for
   M=N=K=1024 and M=N=4096, K=1024.
2. bf16 GFLOP/s (bf16 operands, f32 accumulation, bf16 result) for 1024^3, x @ W^T (a Linear layer,
   4096 x 1024 by 1024 x 1024) and a batched 8 x (512 x 512 x 64) attention-like product.
3. torch.set_float32_matmul_precision on tpu: "highest" (f32), "high" (3-pass bf16), "medium" (1-pass
   bf16): error of a 1024^3 f32 GEMM against the float64 product, and GFLOP/s. The error of element
   (i, j) is |c_ij - exact_ij| / sum_k |a_ik b_kj| (the scale a dot product's rounding error lives on);
   max and mean over the matrix. Higher GFLOP/s is better; lower error is better.
4. epilogue: a matrix product and the elementwise ops after it (bias, activation, the f32 -> bf16
   convert of autocast), tpu only, one thread, best-of-N process CPU time per call (robust on a shared
   machine). Run it with TORCH_TPU_GEMM_EPILOGUE=0 (product, then separate passes) and without (the
   passes run on each block of C as the GEMM finishes it) for the before/after in RESULTS.md.
5. mingpt: each matrix product and bias-gradient sum of examples/mingpt's bf16 autocast training step
   (sizes, strides and counts per step as a CPU autocast step issues them), replayed on random bf16
   values, one thread both sides, process CPU time (best of --rounds x 20 calls, tpu and CPU
   interleaved): per-op tpu/CPU time ratios and their sum over a step.
Usage: python benchmarks/bench_gemm.py [--only f32,bf16,precision,epilogue,mingpt]
On a CPU with AVX512-BF16 the bf16 rows (and "medium"/"high") use the vdpbf16ps kernel; run with
TORCH_TPU_GEMM_BF16=0 to time the f32-widening kernels instead (the before/after in RESULTS.md).
"""
from __future__ import annotations

import argparse

import torch

from common import bench, machine, settle, sync

SHAPES = [(1024, 1024, 1024), (4096, 4096, 1024)]


def gflops(device: str, m: int, n: int, k: int) -> float:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=g).to(device)
    b = torch.randn(k, n, generator=g).to(device)
    out = torch.empty(m, n, device=device)
    repeat = 10 if m * n * k <= 1 << 30 else 5
    t = bench(lambda: torch.mm(a, b, out=out), device, warmup=3, repeat=repeat)
    return 2.0 * m * n * k / t / 1e9


BF16_CASES = [
    ("mm 1024x1024x1024", lambda d: (torch.randn(1024, 1024), torch.randn(1024, 1024)), lambda a, b: a @ b),
    ("x @ W^T 4096x1024 by 1024x1024", lambda d: (torch.randn(4096, 1024), torch.randn(1024, 1024)),
     lambda a, b: a @ b.t()),
    ("bmm 8 x (512x64 @ 64x512)", lambda d: (torch.randn(8, 512, 64), torch.randn(8, 64, 512)), torch.bmm),
]


def bf16_gflops(device: str, make, fn) -> float:
    torch.manual_seed(0)
    a, b = (t.to(torch.bfloat16).to(device) for t in make(device))
    flops = 2.0 * fn(a, b).numel() * a.shape[-1]  # 2 * (outputs) * K
    t = bench(lambda: fn(a, b), device, warmup=3, repeat=10)
    return flops / t / 1e9


def precision_table() -> None:
    n = 1024
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    exact = a.double() @ b.double()
    scale = a.double().abs() @ b.double().abs()
    old = torch.get_float32_matmul_precision()
    rows = []
    cpu = (a @ b).double()
    e = (cpu - exact).abs() / scale
    rows.append(("PyTorch CPU (f32)", float(e.max()), float(e.mean()), gflops("cpu", n, n, n)))
    for mode in ("highest", "high", "medium"):
        torch.set_float32_matmul_precision(mode)
        c = (a.to("tpu") @ b.to("tpu")).cpu().double()
        e = (c - exact).abs() / scale
        rows.append((f"tpu {mode}", float(e.max()), float(e.mean()), gflops("tpu", n, n, n)))
    torch.set_float32_matmul_precision(old)
    print(f"f32 matmul precision, {n}^3 random normal: error = |c - exact| / sum|a*b|")
    for name, mx, mean, gf in rows:
        print(f"  {name:20s} max {mx:9.3e}  mean {mean:9.3e}  {gf:7.1f} GFLOP/s")


def cpu_time_per_call(fn, device: str, calls: int = 5, samples: int = 7) -> float:
    """Best of `samples` process-CPU-time averages over `calls` calls (after a warm-up)."""
    import time
    for _ in range(2):
        fn()
    sync(device)
    settle()
    best = float("inf")
    for _ in range(samples):
        t0 = time.process_time()
        for _ in range(calls):
            fn()
        sync(device)
        best = min(best, (time.process_time() - t0) / calls)
    return best


def epilogue_table() -> None:
    import torch.nn.functional as F
    import torch_tpu
    torch.set_num_threads(1)
    d = "tpu"
    torch.manual_seed(0)
    x = torch.randn(2048, 1024).to(d)
    w = torch.randn(1024, 1024).to(d) * 0.03
    b = torch.randn(1024).to(d)
    xb, wb, bb = x.bfloat16(), w.bfloat16(), b.bfloat16()
    q = torch.randn(8, 512, 64).bfloat16().to(d)
    k = torch.randn(8, 64, 512).bfloat16().to(d)

    def amp(fn):
        def run():
            with torch.autocast(d, dtype=torch.bfloat16):
                return fn()
        return run

    cases = [
        ("f32 F.linear(x, W, b) 2048x1024x1024", lambda: F.linear(x, w, b)),
        ("bf16 F.linear(x, W, b) 2048x1024x1024", lambda: F.linear(xb, wb, bb)),
        ("autocast bf16 F.linear(x, W, b) (f32 params)", amp(lambda: F.linear(x, w, b))),
        ("bf16 bmm 8 x (512x64 @ 64x512)", lambda: torch.bmm(q, k)),
    ]
    for name, fn in cases:
        print(f"  {name:50s} {cpu_time_per_call(fn, d) * 1e3:8.2f} ms CPU/call")
    torch_tpu.set_fused_eager(True)

    def flushed(fn):
        def run():
            y = fn()
            torch_tpu.flush()
            return y
        return run

    fused = [
        ("fused eager f32 gelu(F.linear(x, W, b))", lambda: F.gelu(F.linear(x, w, b))),
        ("fused eager bf16 gelu(F.linear(x, W, b))", lambda: F.gelu(F.linear(xb, wb, bb))),
        ("fused eager autocast gelu(F.linear(x, W, b))", amp(lambda: F.gelu(F.linear(x, w, b)))),
    ]
    for name, fn in fused:
        print(f"  {name:50s} {cpu_time_per_call(flushed(fn), d) * 1e3:8.2f} ms CPU/call")
    torch_tpu.set_fused_eager(False)


# (calls per step, op, [(sizes, strides) of each tensor argument]) of minGPT's bf16 autocast step
MINGPT_OPS = [
    (4, "addmm", [((384,), (1,)), ((2048, 128), (128, 1)), ((128, 384), (1, 128))]),
    (4, "addmm", [((128,), (1,)), ((2048, 128), (128, 1)), ((128, 128), (1, 128))]),
    (4, "addmm", [((512,), (1,)), ((2048, 128), (128, 1)), ((128, 512), (1, 128))]),
    (4, "addmm", [((128,), (1,)), ((2048, 512), (512, 1)), ((512, 128), (1, 512))]),
    (1, "mm", [((2048, 128), (128, 1)), ((128, 96), (1, 128))]),
    (4, "mm", [((2048, 384), (384, 1)), ((384, 128), (128, 1))]),
    (4, "mm", [((2048, 128), (128, 1)), ((128, 128), (128, 1))]),
    (4, "mm", [((2048, 128), (128, 1)), ((128, 512), (512, 1))]),
    (4, "mm", [((2048, 512), (512, 1)), ((512, 128), (128, 1))]),
    (1, "mm", [((2048, 96), (96, 1)), ((96, 128), (128, 1))]),
    (4, "mm", [((384, 2048), (1, 384)), ((2048, 128), (128, 1))]),
    (4, "mm", [((128, 2048), (1, 128)), ((2048, 128), (128, 1))]),
    (4, "mm", [((512, 2048), (1, 512)), ((2048, 128), (128, 1))]),
    (4, "mm", [((128, 2048), (1, 128)), ((2048, 512), (512, 1))]),
    (1, "mm", [((96, 2048), (1, 96)), ((2048, 128), (128, 1))]),
    (4, "bmm", [((128, 64, 32), (2048, 32, 1)), ((128, 32, 64), (2048, 1, 32))]),
    (4, "bmm", [((128, 64, 64), (4096, 64, 1)), ((128, 64, 32), (2048, 32, 1))]),
    (4, "bmm", [((128, 64, 32), (2048, 32, 1)), ((128, 32, 64), (2048, 64, 1))]),
    (4, "bmm", [((128, 64, 64), (4096, 1, 64)), ((128, 64, 32), (2048, 32, 1))]),
    (4, "bmm", [((128, 64, 64), (4096, 64, 1)), ((128, 64, 32), (2048, 1, 64))]),
    (4, "bmm", [((128, 32, 64), (2048, 1, 32)), ((128, 64, 64), (4096, 64, 1))]),
    (8, "sum0", [((2048, 128), (128, 1))]),
    (4, "sum0", [((2048, 384), (384, 1))]),
    (4, "sum0", [((2048, 512), (512, 1))]),
]


def mingpt_table(rounds: int) -> None:
    import time
    torch.set_num_threads(1)  # the tpu side: run with TORCH_TPU_NUM_THREADS=1

    def strided(values, sizes, strides, device):
        n = 1 + sum((s - 1) * st for s, st in zip(sizes, strides))
        base = torch.zeros(n, dtype=torch.bfloat16)
        base.as_strided(sizes, strides).copy_(values)
        return base.to(device).as_strided(sizes, strides)

    def call(op, ts):
        return {"addmm": lambda: torch.addmm(*ts), "mm": lambda: torch.mm(*ts), "bmm": lambda: torch.bmm(*ts),
                "sum0": lambda: ts[0].sum(0, keepdim=True)}[op]

    def per_call(fn, device, calls=20):
        sync(device)
        settle()
        t0 = time.process_time()
        for _ in range(calls):
            fn()
        sync(device)
        return (time.process_time() - t0) / calls

    tot = {"cpu": 0.0, "tpu": 0.0}
    for count, op, specs in MINGPT_OPS:
        g = torch.Generator().manual_seed(0)
        vals = [torch.randn(s, generator=g).bfloat16() for s, _ in specs]
        fns = {d: call(op, [strided(v, s, st, d) for v, (s, st) in zip(vals, specs)]) for d in ("cpu", "tpu")}
        for d in fns:
            for _ in range(3):
                fns[d]()
        best = {"cpu": float("inf"), "tpu": float("inf")}
        for _ in range(rounds):
            for d in ("cpu", "tpu"):
                best[d] = min(best[d], per_call(fns[d], d))
        for d in tot:
            tot[d] += count * best[d]
        shapes = " x ".join(f"{list(s)}/{list(st)}" for s, st in specs)
        print(f"  {count}x {op:5s} {shapes:72s} cpu {best['cpu'] * 1e6:7.0f} us  tpu {best['tpu'] * 1e6:7.0f} us"
              f"  tpu/cpu time {best['tpu'] / best['cpu']:5.2f}x")
    print(f"  per step: cpu {tot['cpu'] * 1e3:.2f} ms  tpu {tot['tpu'] * 1e3:.2f} ms  tpu/cpu time "
          f"{tot['tpu'] / tot['cpu']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="f32,bf16,precision")
    ap.add_argument("--rounds", type=int, default=7, help="mingpt: best of this many rounds per op")
    args = ap.parse_args()
    only = args.only.split(",")
    print("machine:", machine())
    if "f32" in only:
        for m, n, k in SHAPES:
            cpu, tpu = gflops("cpu", m, n, k), gflops("tpu", m, n, k)
            print(f"sgemm M={m} N={n} K={k}: cpu {cpu:8.1f} GFLOP/s   tpu {tpu:8.1f} GFLOP/s   tpu/cpu {tpu / cpu:5.2f}x")
    if "bf16" in only:
        for name, make, fn in BF16_CASES:
            cpu, tpu = bf16_gflops("cpu", make, fn), bf16_gflops("tpu", make, fn)
            print(f"bf16 {name}: cpu {cpu:8.1f} GFLOP/s   tpu {tpu:8.1f} GFLOP/s   tpu/cpu {tpu / cpu:5.2f}x")
    if "precision" in only:
        precision_table()
    if "epilogue" in only:
        import os
        print("epilogue fusion:", "off" if os.environ.get("TORCH_TPU_GEMM_EPILOGUE", "1").strip().startswith("0") else "on")
        epilogue_table()
    if "mingpt" in only:
        print("minGPT bf16 autocast step ops, one thread, process CPU time (run with TORCH_TPU_NUM_THREADS=1):")
        mingpt_table(args.rounds)


if __name__ == "__main__":
    main()
