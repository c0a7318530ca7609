"""The compilation cache: compiled executables kept in memory and in a directory shared by processes.

Every op the runtime compiles (eager, fused eager and compiled mode use the same cache) is kept in an
in-process LRU and written to `TORCH_TPU_CACHE_DIR` (default `~/.cache/torch_tpu`, or
`$XDG_CACHE_HOME/torch_tpu`), so a second process with the same library build skips lowering and the
compiler passes. `TORCH_TPU_CACHE_DIR=0` turns the disk level off; `TORCH_TPU_CACHE_MAX_BYTES` caps
its size (least recently used files are removed first). A directory that cannot be used makes the
cache memory-only, with one warning.

    import torch_tpu
    torch_tpu.cache.stats()   # {'disk_enabled': True, 'disk_hits': 12, ...}
    torch_tpu.cache.path()    # '/home/me/.cache/torch_tpu'
    torch_tpu.cache.clear()   # drop every cached executable, in memory and on disk
"""
from __future__ import annotations

import warnings
from typing import Any, Optional

from torch_tpu.tpu import _state

__all__ = ["clear", "path", "stats"]


def clear() -> None:
    """Removes every cached executable: the in-memory level and the cache files in the directory."""
    _state.ext()._cache_clear()


def stats() -> dict[str, Any]:
    """A snapshot of the cache's state and counters (since start or `torch_tpu.reset_metrics()`).

    Keys:
      disk_enabled         False when the disk level is off or its directory was unusable
      memory_entries       executables in the in-process cache
      disk_hits            executables loaded from the directory instead of compiled
      disk_misses          lookups that found no usable file
      disk_writes          cache files written
      disk_rejected        corrupt, truncated, stale or foreign files refused (and removed)
      disk_evictions       files removed to stay under TORCH_TPU_CACHE_MAX_BYTES
      disk_errors          I/O errors (each one is a miss or a skipped write)
      disk_bytes           size of the cache files in the directory
      disk_max_bytes       the size cap
      disk_load_seconds    time spent reading files and turning hits into executables
      disk_store_seconds   time spent writing files
    """
    return dict(_state.ext()._cache_stats())


def path() -> Optional[str]:
    """The cache directory in use, or None when the cache is memory-only."""
    d = str(_state.ext()._cache_dir())
    return d or None


def _init_at_import() -> None:
    """Reads the cache configuration (an invalid TORCH_TPU_CACHE_MAX_BYTES raises) and reports an
    unusable directory as one warning."""
    ext = _state.ext()
    ext._cache_init()
    warning = ext._cache_take_warning()
    if warning:
        warnings.warn(str(warning), RuntimeWarning, stacklevel=3)
