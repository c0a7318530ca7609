"""torch_tpu loads itself during `import torch` (the torch.backends entry point), in fresh interpreters."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest


def _run(code: str, **env_vars: str) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh interpreter with no TORCH_TPU_* variables except `env_vars`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TORCH_TPU_") and k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    env.update(env_vars)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=300)


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def test_entry_point_is_registered() -> None:
    eps = [ep for ep in metadata.entry_points(group="torch.backends") if ep.name == "torch_tpu"]
    assert len(eps) == 1
    assert eps[0].value == "torch_tpu:_autoload"


def test_import_torch_is_enough() -> None:
    out = _ok(_run("""
        import sys
        import torch
        assert "torch_tpu" in sys.modules
        x = torch.ones(3, device="tpu")
        assert x.device == torch.device("tpu", 0)
        print(x.cpu().tolist(), torch.tpu.device_count())
    """))
    assert out.split() == ["[1.0,", "1.0,", "1.0]", "1"]


def test_import_torch_tpu_before_torch() -> None:
    # torch's autoload then runs while torch_tpu is still importing torch
    out = _ok(_run("""
        import torch_tpu
        import torch
        print(torch.ones(2, device="tpu").cpu().tolist(), torch.tpu is torch_tpu.tpu)
    """))
    assert out.split() == ["[1.0,", "1.0]", "True"]


def test_autoload_can_be_disabled() -> None:
    out = _ok(_run("""
        import sys
        import torch
        assert "torch_tpu" not in sys.modules
        assert not hasattr(torch, "tpu")
        try:
            torch.device("tpu")
        except RuntimeError:
            print("no tpu")
        import torch_tpu  # explicit import still works
        print(torch.ones(2, device="tpu").cpu().tolist())
    """, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert out.splitlines() == ["no tpu", "[1.0, 1.0]"]


@pytest.mark.parametrize(
    "name,value",
    [
        ("TORCH_TPU_NUM_DEVICES", "two"),
        ("TORCH_TPU_NUM_DEVICES", "0"),
        ("TORCH_TPU_NUM_DEVICES", "1000"),
        ("TORCH_TPU_HBM_BYTES", "lots"),
        ("TORCH_TPU_HBM_BYTES", "-5"),
        ("TORCH_TPU_NUM_THREADS", "many"),
        ("TORCH_TPU_CPU_FALLBACK", "yes please"),
    ],
)
def test_invalid_env_value_fails_loudly(name: str, value: str) -> None:
    proc = _run("import torch", **{name: value})
    assert proc.returncode != 0
    assert "Failed to load the backend extension: torch_tpu" in proc.stderr
    assert name in proc.stderr, proc.stderr  # our message is chained as the cause


@pytest.mark.parametrize("name", ["TORCH_TPU_NUM_DEVICES", "TORCH_TPU_CPU_FALLBACK"])
def test_invalid_env_value_fails_explicit_import(name: str) -> None:
    proc = _run("import torch_tpu", TORCH_DEVICE_BACKEND_AUTOLOAD="0", **{name: "bogus"})
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert name in last and "bogus" in last, proc.stderr


def test_num_devices() -> None:
    out = _ok(_run("""
        import torch
        print(torch.tpu.device_count(), torch.accelerator.device_count())
        print(torch.ones(2, device="tpu:1").cpu().tolist())
    """, TORCH_TPU_NUM_DEVICES="2"))
    assert out.splitlines() == ["2 2", "[1.0, 1.0]"]


def test_hbm_bytes_sets_capacity() -> None:
    out = _ok(_run("""
        import torch
        print(torch.tpu.get_device_properties().total_memory, torch.tpu.mem_get_info()[1])
    """, TORCH_TPU_HBM_BYTES="64M"))
    assert out.split() == [str(64 << 20)] * 2


def test_runtime_switches() -> None:
    out = _ok(_run("""
        import torch, torch_tpu
        props = torch.tpu.get_device_properties()
        print(torch_tpu.cpu_fallback_enabled(), props.launch_blocking, props.num_threads)
    """, TORCH_TPU_CPU_FALLBACK="1", TORCH_TPU_LAUNCH_BLOCKING="1", TORCH_TPU_NUM_THREADS="3"))
    assert out.split() == ["True", "True", "3"]


def test_missing_extension_does_not_break_import_torch() -> None:
    out = _ok(_run("""
        import importlib.abc, sys, warnings

        class HideExtension(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "torch_tpu._C":
                    raise ImportError("simulated: extension not built")
                return None

        sys.meta_path.insert(0, HideExtension())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch
        assert any("unavailable" in str(w.message) for w in caught), [str(w.message) for w in caught]
        print(torch.tpu.is_available(), torch.tpu.device_count())
        try:
            torch.tpu.synchronize()
        except RuntimeError as exc:
            print("simulated: extension not built" in str(exc))
    """))
    assert out.split() == ["False", "0", "True"]
