"""Training-step time of each example (examples/<name>/train.py) on PyTorch CPU vs tpu, same process.

Per-step time = (time of a run with S2 steps - time with S1 steps) / (S2 - S1), so model set-up,
data generation and first-step compiles drop out. f32 and bf16 autocast. Prints tpu speed relative
to CPU (higher is better; issue 3 targets >= 1.0x for the transformer examples, >= 0.8x for
ResNet/UNet/DLRM). Usage: python benchmarks/bench_examples.py [--tiny] [--only mingpt,llama]
"""
from __future__ import annotations

import argparse
import os
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


def step_time(train, device: str, amp: bool, tiny: bool, s1: int = 2, s2: int = 5) -> float:
    def run(steps: int) -> float:
        t0 = time.perf_counter()
        train(device=device, steps=steps, amp=amp, tiny=tiny, log=lambda *a, **k: None)
        if device.startswith("tpu"):
            torch.tpu.synchronize()
        return time.perf_counter() - t0
    run(s1)  # warm caches (executables, allocator)
    t1 = min(run(s1) for _ in range(2))
    t2 = min(run(s2) for _ in range(2))
    return max(t2 - t1, 1e-9) / (s2 - s1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    ex = _import_examples_common()
    print("machine:", machine())
    names = [n for n in NAMES if not args.only or n in args.only.split(",")]
    for name in names:
        train = ex.import_example(name).train
        for amp in (False, True):
            try:
                cpu = step_time(train, "cpu", amp, args.tiny)
                tpu = step_time(train, "tpu", amp, args.tiny)
                print(f"{name:7s} {'bf16' if amp else 'f32 '}: cpu {cpu * 1e3:8.1f} ms/step  tpu {tpu * 1e3:8.1f} ms/step"
                      f"  tpu speed / cpu {cpu / tpu:5.2f}x")
            except Exception as e:  # an op not lowered yet: say which
                print(f"{name:7s} {'bf16' if amp else 'f32 '}: not measured ({type(e).__name__}: {str(e).splitlines()[0][:120]})")


if __name__ == "__main__":
    main()
