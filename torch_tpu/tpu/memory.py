"""Caching-allocator statistics and control, named as in torch.cuda.memory.

The allocator lives in the C runtime (one per device, capacity TORCH_TPU_HBM_BYTES); this module only
renames its counters into torch.cuda's keys and formats them.
"""
from __future__ import annotations

import collections
import warnings
from typing import Any

from torch_tpu.tpu import _state
from torch_tpu.tpu._utils import Device, checked_index


def _raw_stats(device: Device) -> dict[str, int]:
    return {k: int(v) for k, v in _state.ext()._memory_stats(checked_index(device)).items()}


def memory_stats(device: Device = None) -> collections.OrderedDict[str, Any]:
    """Allocator statistics with torch.cuda.memory_stats' key names (sorted), e.g.
    "allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
    "reserved_bytes.all.peak", "requested_bytes.all.current", "allocation.all.allocated",
    "allocation.all.freed", "allocation.all.current", "num_ooms"; plus "capacity_bytes" and
    "num_cache_hits" (allocations served from cached blocks); plus the executor's scratch, which is
    device memory outside the allocator (the host executor's temporaries inside one executable's
    run, e.g. a fused graph's intermediates, and the GEMM/convolution workspaces; process-wide, not
    in allocated_bytes):
    "scratch_bytes.all.current" / ".peak" (peak reset by reset_peak_memory_stats) and
    "scratch_bytes.cached" (blocks its cache keeps for the next run)."""
    raw = _raw_stats(device)
    stats = {
        "allocated_bytes.all.current": raw["allocated_bytes"],
        "allocated_bytes.all.peak": raw["max_allocated_bytes"],
        "reserved_bytes.all.current": raw["reserved_bytes"],
        "reserved_bytes.all.peak": raw["max_reserved_bytes"],
        "requested_bytes.all.current": raw["requested_bytes"],
        "allocation.all.allocated": raw["num_allocs"],
        "allocation.all.freed": raw["num_frees"],
        "allocation.all.current": raw["num_allocs"] - raw["num_frees"],
        "num_cache_hits": raw["num_cache_hits"],
        "num_ooms": raw["num_ooms"],
        "capacity_bytes": raw["capacity_bytes"],
        "scratch_bytes.all.current": raw["scratch_bytes"],
        "scratch_bytes.all.peak": raw["max_scratch_bytes"],
        "scratch_bytes.cached": raw["scratch_cached_bytes"],
    }
    return collections.OrderedDict(sorted(stats.items()))


def memory_allocated(device: Device = None) -> int:
    """Bytes in live tensors' blocks (block sizes are rounded to the allocator's size classes)."""
    return _raw_stats(device)["allocated_bytes"]


def max_memory_allocated(device: Device = None) -> int:
    """Peak of memory_allocated() since start or the last reset_peak_memory_stats()."""
    return _raw_stats(device)["max_allocated_bytes"]


def memory_reserved(device: Device = None) -> int:
    """Bytes held by the caching allocator: live blocks plus cached free blocks."""
    return _raw_stats(device)["reserved_bytes"]


def max_memory_reserved(device: Device = None) -> int:
    return _raw_stats(device)["max_reserved_bytes"]


def reset_peak_memory_stats(device: Device = None) -> None:
    """Sets the allocated and reserved peaks to their current values."""
    _state.ext()._reset_peak_memory_stats(checked_index(device))


def reset_max_memory_allocated(device: Device = None) -> None:
    """Deprecated alias of reset_peak_memory_stats (as in torch.cuda), which resets all peaks."""
    warnings.warn(
        "torch.tpu.reset_max_memory_allocated now calls torch.tpu.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats.",
        FutureWarning,
        stacklevel=2,
    )
    reset_peak_memory_stats(device)


def empty_cache() -> None:
    """Returns every device's cached free blocks; memory held by live tensors is not freed."""
    ext = _state.ext()
    for index in range(_state.device_count()):
        ext._empty_cache(index)


def mem_get_info(device: Device = None) -> tuple[int, int]:
    """(free, total) bytes of a device: total is its capacity, free what the allocator has not reserved."""
    raw = _raw_stats(device)
    total = raw["capacity_bytes"]
    return max(total - raw["reserved_bytes"], 0), total


def _format_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def memory_summary(device: Device = None, abbreviated: bool = False) -> str:
    """A readable table of memory_stats(), like torch.cuda.memory_summary. `abbreviated` drops the counts."""
    index = checked_index(device)
    raw = _raw_stats(index)
    width = 72
    rows: list[tuple[str, str, str]] = [
        ("Allocated memory", _format_bytes(raw["allocated_bytes"]), _format_bytes(raw["max_allocated_bytes"])),
        ("Reserved memory", _format_bytes(raw["reserved_bytes"]), _format_bytes(raw["max_reserved_bytes"])),
        ("Requested memory", _format_bytes(raw["requested_bytes"]), "-"),
        ("Capacity", _format_bytes(raw["capacity_bytes"]), "-"),
    ]
    if not abbreviated:
        rows += [
            ("Live allocations", str(raw["num_allocs"] - raw["num_frees"]), "-"),
            ("Allocations (total)", str(raw["num_allocs"]), "-"),
            ("Frees (total)", str(raw["num_frees"]), "-"),
            ("Served from cache", str(raw["num_cache_hits"]), "-"),
            ("Out-of-memory errors", str(raw["num_ooms"]), "-"),
        ]
    rule = "|" + "=" * (width - 2) + "|"
    thin = "|" + "-" * (width - 2) + "|"
    lines = [
        rule,
        "|" + f"TPU memory summary, device ID {index}".center(width - 2) + "|",
        thin,
        f"| {'Metric':<30} | {'Current':>16} | {'Peak':>16} |",
        thin,
    ]
    lines += [f"| {name:<30} | {cur:>16} | {peak:>16} |" for name, cur, peak in rows]
    lines.append(rule)
    return "\n".join(lines) + "\n"


__all__ = [
    "empty_cache",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_max_memory_allocated",
    "reset_peak_memory_stats",
]
