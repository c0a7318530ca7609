"""Registers the tpu device with PyTorch (PrivateUse1 renamed to "tpu"). Safe to run more than once."""
from __future__ import annotations

from types import ModuleType

import torch

DEVICE_TYPE = "tpu"


def register(device_module: ModuleType) -> None:
    current = torch._C._get_privateuse1_backend_name()
    if current != DEVICE_TYPE:
        if current != "privateuseone":
            raise RuntimeError(
                f"torch_tpu cannot register the '{DEVICE_TYPE}' device: the PrivateUse1 backend is already "
                f"registered as '{current}' by another extension in this process"
            )
        torch.utils.rename_privateuse1_backend(DEVICE_TYPE)
    if getattr(torch, DEVICE_TYPE, None) is None:
        torch._register_device_module(DEVICE_TYPE, device_module)
    if not hasattr(torch.Tensor, DEVICE_TYPE):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_storage=True
        )
