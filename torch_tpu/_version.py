"""The installed version of torch_tpu (from the package metadata, pyproject.toml)."""
from __future__ import annotations

from importlib import metadata


def _read_version() -> str:
    try:
        return metadata.version("torch_tpu")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "0.0.0+unknown"


__version__: str = _read_version()
