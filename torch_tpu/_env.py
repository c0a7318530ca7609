"""Environment variables read on the Python side.

The C runtime reads and validates its own variables (TORCH_TPU_NUM_DEVICES, TORCH_TPU_HBM_BYTES,
TORCH_TPU_LAUNCH_BLOCKING, TORCH_TPU_NUM_THREADS) in `_C._init()`. Only the CPU-fallback switch,
which the glue exposes as a setter, is parsed here.
"""
from __future__ import annotations

import os

CPU_FALLBACK = "TORCH_TPU_CPU_FALLBACK"
SIZE_TEMPLATES = "TORCH_TPU_SIZE_TEMPLATES"  # 0: a new size under dynamic shapes always captures (torch_tpu/_compile.py)


def read_bool(name: str, default: bool = False) -> bool:
    """Reads a 0/1 switch. Unset or empty gives `default`; anything else raises ValueError naming `name`."""
    raw = os.environ.get(name, "")
    value = raw.strip()
    if value == "":
        return default
    if value in ("0", "1"):
        return value == "1"
    raise ValueError(f"torch_tpu: invalid value {raw!r} for environment variable {name}: expected 0 or 1")


def cpu_fallback_requested() -> bool:
    return read_bool(CPU_FALLBACK)


def size_templates_enabled() -> bool:
    return read_bool(SIZE_TEMPLATES, default=True)
