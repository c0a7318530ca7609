"""Streams and events of the tpu device (torch.Stream and torch.Event with device type "tpu").

The runtime has one execution queue per device and every stream maps onto it, so work on any two
streams of a device runs in enqueue order; events mark queue positions and can be timed.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from torch_tpu.tpu import _state
from torch_tpu.tpu._utils import DEVICE_TYPE, Device, check_index, checked_index


class Stream(torch.Stream):
    """A tpu stream. `Stream()` makes one on the current device, `Stream("tpu:1")` on another.
    Use it as a context manager to make it the current stream."""

    def __new__(cls, device: Device = None, priority: int = 0, **kwargs: Any) -> "Stream":
        if "stream_id" in kwargs:  # wrapping an existing stream: (stream_id, device_index, device_type)
            return super().__new__(cls, priority=priority, **kwargs)
        index = checked_index(device)
        return super().__new__(cls, torch.device(DEVICE_TYPE, index), priority=priority)


# torch.tpu.Event is torch.Event itself, as torch.mtia.Event is: torch 2.13's Event.elapsed_time only
# accepts an exact torch.Event, so a subclass could not be timed. `torch.tpu.Event(enable_timing=True)`
# makes an event of the current accelerator (tpu); it takes its device index from the stream that first
# records it, and `record()` / `wait()` without a stream use the current stream.
Event = torch.Event


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device: Device = None) -> Stream:
    """The current stream of a device (default: the current device)."""
    return _wrap(torch._C._accelerator_getStream(checked_index(device)))


def default_stream(device: Device = None) -> Stream:
    """The default stream of a device (stream id 0)."""
    s = torch._C._accelerator_getStream(checked_index(device))
    return Stream(stream_id=0, device_index=s.device_index, device_type=s.device_type)


def set_stream(stream: Optional[torch.Stream]) -> None:
    """Makes `stream` current on its device and selects that device (as torch.cuda.set_stream); None is a no-op."""
    if stream is None:
        return
    _state.lazy_init()
    check_index(stream.device_index)
    torch._C._accelerator_setStream(stream)


class StreamContext:
    """Context manager that selects a stream, restoring the previous streams and device on exit."""

    def __init__(self, stream: Optional[torch.Stream]) -> None:
        self.stream = stream
        self.src_prev_stream: Optional[Stream] = None
        self.dst_prev_stream: Optional[Stream] = None

    def __enter__(self) -> None:
        target = self.stream
        if target is None:
            return
        self.src_prev_stream = current_stream()
        if self.src_prev_stream.device_index != target.device_index:
            self.dst_prev_stream = current_stream(target.device_index)
        set_stream(target)

    def __exit__(self, *exc_info: object) -> None:
        if self.stream is None or self.src_prev_stream is None:
            return
        if self.dst_prev_stream is not None:
            set_stream(self.dst_prev_stream)
        set_stream(self.src_prev_stream)  # also reselects the original device


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    """`with torch.tpu.stream(s):` makes `s` the current stream inside the block; None is a no-op."""
    return StreamContext(stream)


__all__ = ["Event", "Stream", "StreamContext", "current_stream", "default_stream", "set_stream", "stream"]
