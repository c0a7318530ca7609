"""Runtime counters: ops, executable cache, compiles, kernels and CPU fallbacks."""
from __future__ import annotations

from typing import Any

from torch_tpu import _compile  # its counters only: torch._dynamo is imported when the backend first runs
from torch_tpu.tpu import _state


def metrics() -> dict[str, Any]:
    """Returns a snapshot of the runtime counters since start (or the last `reset_metrics()`).

    Keys:
      ops_run             ATen ops the runtime enqueued
      exec_cache_hits     ops whose executable was found in the cache
      exec_cache_misses   ops that needed a new executable
      compiles            IR graphs compiled into executables
      exec_cache_entries  executables currently cached
      compile_seconds     time spent compiling (float)
      kernels_launched    kernel steps the driver executed
      group_steps         of those, steps run side by side in step groups (TORCH_TPU_EXEC_GROUPS; compiled graphs)
      host_waits          times a host thread waited for a device queue (synchronize, device-to-host
                          copies, .item(), events); each one stalls the asynchronous pipeline
      graph_ops_before    IR ops in compiled graphs before the compiler passes (summed)
      graph_ops_after     ... and after them
      pass_canon_rewrites algebraic/view-chain rewrites by canonicalization
      pass_folds          ops replaced by constants (constant folding)
      pass_cse_hits       ops replaced by an identical earlier op (CSE)
      pass_dce_removed    ops removed because they reached no output (DCE)
      fusion_clusters     elementwise clusters of 2+ ops run as one tiled loop
      fusion_ops_fused    elementwise ops evaluated inside another op's loop
      fusion_reduce_producers  elementwise clusters evaluated block by block inside a reduce
      trace_flushes       fused-eager/capture traces enqueued (docs/execution_modes.md)
      traced_ops          ops recorded into those traces (traced_ops / trace_flushes = ops per flush)
      trace_cache_hits    flushes whose fused executable was cached
      trace_cache_misses  flushes that built and compiled a fused graph
      trace_fallbacks     flushes run op by op because the fused graph could not be built
      fallback_ops        ops that ran on the CPU (only with TORCH_TPU_CPU_FALLBACK=1)
      fallback_counts     {op name: count} for those CPU fallbacks
      compile_*, recompile_reasons   torch.compile(backend="tpu") counters and the reason for each recompile
                          (see torch_tpu._compile.compile_metrics and torch_tpu.recompile_reasons())
    """
    ext = _state.ext()
    result: dict[str, Any] = dict(ext._metrics())
    result.update(ext._trace_stats())
    result["fallback_counts"] = dict(ext._fallback_counts())
    result.update(_compile.compile_metrics())
    return result


def reset_metrics() -> None:
    """Sets every counter in `metrics()` back to zero (cached executables stay cached)."""
    _state.ext()._metrics_reset()
    _compile.reset_compile_metrics()
    _state.ext()._trace_stats_reset()


def set_cpu_fallback(enabled: bool) -> None:
    """Turns the CPU fallback for unimplemented ops on or off (what TORCH_TPU_CPU_FALLBACK sets at import)."""
    _state.ext()._set_cpu_fallback(bool(enabled))


def cpu_fallback_enabled() -> bool:
    return bool(_state.ext()._get_cpu_fallback())
