"""Shared timing helpers: PyTorch CPU and `tpu` are measured in the same process."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def sync(device: str) -> None:
    if device.startswith("tpu"):
        torch.tpu.synchronize()


SETTLE_S = 0.05


def settle() -> None:
    """Let the other side's threads go idle before a measurement. After a parallel region PyTorch CPU's
    OpenMP workers keep spinning for several ms (about 9 ms measured on the 2-core VM, session 12), and our
    pool's workers spin briefly too: a `tpu` measurement started right after a CPU one lost a core to them
    (75-107 us of CPU per small `tpu` call during that spell, none after a 50 ms pause)."""
    time.sleep(SETTLE_S)


def bench(fn: Callable[[], object], device: str, warmup: int = 3, repeat: int = 10, inner: int = 1) -> float:
    """Median seconds per call of fn (called `inner` times per sample), synchronized, after `settle()`."""
    settle()
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


def alternate(measure: Callable[[str], float], rounds: int) -> tuple[list[float], list[float]]:
    """measure("cpu"), measure("tpu"), measure("cpu"), ... for `rounds` rounds, so a slow spell of a shared
    machine hits both sides alike (as bench_examples.py does): each side's values, in round order."""
    cpus, tpus = [], []
    for _ in range(rounds):
        cpus.append(measure("cpu"))
        tpus.append(measure("tpu"))
    return cpus, tpus


def summary(cpus: list[float], tpus: list[float], speed: bool = False) -> tuple[float, float, float, str]:
    """Medians of each side, the median of the rounds' ratios (tpu/cpu time, or cpu/tpu when `speed`) and the
    rounds' spread as text ("" for one round)."""
    ratios = [(c / t if speed else t / c) for c, t in zip(cpus, tpus)]
    spread = f" (rounds {min(ratios):.2f}-{max(ratios):.2f}x)" if len(ratios) > 1 else ""
    return statistics.median(cpus), statistics.median(tpus), statistics.median(ratios), spread


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
