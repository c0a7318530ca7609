"""Per-device default generators (Philox4x32-10 in the runtime), named as in torch.cuda.random.

torch.manual_seed() and torch.seed() reach manual_seed_all() here because the device module has
`_is_in_bad_fork` and `manual_seed_all`.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch

from torch_tpu.tpu import _state
from torch_tpu.tpu._utils import Device, checked_index


def _generator(device: Device = None) -> torch.Generator:
    return _state.ext()._get_default_generator(checked_index(device))


def default_generators() -> tuple[torch.Generator, ...]:
    """The default generator of every device (torch.tpu.default_generators)."""
    return tuple(_generator(i) for i in range(_state.device_count()))


def get_rng_state(device: Device = "tpu") -> torch.Tensor:
    """The state of a device's default generator as a CPU ByteTensor."""
    return _generator(device).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    return [g.get_state() for g in default_generators()]


def set_rng_state(new_state: torch.Tensor, device: Device = "tpu") -> None:
    """Restores a state returned by get_rng_state()."""
    state = new_state.clone(memory_format=torch.contiguous_format)
    _generator(device).set_state(state)


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seeds every device's default generator."""
    for generator in default_generators():
        generator.manual_seed(int(seed))


def seed() -> None:
    """Seeds the current device's default generator with a non-deterministic random number."""
    _generator().seed()


def seed_all() -> None:
    """Seeds every device with one non-deterministic random number."""
    generators = default_generators()
    if not generators:
        return
    value = generators[0].seed()
    for generator in generators[1:]:
        generator.manual_seed(value)


def initial_seed() -> int:
    """The seed the current device's default generator was last seeded with."""
    return int(_generator().initial_seed())


__all__ = [
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
]
