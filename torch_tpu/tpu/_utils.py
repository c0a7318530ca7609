"""Device arguments: every torch.tpu function accepts an int, "tpu", "tpu:1", torch.device or None."""
from __future__ import annotations

from typing import Union

import torch

from torch_tpu.tpu import _state

DEVICE_TYPE = "tpu"

Device = Union[torch.device, str, int, None]


def device_index(device: Device, *, optional: bool = True) -> int:
    """The index `device` names. None, "tpu" or torch.device("tpu") mean the current device when
    `optional`; a negative int is returned as is (callers that allow it treat it as "no device")."""
    if isinstance(device, str):
        device = torch.device(device)
    index: int | None
    if isinstance(device, torch.device):
        if device.type != DEVICE_TYPE:
            raise ValueError(f"Expected a {DEVICE_TYPE} device, but got: {device}")
        index = device.index
    elif isinstance(device, bool):
        raise TypeError(f"Expected an int, str or torch.device for a {DEVICE_TYPE} device, but got a bool")
    elif isinstance(device, int) or device is None:
        index = device
    else:
        raise TypeError(
            f"Expected an int, str or torch.device for a {DEVICE_TYPE} device, but got {type(device).__name__}"
        )
    if index is None:
        if not optional:
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got: {device}")
        return int(_state.ext()._get_device())
    return int(index)


def check_index(index: int) -> int:
    """Raises RuntimeError("Invalid device id ...") unless 0 <= index < device_count()."""
    count = _state.device_count()
    if not 0 <= index < count:
        valid = f"valid ids are 0..{count - 1}" if count > 0 else "no tpu device is available"
        raise RuntimeError(
            f"Invalid device id {index} for device type '{DEVICE_TYPE}': {valid} "
            f"(TORCH_TPU_NUM_DEVICES sets how many chips the host driver emulates)"
        )
    return index


def checked_index(device: Device) -> int:
    """`device_index(device)` validated against the device count; initializes the runtime."""
    _state.lazy_init()
    return check_index(device_index(device))
