"""Test-session checks shared by every test file.

- The session uses a fresh compilation-cache directory (TORCH_TPU_CACHE_DIR), never the user's.
- The suite must run without TORCH_TPU_CPU_FALLBACK: every op under test has to run on the device.
- No op may fall back to the CPU (torch_tpu.metrics()["fallback_ops"]): checked after each test (naming
  the ops) and at the end of the session, except inside tests that use the `allow_cpu_fallback` fixture.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

# The suite never reads or writes the user's compilation cache (~/.cache/torch_tpu) and never
# depends on an earlier run's: a fresh cache directory for this session (subprocesses inherit it),
# removed at exit. Set before `import torch` loads torch_tpu, which reads it.
_CACHE_DIR = tempfile.mkdtemp(prefix="torch_tpu_test_cache_")
os.environ["TORCH_TPU_CACHE_DIR"] = _CACHE_DIR
atexit.register(shutil.rmtree, _CACHE_DIR, True)

if os.environ.get("TORCH_TPU_CPU_FALLBACK", "") not in ("", "0"):
    raise pytest.UsageError(
        "the test suite must run without TORCH_TPU_CPU_FALLBACK (it is set to "
        f"{os.environ['TORCH_TPU_CPU_FALLBACK']!r}): tests check that ops run on the tpu device"
    )

import torch  # noqa: E402  (loads torch_tpu through the torch.backends entry point)
import torch_tpu  # noqa: E402,F401  (and registers it when autoload is disabled)

_allowed_fallbacks = 0


@pytest.fixture
def allow_cpu_fallback() -> Iterator[None]:
    """Turns the CPU fallback on for one test; its fallbacks are not held against the session."""
    global _allowed_fallbacks
    before = torch_tpu.metrics()["fallback_ops"]
    torch_tpu.set_cpu_fallback(True)
    try:
        yield
    finally:
        torch_tpu.set_cpu_fallback(False)
        _allowed_fallbacks += max(torch_tpu.metrics()["fallback_ops"] - before, 0)


@pytest.fixture(autouse=True)
def _no_cpu_fallback_in_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails the test (at teardown) that made an op fall back to the CPU, naming the ops."""
    if not torch.tpu.is_available():
        yield
        return
    before = torch_tpu.metrics()["fallback_counts"]
    yield
    if "allow_cpu_fallback" in request.fixturenames:
        return
    after = torch_tpu.metrics()["fallback_counts"]
    new = {op: n - before.get(op, 0) for op, n in after.items() if n > before.get(op, 0)}
    assert not new, f"ops fell back to the CPU in this test: {new}"


@pytest.fixture(scope="session", autouse=True)
def _no_cpu_fallbacks_in_session() -> Iterator[None]:
    yield
    if not torch.tpu.is_available():
        return
    m = torch_tpu.metrics()
    unexpected = m["fallback_ops"] - _allowed_fallbacks
    assert unexpected <= 0, (
        f"{unexpected} op(s) fell back to the CPU during the test session: {m['fallback_counts']}"
    )
