"""Shared timing helpers: PyTorch CPU and `tpu` are measured in the same process."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def sync(device: str) -> None:
    if device.startswith("tpu"):
        torch.tpu.synchronize()


def bench(fn: Callable[[], object], device: str, warmup: int = 3, repeat: int = 10, inner: int = 1) -> float:
    """Median seconds per call of fn (called `inner` times per sample), synchronized."""
    for _ in range(warmup):
        fn()
    sync(device)
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync(device)
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples)


def machine() -> str:
    name = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import os
    feats = torch.tpu._cpu_features() if hasattr(torch.tpu, "_cpu_features") else ""
    return f"{name}, {os.cpu_count()} logical CPUs, torch {torch.__version__} ({torch.get_num_threads()} threads) {feats}"
