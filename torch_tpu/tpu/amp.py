"""Autocast support: `torch.autocast("tpu", dtype=torch.bfloat16)` asks this module which dtypes work."""
from __future__ import annotations

import torch


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Lower-precision dtypes autocast may use on tpu (bf16 is the TPU's native one)."""
    return [torch.bfloat16, torch.float16]


__all__ = ["get_amp_supported_dtype"]
