"""conv2d throughput on ResNet-style shapes: PyTorch CPU vs the tpu device (host driver), in one process.

Prints GFLOP/s (median of a few synchronized runs after warm-up) for the forward pass, the
input gradient and the weight gradient (each the forward's FLOPs), and the tpu/cpu ratios. Higher is
better. f32, NCHW; `--channels-last` runs the same shapes in channels_last, `--bf16` in bfloat16,
`--resnet` adds the small-map shapes of examples/resnet (batch 32, 16x16 down to 2x2).

`--example unet` (or resnet) instead records every convolution of one training step of that example on
PyTorch CPU (f32, or bf16 autocast with `--bf16`; shapes, strides, dtypes, which gradients) and times each
distinct call on both devices (best-of-7 process CPU time, which counts every thread: run it
with `--threads 1` and TORCH_TPU_NUM_THREADS=1 on a shared machine): per call and direction ms cpu / tpu, times how often a step makes it, and the
step's conv totals, largest tpu excess first. `--threads N` sets PyTorch's thread count (set tpu's with
TORCH_TPU_NUM_THREADS).
"""
from __future__ import annotations

import os
import sys
from collections import Counter

import torch
import torch.nn.functional as F

from common import bench, machine, settle, sync

# (name, N, C, H, W, O, k, stride, padding)
SHAPES = [
    ("conv1 7x7/2  3->64  112", 4, 3, 112, 112, 64, 7, 2, 3),
    ("3x3    64->64    56", 4, 64, 56, 56, 64, 3, 1, 1),
    ("3x3/2 128->128   56", 4, 128, 56, 56, 128, 3, 2, 1),
    ("3x3   256->256   14", 4, 256, 14, 14, 256, 3, 1, 1),
    ("1x1   256->64    56", 4, 256, 56, 56, 64, 1, 1, 0),
]
RESNET = [
    ("ex 3x3 16->16    16", 32, 16, 16, 16, 16, 3, 1, 1),
    ("ex 3x3/2 16->32  16", 32, 16, 16, 16, 32, 3, 2, 1),
    ("ex 3x3 32->32     8", 32, 32, 8, 8, 32, 3, 1, 1),
    ("ex 3x3 64->64     4", 32, 64, 4, 4, 64, 3, 1, 1),
    ("ex 3x3 128->128   2", 32, 128, 2, 2, 128, 3, 1, 1),
]


def run(device: str, shape, channels_last: bool, dtype=torch.float32) -> tuple[float, float, float]:
    _, n, c, h, w, o, k, s, p = shape
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, c, h, w, generator=g).to(dtype)
    wt = (torch.randn(o, c, k, k, generator=g) * 0.05).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
        wt = wt.contiguous(memory_format=torch.channels_last)
    x = x.to(device)
    wt = wt.to(device)
    y = F.conv2d(x, wt, stride=s, padding=p)
    gy = torch.randn(y.shape, generator=g).to(dtype).to(device)
    flops = 2.0 * y.numel() * c * k * k
    cb = torch.ops.aten.convolution_backward
    args = (None, [s, s], [p, p], [1, 1], False, [0, 0], 1)
    t_f = bench(lambda: F.conv2d(x, wt, stride=s, padding=p), device, warmup=1, repeat=3)
    t_i = bench(lambda: cb(gy, x, wt, *args, [True, False, False]), device, warmup=1, repeat=3)
    t_w = bench(lambda: cb(gy, x, wt, *args, [False, True, False]), device, warmup=1, repeat=3)
    return flops / t_f / 1e9, flops / t_i / 1e9, flops / t_w / 1e9


def record_example(name: str, amp: bool) -> Counter:
    """Convolution calls of one CPU training step of examples/<name>: Counter of call keys."""
    from torch.utils._python_dispatch import TorchDispatchMode
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    sys.modules.pop("common", None)
    import common as ex_common  # examples/common.py
    sys.modules.pop("common", None)
    train = ex_common.import_example(name).train
    calls: Counter = Counter()

    def desc(t):
        return (tuple(t.shape), tuple(t.stride()), t.dtype)

    class Rec(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.ops.aten.convolution.default:
                x, w, b, st, pd, dl, tr, op, gr = args
                calls[("fwd", desc(x), desc(w), tuple(st), tuple(pd), tuple(dl), tr, tuple(op), gr, b is not None)] += 1
            elif func is torch.ops.aten.convolution_backward.default:
                gy, x, w, bs, st, pd, dl, tr, op, gr, mask = args
                calls[("bwd", desc(gy), desc(x), desc(w), tuple(st), tuple(pd), tuple(dl), tr, tuple(op), gr,
                       tuple(mask))] += 1
            return func(*args, **kwargs)

    train(device="cpu", steps=1, amp=amp, log=None)  # warm-up (lazy init)
    with Rec():
        train(device="cpu", steps=1, amp=amp, log=None)
    return calls


def _mk(d, device, g):
    shape, stride, dtype = d
    n = sum((s - 1) * st for s, st in zip(shape, stride)) + 1
    base = torch.randn(n, generator=g).to(dtype) * 0.3
    return torch.as_strided(base.to(device), shape, stride)


def cpu_time(fn, device: str, repeat: int = 7) -> float:
    """Best-of-`repeat` process CPU time (all threads, the device's worker included) per call."""
    import time
    fn()
    sync(device)
    settle()
    best = float("inf")
    for _ in range(repeat):
        c0 = time.process_time()
        fn()
        sync(device)
        best = min(best, time.process_time() - c0)
    return best


def run_example(name: str, amp: bool) -> None:
    calls = record_example(name, amp)
    rows = []
    for key, cnt in calls.items():
        g = torch.Generator().manual_seed(0)
        times = {}
        for device in ("cpu", "tpu"):
            if key[0] == "fwd":
                _, xd, wd, st, pd, dl, tr, op, gr, has_b = key
                x, w = _mk(xd, device, g), _mk(wd, device, g)
                b = torch.zeros(wd[0][1] * gr if tr else wd[0][0], dtype=wd[2], device=device) if has_b else None
                fn = lambda: torch.ops.aten.convolution(x, w, b, st, pd, dl, tr, op, gr)  # noqa: E731
            else:
                _, yd, xd, wd, st, pd, dl, tr, op, gr, mask = key
                gy, x, w = _mk(yd, device, g), _mk(xd, device, g), _mk(wd, device, g)
                fn = lambda: torch.ops.aten.convolution_backward(gy, x, w, None, st, pd, dl, tr, op, gr, mask)  # noqa: E731
            times[device] = cpu_time(fn, device)
        rows.append((key, cnt, times["cpu"], times["tpu"]))
    rows.sort(key=lambda r: -(r[3] - r[2]) * r[1])
    tc = sum(r[1] * r[2] for r in rows)
    tt = sum(r[1] * r[3] for r in rows)
    print(f"{name} {'bf16 autocast' if amp else 'f32'}: {sum(calls.values())} conv calls per step, "
          f"conv total cpu {tc * 1e3:.1f} ms, tpu {tt * 1e3:.1f} ms ({tc / tt:.2f}x)")
    for key, cnt, c, t in rows:
        if key[0] == "fwd":
            _, xd, wd, st, pd, dl, tr, op, gr, _b = key
            what = f"fwd {'T' if tr else ' '}"
            xs = xd
        else:
            _, yd, xd, wd, st, pd, dl, tr, op, gr, mask = key
            what = "bwd " + "".join(c for c, m in zip("iwb", mask) if m)
            xs = xd
        cl = "CL" if xs[1][1] == 1 and xs[0][1] > 1 else "  "
        print(f"{what:7s} x{list(xs[0])} {cl} w{list(wd[0])} s{st[0]} p{pd[0]} g{gr} {str(xs[2])[6:]:8s} "
              f"x{cnt}: cpu {c * 1e3:7.3f} tpu {t * 1e3:7.3f} ms ({c / t:4.2f}x) excess {(t - c) * cnt * 1e3:+7.2f} ms")


def main() -> None:
    if "--threads" in sys.argv:
        n = int(sys.argv[sys.argv.index("--threads") + 1])
        torch.set_num_threads(n)  # tpu's pool: TORCH_TPU_NUM_THREADS=n in the environment
    if "--example" in sys.argv:
        print("machine:", machine())
        run_example(sys.argv[sys.argv.index("--example") + 1], "--bf16" in sys.argv)
        return
    channels_last = "--channels-last" in sys.argv
    dtype = torch.bfloat16 if "--bf16" in sys.argv else torch.float32
    print("machine:", machine())
    print("layout:", "channels_last" if channels_last else "NCHW", "dtype:", dtype)
    for shape in SHAPES + (RESNET if "--resnet" in sys.argv else []):
        c = run("cpu", shape, channels_last, dtype)
        t = run("tpu", shape, channels_last, dtype)
        print(f"{shape[0]:22s} " + "  ".join(
            f"{nm}: cpu {a:6.1f} tpu {b:6.1f} ({b / a:4.2f}x)" for nm, a, b in zip(("fwd", "bwd-in", "bwd-w"), c, t)))


if __name__ == "__main__":
    main()
