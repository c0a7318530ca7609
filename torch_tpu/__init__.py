"""torch_tpu: the TPU as an ordinary PyTorch device, "tpu".

Importing torch_tpu (which `import torch` does through the `torch.backends` entry point, unless
TORCH_DEVICE_BACKEND_AUTOLOAD=0) loads the extension, initializes the runtime from the TORCH_TPU_*
environment variables, and registers the device: `torch.tpu` (see torch_tpu.tpu), Tensor.tpu(),
Module.tpu(), storages, and `torch.accelerator`.

An invalid TORCH_TPU_* value raises at import with a message naming the variable. If the extension
cannot be loaded, a warning says why and torch.tpu reports 0 devices, so `import torch` still works.
"""
from __future__ import annotations


def _autoload() -> None:
    """The `torch.backends` entry point torch calls during `import torch`.

    Loading the entry point imports this package, whose body does all the work; an invalid TORCH_TPU_*
    variable raises there, and torch reports it as "Failed to load the backend extension: torch_tpu"
    with our message as the cause. Defined before any import: when torch_tpu is imported first, torch's
    autoload runs while this module is still at its `import torch` line and must find this function.
    """


import atexit  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402  (during autoload: the partly imported torch; only its finished parts are used)

from torch_tpu import _backend, _conv_meta, _env, cache, tpu  # noqa: E402
from torch_tpu._metrics import cpu_fallback_enabled, metrics, reset_metrics, set_cpu_fallback  # noqa: E402
from torch_tpu._compile import recompile_reasons  # noqa: E402  (torch.compile(backend="tpu"): entry point)
from torch_tpu._fused import flush, fused_eager, fused_eager_enabled, set_fused_eager  # noqa: E402
from torch_tpu._version import __version__  # noqa: E402
from torch_tpu.tpu import _state  # noqa: E402


def _load() -> None:
    fallback = _env.cpu_fallback_requested()  # validate every variable before touching torch
    _env.read_bool("TORCH_TPU_COMPILE_STRICT")  # validated here; read when torch.compile(backend="tpu") runs
    _env.read_bool("TORCH_TPU_FUSED_EAGER")  # validated here too; libtpurt reads it at its first op
    _env.read_bool("TORCH_TPU_GEMM_BF16")  # validated here; libtpurt reads it at its first bf16 GEMM
    _env.read_bool("TORCH_TPU_EXEC_PROFILE")  # validated here; the host executor reads it at its first run
    _env.size_templates_enabled()  # TORCH_TPU_SIZE_TEMPLATES, validated here; read when a compiled graph runs
    _state.init_at_import()
    _backend.register(tpu)
    _conv_meta.register()  # meta kernels for the convolution ops the glue registers by name
    if _state.unavailable_reason() is not None:
        warnings.warn(
            f"torch_tpu: the 'tpu' device is unavailable: {_state.unavailable_reason()}",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    _state.ext()._set_cpu_fallback(fallback)
    cache._init_at_import()  # an invalid TORCH_TPU_CACHE_MAX_BYTES raises; an unusable directory warns once
    atexit.register(_drain_autograd_at_exit)


def _drain_autograd_at_exit() -> None:
    """Before the interpreter finalizes: lets the autograd engine's tpu threads release the last backward's objects
    while the GIL can still be taken (a script ending right after loss.backward() aborted in ~1 of 4 runs with
    "terminate called without an active exception"; csrc/glue/module.cpp drain_autograd_threads says why)."""
    if _state.is_initialized():
        _state.ext()._drain_autograd_threads()


_load()


__all__ = [
    "__version__",
    "cache",
    "cpu_fallback_enabled",
    "flush",
    "fused_eager",
    "fused_eager_enabled",
    "metrics",
    "recompile_reasons",
    "reset_metrics",
    "set_cpu_fallback",
    "set_fused_eager",
    "tpu",
]
