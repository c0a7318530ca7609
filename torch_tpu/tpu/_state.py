"""Process-wide state of the tpu device module: the extension, initialization and fork safety.

The runtime is initialized when torch_tpu is imported (during `import torch` with autoload), because
that is where an invalid TORCH_TPU_* value must be reported. If the extension cannot be loaded, or the
runtime fails for another reason, torch.tpu reports 0 devices and every call that needs a device
raises a RuntimeError saying why.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Optional

try:
    _ext: Optional[ModuleType] = importlib.import_module("torch_tpu._C")
except ImportError as _exc:  # not built, or built against another torch
    _ext = None
    _unavailable: str | None = (
        f"the extension torch_tpu._C could not be loaded ({_exc}); build it with `make build`"
    )
else:
    _unavailable = None

_initialized = False


def unavailable_reason() -> str | None:
    """Why the device cannot be used, or None if it can."""
    return _unavailable


def init_at_import() -> None:
    """Initializes the runtime. An invalid TORCH_TPU_* value raises; other failures leave 0 devices."""
    global _initialized, _unavailable
    if _ext is None or _initialized:
        return
    try:
        _ext._init()
    except RuntimeError as exc:
        if "TORCH_TPU_" in str(exc):  # a configuration error: the user asked for something invalid
            raise
        _unavailable = f"the TPU runtime failed to initialize: {exc}"
        return
    _initialized = True


def is_initialized() -> bool:
    return _initialized and not is_in_bad_fork()


def is_in_bad_fork() -> bool:
    """True in a child process forked after the runtime started (its worker threads did not survive).
    The extension registers PyTorch's fork handler for the device in `_init()`."""
    return _initialized and _ext is not None and bool(_ext._is_in_bad_fork())


def lazy_init() -> None:
    """Makes sure the runtime is usable in this process; raises RuntimeError if it is not."""
    if is_in_bad_fork():
        raise RuntimeError(
            "Cannot re-initialize TPU in forked subprocess. To use TPU with multiprocessing, "
            "you must use the 'spawn' start method"
        )
    if _initialized:
        return
    if _unavailable is not None:
        raise RuntimeError(f"torch.tpu is unavailable: {_unavailable}")
    init_at_import()
    if not _initialized:
        raise RuntimeError(f"torch.tpu is unavailable: {_unavailable}")


def ext() -> ModuleType:
    """The initialized extension module torch_tpu._C."""
    lazy_init()
    assert _ext is not None
    return _ext


def device_count() -> int:
    """Number of tpu devices; 0 when the runtime is unusable. Never raises."""
    if _ext is None or not _initialized:
        return 0
    return int(_ext._device_count())

