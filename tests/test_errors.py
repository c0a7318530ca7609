"""Bad input: clear Python exceptions in PyTorch's words, never a crash, and the device
keeps working afterwards."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu

UNSUPPORTED = "special_bessel_j0"  # an op torch_tpu does not lower (yet)


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("TORCH_TPU_CPU_FALLBACK", None)
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=e, timeout=300)


def test_shape_mismatch():
    a = torch.ones(2, 3, device="tpu")
    b = torch.ones(4, device="tpu")
    with pytest.raises(RuntimeError, match="must match the size"):
        a + b
    assert (a + 1).sum().item() == 12  # still usable


def test_inplace_dtype_cannot_cast():
    a = torch.ones(2, dtype=torch.long, device="tpu")
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        a.add_(torch.ones(2, device="tpu"))


def test_mixed_devices_name_both():
    with pytest.raises(RuntimeError, match=r"tpu:0 and cpu"):
        torch.ones(3, device="tpu") + torch.ones(3)


def test_cpu_scalar_tensor_is_allowed():
    out = torch.ones(3, device="tpu") * torch.tensor(2.0)
    assert out.cpu().tolist() == [2.0, 2.0, 2.0]


def test_unsupported_op_names_op_and_fallback():
    x = torch.ones(3, device="tpu")
    with pytest.raises(NotImplementedError) as ei:
        torch.special.bessel_j0(x)
    assert UNSUPPORTED in str(ei.value) and "TORCH_TPU_CPU_FALLBACK=1" in str(ei.value)
    assert torch_tpu.metrics()["fallback_ops"] == 0


def test_cpu_fallback_opt_in_counts_and_warns():
    r = _run("""
        import warnings, torch, torch_tpu
        x = torch.linspace(0.5, 2, 4).to("tpu")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            y = torch.special.bessel_j0(x)
            y2 = torch.special.bessel_j0(x)
        assert y.device.type == "tpu"
        torch.testing.assert_close(y.cpu(), torch.special.bessel_j0(x.cpu()))
        assert torch_tpu.metrics()["fallback_ops"] == 2, torch_tpu.metrics()
        assert sum("bessel_j0" in str(m.message) for m in w) == 1, [str(m.message) for m in w]
        print("ok")
    """, TORCH_TPU_CPU_FALLBACK="1")
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_out_of_memory_is_recoverable():
    r = _run("""
        import torch
        a = torch.empty(1 << 20, device="tpu")          # 4 MiB
        try:
            torch.empty(64 << 20, device="tpu")         # 256 MiB > capacity
        except torch.OutOfMemoryError as e:
            msg = str(e)
            assert "out of memory" in msg and "TORCH_TPU_HBM_BYTES" in msg, msg
        else:
            raise SystemExit("no OOM")
        b = torch.ones(1 << 20, device="tpu")           # the device still works
        assert b.sum().item() == float(1 << 20)
        print("ok")
    """, TORCH_TPU_HBM_BYTES="64M")
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_index_out_of_range_surfaces_at_sync():
    x = torch.arange(6.0).to("tpu")
    idx = torch.tensor([1, 10]).to("tpu")
    with pytest.raises((IndexError, RuntimeError), match="out of bounds"):
        torch.index_select(x, 0, idx).cpu()
    assert x.sum().item() == 15.0  # error cleared, device usable


def test_index_out_of_range_launch_blocking_is_immediate():
    r = _run("""
        import torch
        x = torch.arange(6.0).to("tpu")
        idx = torch.tensor([10]).to("tpu")
        try:
            torch.index_select(x, 0, idx)
        except (IndexError, RuntimeError) as e:
            assert "out of bounds" in str(e), e
            print("ok")
    """, TORCH_TPU_LAUNCH_BLOCKING="1")
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


@pytest.mark.parametrize("var,value", [("TORCH_TPU_NUM_DEVICES", "zero"), ("TORCH_TPU_HBM_BYTES", "-5"),
                                       ("TORCH_TPU_LAUNCH_BLOCKING", "maybe"), ("TORCH_TPU_POOL_WAIT_US", "1ms"),
                                       ("TORCH_TPU_POOL_WAIT_US", "100001"), ("TORCH_TPU_EXEC_PROFILE", "yes")])
def test_invalid_env_fails_at_import(var, value):
    r = _run("import torch; print(torch.ones(1, device='tpu'))", **{var: value})
    assert r.returncode != 0 and var in r.stderr


@pytest.mark.parametrize("call,msg", [
    (lambda x: x.normal_(0, -1), "normal expects std >= 0.0"),
    (lambda x: x.uniform_(2, 1), r"uniform_ expects to return a \[from, to\) range"),
    (lambda x: x.bernoulli_(1.5), r"bernoulli_ expects p to be in \[0, 1\]"),
])
def test_runtime_scalar_values_checked_synchronously(call, msg):
    x = torch.empty(5, device="tpu")
    with pytest.raises(RuntimeError, match=msg):
        call(x)
    assert x.normal_(0, 1).isfinite().all().item()  # a valid value reuses the same executable
