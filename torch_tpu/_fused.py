"""Fused eager execution and graph capture (see docs/execution_modes.md).

Fused eager (TORCH_TPU_FUSED_EAGER=1, `set_fused_eager(True)` or `with fused_eager():`) records
ops instead of running them one by one and runs each device's recorded ops as one fused,
cached executable when something needs the results: `.cpu()`, `.item()`, printing,
`torch.tpu.synchronize()`, events, data-dependent ops, a partially overlapping write the graph
cannot express (writes into a slice/box of a pending result, e.g. `cat(..., out=buf[:, 4:9])`, are
expressed), or every 64 ops. Fused graphs go through the compiler passes and the persistent
compilation cache like single-op executables. Results are bit-identical to strict eager; errors in the arguments of an op are still
raised by the op itself, errors found while running (an index out of range) at the next
synchronization, naming the fused ops. TORCH_TPU_TRACE_PROFILE=<file> compares each repeated trace's
device time fused and op by op (a diagnostic; docs/execution_modes.md).

Graph capture (the torch.compile backend's building block, /work/notes/trace_api.md):
`torch_tpu._C._capture_begin(device)`, run tpu ops, then
`handle, reason = torch_tpu._C._capture_end(inputs, outputs, constants)`; `handle.run(inputs)`
replays the captured ops as one task.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from torch_tpu.tpu import _state

FUSED_EAGER = "TORCH_TPU_FUSED_EAGER"


def set_fused_eager(enabled: bool) -> None:
    """Turns fused eager on or off for the process; turning it off runs every recorded op first."""
    _state.ext()._set_fused_eager(bool(enabled))


def fused_eager_enabled() -> bool:
    """Whether ops are recorded into fused traces (always False with TORCH_TPU_LAUNCH_BLOCKING=1)."""
    return bool(_state.ext()._fused_eager_enabled())


@contextlib.contextmanager
def fused_eager(enabled: bool = True) -> Iterator[None]:
    """Context manager: fused eager on (or off) inside the block, the previous setting after it."""
    previous = fused_eager_enabled()
    set_fused_eager(enabled)
    try:
        yield
    finally:
        set_fused_eager(previous)


def flush(device: int | None = None) -> None:
    """Enqueues the ops recorded on `device` (default: current) now, without waiting for them."""
    _state.ext()._trace_flush(-1 if device is None else int(device))
