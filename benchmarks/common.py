"""Shared timing helpers: PyTorch CPU and `tpu` are measured in the same process.

Core distance ("mode"): a virtual machine's vCPUs may sit on nearby cores ("near") or on cores with different L3
caches ("far"), and data moving between threads costs several times more far. On the 2-vCPU VM of sessions 13-14
the mode flipped every 20 s in session 13 and every 0.1-15 s in session 14 ([vmode] in RESULTS.md).
`core_mode()` probes it (torch_tpu._C._core_distance: a pinned cache-line ping-pong, ~1 ms); alternate() and the
round loops of bench_examples.py / bench_compile.py watch each round with a ModeMonitor (probes before, every
TORCH_TPU_BENCH_MODE_PERIOD_S during, and after it) and summary() prints each round's mode and the ratios per mode;
bench() probes before and after (LAST_MODE). TORCH_TPU_BENCH_MODE=near|far (default any) waits before each round
(at most TORCH_TPU_BENCH_MODE_WAIT_S seconds, default 60) for that mode and takes the reported ratios only from
rounds that stayed in it (docs/env_vars.md, docs/troubleshooting.md).
"""
from __future__ import annotations

import math
import os
import statistics
import threading
import time
from typing import Callable

import torch

# Median round trip above this is "far". Session 14 on the 2-vCPU AMD EPYC VM ([vmode] in RESULTS.md), ~2000
# probes: near 70-130 ns (180-340 TSC cycles), far 230-400 ns (600-1040 cycles), none between 130 and 230.
# Tuned for that VM only: on other hosts (mesh servers ~100-250 ns, SMT siblings ~30 ns) set TORCH_TPU_BENCH_FAR_NS.
# The probe measures the first two CPUs this process may run on.
FAR_NS = float(os.environ.get("TORCH_TPU_BENCH_FAR_NS", "170"))
MODES = ("near", "far", "mixed", "?")  # a round's tag: "mixed" = probes in both modes, "?" = no probe answered
_TAG = {"near": "N", "far": "F", "mixed": "M", "?": "?"}


def core_distance_ns(tries: int = 3) -> float | None:
    """Median cross-core round trip in ns now (None: one CPU, no affinity permission, CPUs too busy to answer,
    or a torch_tpu without the probe). Up to `tries` probes: a CPU taken by another process may not answer in time."""
    import torch_tpu

    probe = getattr(torch_tpu._C, "_core_distance", None)
    if probe is None:
        return None
    for _ in range(tries):
        r = probe()
        if r is not None:
            return float(r["rtt_ns"])
    return None


def core_mode(tries: int = 3) -> str:
    """"near", "far" or "?" (no answer), by core_distance_ns() against FAR_NS."""
    ns = core_distance_ns(tries)
    return "?" if ns is None else ("far" if ns > FAR_NS else "near")


def combine_modes(*modes: str) -> str:
    """One tag for several probes of a round: the mode if all answered ones agree, "mixed" if not, "?" if none
    answered."""
    known = {m for m in modes if m != "?"}
    return "?" if not known else known.pop() if len(known) == 1 else "mixed"


def _env_seconds(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    try:
        value = float(text) if text else default
    except ValueError:
        value = -1.0
    if not value >= 0.0 or math.isinf(value):
        raise ValueError(f"{name}={text!r} is invalid: expected a number of seconds >= 0")
    return value


def wanted_mode() -> str:
    """TORCH_TPU_BENCH_MODE: "any" (default), "near" or "far"."""
    want = os.environ.get("TORCH_TPU_BENCH_MODE", "").strip().lower() or "any"
    if want not in ("any", "near", "far"):
        raise ValueError(f"TORCH_TPU_BENCH_MODE={want!r} is invalid: expected any, near or far")
    return want


def wait_for_mode() -> str:
    """With TORCH_TPU_BENCH_MODE=near|far: probes every 0.5 s until that mode holds, for at most
    TORCH_TPU_BENCH_MODE_WAIT_S seconds (default 60); returns the mode last seen (the caller measures anyway and
    the round is left out of the ratios if it is not the wanted one). "any": one probe."""
    want = wanted_mode()
    mode = core_mode()
    if want == "any":
        return mode
    deadline = time.monotonic() + _env_seconds("TORCH_TPU_BENCH_MODE_WAIT_S", 60.0)
    while mode != want and time.monotonic() < deadline:
        time.sleep(0.5)
        mode = core_mode()
    return mode


class ModeMonitor:
    """`with ModeMonitor(first) as mon: <one round>`: the core mode probed on entry (or `first`, a mode probed just
    before, e.g. wait_for_mode()'s), every TORCH_TPU_BENCH_MODE_PERIOD_S seconds (default 0.5; 0: none) by a
    background thread while the round runs, and on exit. Each probe takes both CPUs for ~0.3-1 ms (longer when
    another process holds one; 1.2-1.9 ms of process CPU under load), ~0.1-0.4% of a round at the default period. mon.mode: combine_modes of the probes;
    mon.far_share: the fraction of answered probes that were far (nan if none). Monitors do not nest: an inner
    one (bench() inside a monitored round) probes nothing and reads "?"."""

    _active = 0

    def __init__(self, first: str | None = None) -> None:
        self.samples: list[str] = [] if first is None else [first]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._outer = False

    def __enter__(self) -> "ModeMonitor":
        period = _env_seconds("TORCH_TPU_BENCH_MODE_PERIOD_S", 0.5)
        self._outer = ModeMonitor._active == 0
        ModeMonitor._active += 1
        if self._outer:
            if not self.samples:
                self.samples.append(core_mode())
            if period > 0:
                self._thread = threading.Thread(target=self._watch, args=(period,), daemon=True)
                self._thread.start()
        return self

    def _watch(self, period: float) -> None:
        while not self._stop.wait(period):
            self.samples.append(core_mode(tries=1))  # while the round runs: no retries ("?" samples are ignored)

    def __exit__(self, *exc) -> None:
        ModeMonitor._active -= 1
        if not self._outer:
            self.samples = []
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.samples.append(core_mode())

    @property
    def mode(self) -> str:
        return combine_modes(*self.samples)

    @property
    def far_share(self) -> float:
        known = [m for m in self.samples if m != "?"]
        return sum(m == "far" for m in known) / len(known) if known else float("nan")


LAST_MODE = "?"  # the mode around the last bench() call (its probes before and after; "?" inside a monitor)


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
    """Median seconds per call of fn (called `inner` times per sample), synchronized, after `settle()`. The core
    mode before and after (each probed after a settle, so spinning worker threads do not delay the probe) is left
    in LAST_MODE ("?" inside a ModeMonitor's round, which probes for it)."""
    global LAST_MODE
    settle()
    watched = ModeMonitor._active > 0  # inside a monitored round: its monitor probes
    before = "?" if watched else core_mode()
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
    if not watched:
        settle()
    LAST_MODE = "?" if watched else combine_modes(before, core_mode())
    return statistics.median(samples)


def alternate(measure: Callable[[str], float], rounds: int) -> tuple[list[float], list[float], list[str]]:
    """measure("cpu"), measure("tpu"), measure("cpu"), ... for `rounds` rounds, so a slow spell of a shared
    machine hits both sides alike (as bench_examples.py does): each side's values and each round's core mode
    (a ModeMonitor's, after waiting for TORCH_TPU_BENCH_MODE), in round order."""
    cpus, tpus, modes = [], [], []
    for _ in range(rounds):
        with ModeMonitor(wait_for_mode()) as mon:
            cpus.append(measure("cpu"))
            tpus.append(measure("tpu"))
        modes.append(mon.mode)
    return cpus, tpus, modes


def mode_text(ratios: list[float], modes: list[str], unit: str = "x") -> str:
    """Each round's mode as one letter per round (N near, F far, M mixed, ? unknown) and the median ratio of the
    rounds of each mode, e.g. "modes NNFNN: near 4 1.02x, far 1 0.81x" (rounds, median ratio)."""
    tags = "".join(_TAG[m] for m in modes)
    parts = []
    for m in MODES:
        rs = [r for r, mm in zip(ratios, modes) if mm == m]
        if rs:
            parts.append(f"{m} {len(rs)} {statistics.median(rs):.2f}{unit}")
    return f"modes {tags}: " + ", ".join(parts)


def select_rounds(values: list, modes: list[str]) -> list:
    """The rounds' values TORCH_TPU_BENCH_MODE asks for: all ("any"), or those of one mode (may be empty)."""
    want = wanted_mode()
    return list(values) if want == "any" else [v for v, m in zip(values, modes) if m == want]


def summary(cpus: list[float], tpus: list[float], modes: list[str] | None = None,
            speed: bool = False) -> tuple[float, float, float, str]:
    """Medians of each side, the median of the rounds' ratios (tpu/cpu time, or cpu/tpu when `speed`) and the
    rounds' spread and modes as text ("" for one round without modes). With modes and TORCH_TPU_BENCH_MODE=near|far
    the medians, ratio and spread come from that mode's rounds only (nan when there is none)."""
    ratios = [(c / t if speed else t / c) for c, t in zip(cpus, tpus)]
    keep = select_rounds(list(range(len(ratios))), modes) if modes else list(range(len(ratios)))
    chosen = [ratios[i] for i in keep]
    parts = []
    if len(chosen) > 1:
        parts.append(f"rounds {min(chosen):.2f}-{max(chosen):.2f}x")
    if modes:
        parts.append(mode_text(ratios, modes))
        if wanted_mode() != "any":
            parts.append(f"ratio from the {len(chosen)} {wanted_mode()} rounds")
    spread = f" ({'; '.join(parts)})" if parts else ""
    if not chosen:
        return float("nan"), float("nan"), float("nan"), spread
    return (statistics.median(cpus[i] for i in keep), statistics.median(tpus[i] for i in keep),
            statistics.median(chosen), spread)


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
    feats = torch.tpu.get_device_properties(0).cpu_features
    ns = core_distance_ns()
    mode = "?" if ns is None else f"{'far' if ns > FAR_NS else 'near'} ({ns:.0f} ns round trip)"
    return (f"{name}, {os.cpu_count()} logical CPUs, torch {torch.__version__} ({torch.get_num_threads()} threads)"
            f"{' ' + feats if feats else ''}; core mode now {mode}, TORCH_TPU_BENCH_MODE={wanted_mode()}")
