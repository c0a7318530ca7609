"""Training-step time of each example (examples/<name>/train.py) on PyTorch CPU vs tpu, same process.

Per-step time = the median gap between consecutive steps of one run (each step ends with `loss.item()`),
after the first two steps, so model set-up, data generation and first-step compiles drop out. f32 and bf16
autocast. Prints tpu speed relative to CPU (higher is better; issue 3 targets >= 1.0x for the transformer examples, >= 0.8x for
ResNet/UNet/DLRM). f32 runs --rounds alternating cpu/tpu rounds (default 5; bf16 --bf16-rounds, default 1) and
prints the median round's ratio with the spread of all rounds: on a shared virtual machine single runs of one side
vary by up to 2x. Each round is tagged with the core mode around it (N near / F far / M mixed / ? unknown, see
benchmarks/common.py) and the median ratio of each mode's rounds is printed; TORCH_TPU_BENCH_MODE=near|far waits
for that mode before each round and reports only its rounds.
Usage: python benchmarks/bench_examples.py [--tiny] [--only mingpt,llama] [--rounds 5] [--bf16-rounds 1]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
import importlib.util  # noqa: E402

# The examples import their own `common` (examples/common.py); load ours under another name.
_spec = importlib.util.spec_from_file_location("bench_common", os.path.join(HERE, "common.py"))
_bench_common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench_common)
machine = _bench_common.machine
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))


def _import_examples_common():
    sys.modules.pop("common", None)  # run_all.py may have imported benchmarks/common.py as `common`
    import common as examples_common  # examples/common.py (first on sys.path)
    return examples_common


NAMES = ["mingpt", "llama", "qwen", "resnet", "unet", "dlrm"]


def step_time(train, device: str, amp: bool, tiny: bool, steps: int = 7, skip: int = 2) -> float:
    """Median time between consecutive steps of one run: each example's LossLog calls `log` once per
    step after `loss.item()`, which waits for the step, so the gap between two calls is one whole step
    (host and device). The first `skip` steps (compiles, allocator warm-up) are dropped."""
    stamps: list[float] = []
    _bench_common.settle()

    def log(msg: str, *a, **k) -> None:
        if msg.startswith("step "):
            stamps.append(time.perf_counter())
    train(device=device, steps=steps, amp=amp, tiny=tiny, log=log)
    gaps = [b - a for a, b in zip(stamps, stamps[1:])][skip - 1 if skip > 0 else 0:]
    if len(stamps) != steps or not gaps:
        raise RuntimeError(f"expected one 'step' log line per step, got {len(stamps)} for {steps} steps")
    return statistics.median(gaps)


def compare(train, amp: bool, tiny: bool, rounds: int) -> tuple[list[float], list[float], list, list[float]]:
    """CPU and tpu step times measured in alternating rounds (cpu, tpu, cpu, tpu, ...), so a slow spell of the
    machine (a virtual machine's neighbours, frequency changes) hits both sides alike: each round's CPU and tpu
    step times, its core mode (near / far / mixed / ?, common.ModeMonitor) and the share of its mode probes that
    read far."""
    cpus, tpus, modes, far = [], [], [], []
    for r in range(rounds):
        with _bench_common.ModeMonitor(_bench_common.wait_for_mode()) as mon:
            cpus.append(step_time(train, "cpu", amp, tiny, steps=7 if rounds > 1 else 5))
            tpus.append(step_time(train, "tpu", amp, tiny, steps=7 if rounds > 1 else 5))
        modes.append(mon.mode)
        far.append(mon.far_share)
    return cpus, tpus, modes, far


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--rounds", type=int, default=5,
                    help="alternating cpu/tpu rounds for f32")
    ap.add_argument("--bf16-rounds", type=int, default=1,
                    help="... and for bf16 autocast (default 1: the CPU's bf16 is emulated and slow)")
    args = ap.parse_args()
    ex = _import_examples_common()
    print("machine:", machine())
    names = [n for n in NAMES if not args.only or n in args.only.split(",")]
    for name in names:
        train = ex.import_example(name).train
        for amp in (False, True):
            try:
                cpus, tpus, modes, far = compare(train, amp, args.tiny,
                                                 max(1, args.bf16_rounds if amp else args.rounds))
                cpu, tpu, ratio, spread = _bench_common.summary(cpus, tpus, modes, speed=True)
                if len(cpus) > 1:
                    spread = f"  (median of {len(cpus)} rounds; {spread.strip()[1:]}"
                print(f"{name:7s} {'bf16' if amp else 'f32 '}: cpu {cpu * 1e3:8.1f} ms/step  tpu {tpu * 1e3:8.1f} ms/step"
                      f"  tpu speed / cpu {ratio:5.2f}x{spread}", flush=True)
                print("          rounds (cpu ms, tpu ms, speed, far share of mode probes): " + ", ".join(
                    f"{c * 1e3:.1f} {t * 1e3:.1f} {c / t:.2f}x {f:.0%}" for c, t, f in zip(cpus, tpus, far)),
                    flush=True)
            except Exception as e:  # an op not lowered yet: say which
                print(f"{name:7s} {'bf16' if amp else 'f32 '}: not measured ({type(e).__name__}: {str(e).splitlines()[0][:120]})")


if __name__ == "__main__":
    main()
