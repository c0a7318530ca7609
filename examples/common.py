"""Helpers shared by the example training scripts (examples/<name>/train.py).

Every example follows the same shape:

    def train(device="cpu", steps=20, amp=False, tiny=False, seed=0, overfit=False, log=print, **kw) -> list[float]
    def main(argv=None) -> int:  return run_main(train, __doc__, argv)

`train` builds its data and model on the CPU from `seed` (so a cpu run and a tpu run start from identical weights
and batches), moves them to `device`, trains `steps` optimizer steps and returns the per-step losses as floats.
The scripts use plain PyTorch: `import torch` loads torch_tpu through its `torch.backends` entry point.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

EXAMPLES_DIR = Path(__file__).resolve().parent
REPO_ROOT = EXAMPLES_DIR.parent


def import_example(name: str) -> ModuleType:
    """Imports examples/<name>/train.py as a module (the example folders are not packages)."""
    mod_name = f"torch_tpu_example_{name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, EXAMPLES_DIR / name / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    return module


def parse_args(doc: str | None, argv: list[str] | None = None,
               extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """The flags every example accepts, plus the example's own (`extra`)."""
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
    parser.add_argument("--device", default="tpu", help="tpu, tpu:1, cpu, ... (default: tpu)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the example's)")
    parser.add_argument("--amp", action="store_true", help="bf16 autocast on the device")
    parser.add_argument("--tiny", action="store_true", help="the smallest configuration (what the tests use)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overfit", action="store_true", help="train on one fixed batch")
    if extra is not None:
        extra(parser)
    return parser.parse_args(argv)


def seed_all(seed: int) -> torch.Generator:
    """Seeds PyTorch's global RNGs and returns a CPU generator for the example's data."""
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def autocast(device: torch.device | str, amp: bool) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast on `device` when `amp`, else a no-op context."""
    device = torch.device(device)
    if not amp:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def synchronize(device: torch.device | str) -> None:
    device = torch.device(device)
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


class LossLog:
    """Collects per-step losses and prints `step | loss | steps/s` lines."""

    def __init__(self, device: torch.device | str, log: Callable[[str], None] | None = print) -> None:
        self.device = torch.device(device)
        self.log = log
        self.losses: list[float] = []
        self.start = time.perf_counter()

    def __call__(self, step: int, loss: torch.Tensor) -> None:
        self.losses.append(float(loss.item()))  # .item() waits for the step: steps/s is honest
        if self.log is not None:
            rate = len(self.losses) / max(time.perf_counter() - self.start, 1e-9)
            self.log(f"step {step:4d} | loss {self.losses[-1]:.4f} | {rate:6.2f} steps/s")


def report_metrics(device: torch.device | str) -> int:
    """Prints torch_tpu's counters after a tpu run; returns 1 if any op fell back to the CPU."""
    device = torch.device(device)
    if device.type != "tpu":
        return 0
    import torch_tpu  # already loaded by `import torch`; imported here only for its counters

    m = torch_tpu.metrics()
    print(f"tpu metrics: ops {m['ops_run']}, compiles {m['compiles']}, kernels {m['kernels_launched']}, "
          f"cpu fallbacks {m['fallback_ops']}")
    if m["fallback_ops"]:
        print(f"ops that fell back to the CPU: {m['fallback_counts']}", file=sys.stderr)
        return 1
    return 0


def run_main(train: Callable[..., list[float]], doc: str | None, argv: list[str] | None = None,
             extra: Callable[[argparse.ArgumentParser], None] | None = None) -> int:
    """Parses the flags, trains, prints the timing summary and the tpu metrics."""
    args = parse_args(doc, argv, extra)
    kwargs = {k: v for k, v in vars(args).items() if v is not None}
    start = time.perf_counter()
    losses = train(**kwargs)
    elapsed = time.perf_counter() - start
    print(f"{len(losses)} steps in {elapsed:.2f} s on {args.device} ({len(losses) / elapsed:.2f} steps/s); "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    return report_metrics(args.device)


def batches(make: Callable[[int], Any], steps: int, overfit: bool) -> Iterator[tuple[int, Any]]:
    """(step, batch) for step 1..steps; batch = make(i) with i = 0 always when `overfit`."""
    for step in range(1, steps + 1):
        yield step, make(0 if overfit else step - 1)


def to(device: torch.device | str, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.to(device) for t in tensors)
