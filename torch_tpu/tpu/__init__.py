"""torch.tpu: the tpu device module, mirroring torch.cuda.

Registered as `torch.tpu` when torch_tpu loads. Device arguments may be an int, "tpu", "tpu:1",
a torch.device, or None (the current device).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from torch_tpu.tpu import _state
from torch_tpu.tpu._utils import Device, check_index, checked_index, device_index

_DRIVER = "host"  # the only driver so far; the PJRT driver is planned
_DRIVER_DESCRIPTION = {"host": "host emulation"}


def is_available() -> bool:
    """True if at least one tpu device can be used. Never raises."""
    return device_count() > 0


def device_count() -> int:
    """Number of tpu devices (TORCH_TPU_NUM_DEVICES for the host driver); 0 if unusable. Never raises."""
    return _state.device_count()


def init() -> None:
    """Initializes the runtime (already done when torch_tpu loads); raises if the device is unusable."""
    _state.lazy_init()


def _lazy_init() -> None:
    _state.lazy_init()


def is_initialized() -> bool:
    return _state.is_initialized()


def _is_in_bad_fork() -> bool:
    return _state.is_in_bad_fork()


def current_device() -> int:
    """Index of the currently selected tpu device."""
    return int(_state.ext()._get_device())


def set_device(device: Device) -> None:
    """Selects the current device. A negative index is a no-op, as in torch.cuda.set_device."""
    index = device_index(device)
    if index >= 0:
        _state.ext()._set_device(check_index(index))


def _exchange_device(index: int) -> int:
    """Selects `index` (if >= 0) and returns the previously selected device."""
    previous = current_device()
    if index >= 0 and index != previous:
        _state.ext()._set_device(check_index(index))
    return previous


class device:
    """Context manager that selects a device; a negative index or None is a no-op.

    >>> with torch.tpu.device(1):
    ...     x = torch.ones(3, device="tpu")   # on tpu:1
    """

    def __init__(self, device: Any) -> None:
        if device is None:
            self.idx = -1
        else:
            self.idx = device_index(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        if self.idx >= 0:
            self.prev_idx = _exchange_device(self.idx)

    def __exit__(self, *exc_info: object) -> None:
        if self.idx >= 0 and self.prev_idx >= 0:
            _exchange_device(self.prev_idx)


class device_of(device):
    """Context manager that selects the device of a tensor or storage; a no-op for non-tpu objects."""

    def __init__(self, obj: Any) -> None:
        on_tpu = getattr(obj, "device", None) is not None and obj.device.type == "tpu"
        super().__init__(obj.device.index if on_tpu else -1)


def synchronize(device: Device = None) -> None:
    """Waits for all work queued on a device; raises the first asynchronous error of that work."""
    _state.ext()._synchronize(checked_index(device))


@dataclass(frozen=True)
class _TpuDeviceProperties:
    """What torch.tpu.get_device_properties returns (the fields of torch.cuda's that apply, plus the driver)."""

    name: str
    driver: str
    total_memory: int  # bytes: the device's HBM capacity (TORCH_TPU_HBM_BYTES for the host driver)
    major: int
    minor: int
    cpu_features: str  # SIMD features the host driver's kernels use
    num_threads: int  # host driver thread pool size (TORCH_TPU_NUM_THREADS)
    launch_blocking: bool  # TORCH_TPU_LAUNCH_BLOCKING

    def __repr__(self) -> str:
        return (
            f"_TpuDeviceProperties(name='{self.name}', driver='{self.driver}', "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, major={self.major}, minor={self.minor}, "
            f"cpu_features='{self.cpu_features}', num_threads={self.num_threads}, "
            f"launch_blocking={self.launch_blocking})"
        )


def get_device_properties(device: Device = None) -> _TpuDeviceProperties:
    index = checked_index(device)
    ext = _state.ext()
    return _TpuDeviceProperties(
        name=f"TPU ({_DRIVER_DESCRIPTION.get(_DRIVER, _DRIVER)})",
        driver=_DRIVER,
        total_memory=int(ext._memory_stats(index)["capacity_bytes"]),
        major=0,  # the host driver emulates a generic chip, not a TPU generation
        minor=0,
        cpu_features=str(ext._cpu_features()),
        num_threads=int(ext._num_threads()),
        launch_blocking=bool(ext._launch_blocking()),
    )


def get_device_name(device: Device = None) -> str:
    """E.g. "TPU (host emulation)"."""
    return get_device_properties(device).name


def get_device_capability(device: Device = None) -> tuple[int, int]:
    """(major, minor) as in torch.cuda; (0, 0) for the host driver's generic chip."""
    props = get_device_properties(device)
    return props.major, props.minor


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


from torch_tpu.tpu import amp, memory, random, streams  # noqa: E402
from torch_tpu.tpu.amp import get_amp_supported_dtype  # noqa: E402
from torch_tpu.tpu.memory import (  # noqa: E402
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_max_memory_allocated,
    reset_peak_memory_stats,
)
from torch_tpu.tpu.random import (  # noqa: E402
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from torch_tpu.tpu.streams import (  # noqa: E402
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)


def __getattr__(name: str) -> Any:
    if name == "default_generators":  # computed on use: the generators exist once the runtime is up
        return random.default_generators()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "current_device",
    "current_stream",
    "default_generators",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_max_memory_allocated",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
]
